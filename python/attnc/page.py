"""FlashInfer's ``flashinfer.page`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import append_paged_kv_cache, get_batch_indices_positions, get_seq_lens  # noqa: F401
