"""FlashInfer's ``flashinfer.mla`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import BatchMLAPagedAttentionWrapper  # noqa: F401
