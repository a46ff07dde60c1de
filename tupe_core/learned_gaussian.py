"""The learned distance prior of the Locality & Symmetry paper's code (``attenuated_l.py``, Chen et al. 2023):
``a_ij += w[l, h, |j - i|]``, a learned scalar per layer, head and distance, initialised to
``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` (about 0.570, 0.346, 0.077, 0.006 for d = 0..3).
Symmetric by construction; each layer gets its own matrix (with ``--encoder-layerdrop``, the layers that run
receive the matrix of their own index).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .base import AS_IS, DISTANCE_PRIOR, LAYER_BIAS, PositionalEncoding, PositionalTerm, check_length


def gaussian_by_distance(max_positions: int) -> Tensor:
    """(max_positions,): ``exp(-0.5 d^2) / sum_{d < max_positions} exp(-0.5 d^2)`` for ``d = 0 .. P-1``, in
    float64 then float32: the L&S code's initial weight per distance (``attenuated_l.py``, the PAM blocks)."""
    d = torch.arange(max_positions, dtype=torch.float64)
    w = torch.exp(-0.5 * d**2)
    return (w / w.sum()).float()


class LearnedGaussian(PositionalEncoding):
    """``--distance-prior learned_gaussian``: an (L, H, T, T) bias, one matrix per layer."""

    enters = LAYER_BIAS
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    name = "learned_gaussian"
    flags = (DISTANCE_PRIOR,)
    selected_by = {"distance_prior": "learned_gaussian"}

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.distance_bias = nn.Parameter(self.initial_values()["distance_bias"])  # (L, H, P)

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        return {"distance": (idx[None, :] - idx[:, None]).abs()}  # (P, P)

    def initial_values(self) -> Dict[str, Tensor]:
        start = gaussian_by_distance(self.max_positions).repeat(self.num_layers, self.num_heads, 1)  # (L, H, P)
        return {**self.fixed_tables(), "distance_bias": start}

    def trained_positions(self, encoder_state) -> Optional[int]:
        table = encoder_state.get("positions.distance_bias")  # (L, H, max_positions): one column per distance
        return None if table is None else table.size(-1)

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        return PositionalTerm(self.distance_bias[:, :, self.distance[:seq_len, :seq_len]])  # (L, H, T, T)

    @classmethod
    def untrained_beyond(cls, options, trained: int) -> Optional[str]:
        return "a learned weight per distance |j-i|: the distances of T and more were never trained"
