"""The fixed Gaussian distance prior of the Locality & Symmetry paper's code (``attenuated.py``, Chen et al.
2023): ``a_ij += softmax_j(-0.5 (j - i)^2)`` in every layer and head, no parameters.

The softmax runs over all ``max_positions`` keys, as for the official code's inputs padded to max_len, so the
prior of a sequence does not depend on the padding of its batch.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from .base import BIAS, DISTANCE_PRIOR, POSITIONS, PositionalEncoding, PositionalTerm, at_positions, check_length


class GaussianPrior(PositionalEncoding):
    """``--distance-prior gaussian``: one fixed (H, T, T) bias, the same for every head."""

    enters = BIAS
    left_padding = POSITIONS  # rows normalised over all P keys: row i depends on i, not on j - i alone
    name = "gaussian_prior"
    flags = (DISTANCE_PRIOR,)
    selected_by = {"distance_prior": "gaussian"}

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        distance = (idx[None, :] - idx[:, None]).abs().double()  # (P, P)
        return {"gaussian_prior": torch.softmax(-0.5 * distance**2, dim=-1).float()}  # rows normalised once

    def forward(self, seq_len: int, position_ids: Optional[Tensor] = None) -> PositionalTerm:
        """(H, T, T); with ``position_ids`` (a left-padded batch) (B, H, T, T) at each token's position."""
        check_length(seq_len, self.max_positions)
        T, H = seq_len, self.num_heads
        prior = self.gaussian_prior[:T, :T]
        if position_ids is not None:
            return PositionalTerm(at_positions(prior[None], position_ids).expand(-1, H, T, T))
        return PositionalTerm(prior.expand(H, T, T))
