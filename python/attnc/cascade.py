"""FlashInfer's ``flashinfer.cascade`` names, served by attnc (see _flashinfer)."""
from ._flashinfer import merge_state, merge_state_in_place, merge_states  # noqa: F401
