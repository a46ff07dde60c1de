"""KERPLE's logarithmic kernel (Chi, Fan, Ramadge & Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for
Length Extrapolation", NeurIPS 2022), bidirectional: ``a_ij += -r1_h log(1 + r2_h |j - i|)`` with ``r1_h, r2_h > 0``
learned per head, one pair for all layers.

What the authors' code does (chijames/KERPLE 73f1ee2, ``megatron/mpu/layers.py``, ``ParallelKerpleLog``) and how we
follow it: r1 starts as 2 U(0, 1) and r2 as U(0, 1), per head, at least 0.01 (its ``eps``). It keeps them positive by
clamping the parameters themselves at 0.01 in every forward (``bias_p.data = bias_p.data.clamp(min=eps)``); here each
is the softplus of a free parameter, positive by construction, and nothing writes into a parameter during the
forward (a write there would be undone by fairseq's fp16 master copy). Its model is causal (keys on the left); an
encoder uses both directions, as ALiBi's encoder form does.
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import AS_IS, BIAS, PositionalEncoding, PositionalTerm, check_length

SMALLEST_START = 0.01  # the authors' eps: no r starts below it


def softplus_inverse(r: Tensor) -> Tensor:
    """The free parameter whose softplus is ``r`` (> 0): ``log(exp(r) - 1)``."""
    return torch.log(torch.expm1(r))


class Kerple(PositionalEncoding):
    """An (H, T, T) bias, shared by the batch and the layers, with two learned positive scalars per head."""

    enters = BIAS
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    name = "kerple"  # no flags, no options: only its arch selects it

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        r1 = (2 * torch.rand(num_heads)).clamp(min=SMALLEST_START)  # the authors' draws
        r2 = torch.rand(num_heads).clamp(min=SMALLEST_START)
        self.r1_free = nn.Parameter(softplus_inverse(r1))  # r1 = softplus(r1_free), (H,)
        self.r2_free = nn.Parameter(softplus_inverse(r2))

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        return {"distance": (idx[None, :] - idx[:, None]).abs()}  # (P, P)

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        r1 = F.softplus(self.r1_free).view(-1, 1, 1)  # (H, 1, 1)
        r2 = F.softplus(self.r2_free).view(-1, 1, 1)
        return PositionalTerm(-r1 * torch.log1p(r2 * self.distance[:seq_len, :seq_len]))  # (H, T, T)
