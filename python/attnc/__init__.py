"""attnc from Python: compile attention specs on first use and call the
generated CPU kernels over numpy arrays or CPU torch tensors, directly
(``attnc.compile(spec)["name"].prefill(...)``) or through FlashInfer's
wrapper API (``import attnc as flashinfer``).

The package is pure Python over ctypes; numpy is required, torch optional.
It owns no kernel code: everything it runs comes from ``attnc build
--shared`` (see _build for how the binary is found and the cache keyed).
"""

from ._build import CompileError, default_cache_dir, find_attnc
from ._core import Error, Kernel, Module, Variant, compile, get_num_threads, load, set_num_threads
from ._flashinfer import (
    BatchDecodeWithPagedKVCacheWrapper,
    BatchMLAPagedAttentionWrapper,
    BatchPrefillWithPagedKVCacheWrapper,
    BatchPrefillWithRaggedKVCacheWrapper,
    append_paged_kv_cache,
    get_batch_indices_positions,
    get_seq_lens,
    merge_state,
    merge_state_in_place,
    merge_states,
    single_decode_with_kv_cache,
    single_prefill_with_kv_cache,
)
from . import cascade, decode, mla, page, prefill  # noqa: F401  (flashinfer.decode, ... as in FlashInfer)

__version__ = "0.1.0"

__all__ = [
    "compile", "load", "Module", "Variant", "Kernel", "Error", "CompileError",
    "set_num_threads", "get_num_threads", "default_cache_dir", "find_attnc",
    "BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper", "BatchMLAPagedAttentionWrapper",
    "merge_state", "merge_state_in_place", "append_paged_kv_cache",
    "get_batch_indices_positions", "get_seq_lens", "merge_states",
    "single_decode_with_kv_cache", "single_prefill_with_kv_cache",
]
