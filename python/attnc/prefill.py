"""FlashInfer's ``flashinfer.prefill`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import BatchPrefillWithPagedKVCacheWrapper, single_prefill_with_kv_cache  # noqa: F401
