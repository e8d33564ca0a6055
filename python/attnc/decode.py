"""FlashInfer's ``flashinfer.decode`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import BatchDecodeWithPagedKVCacheWrapper, single_decode_with_kv_cache  # noqa: F401
