"""FlashInfer's ``flashinfer.prefill`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import (  # noqa: F401
    BatchPrefillWithPagedKVCacheWrapper,
    BatchPrefillWithRaggedKVCacheWrapper,
    single_prefill_with_kv_cache,
)
