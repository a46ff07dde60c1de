"""ALiBi (Press et al. 2022), bidirectional: ``a_ij += -m_h |j - i|`` with fixed head slopes, no parameters."""
from __future__ import annotations

import math
from typing import Dict, List

import torch
from torch import Tensor

from .base import AS_IS, BIAS, PositionalEncoding, PositionalTerm, check_length
from .options import Flag


def alibi_slopes(num_heads: int) -> List[float]:
    """Press et al.'s head slopes: ``2^(-8 h / n)`` for ``h = 1..n`` when ``n`` is a power of 2; otherwise
    the slopes of the closest smaller power of 2, then every other slope of twice that number."""
    def power_of_2(n: int) -> List[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_2(num_heads)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]


class Alibi(PositionalEncoding):
    """``--alibi``: an (H, T, T) bias that needs no gradient."""

    enters = BIAS
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning

    name = "alibi"
    flags = (Flag("alibi", False, "ALiBi: add -m_h |j-i| to the logits (bidirectional)"),)
    selected_by = {"alibi": True}

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        return {"distance": (idx[None, :] - idx[:, None]).abs(), "alibi_slopes": torch.tensor(alibi_slopes(self.num_heads))}

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        T = seq_len
        return PositionalTerm(-self.alibi_slopes.view(self.num_heads, 1, 1) * self.distance[:T, :T])  # (H, T, T)
