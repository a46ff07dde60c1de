"""A toy encoding: ``a_ij += -s_h |j - i|`` with a learned slope ``s_h`` per head (ALiBi with learned slopes)."""
from typing import Dict

import torch
from torch import Tensor, nn

from tupe_core.base import BIAS, PositionalEncoding, PositionalTerm, check_length


class LinearDistanceBias(PositionalEncoding):
    enters = BIAS
    name = "toy_linear_distance"  # its name in the checkpoint record; no options, no flags: its arch selects it

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.slope = nn.Parameter(torch.full((num_heads,), 0.5))

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        return {"distance": (idx[None, :] - idx[:, None]).abs().float()}

    def initial_values(self) -> Dict[str, Tensor]:
        return {**self.fixed_tables(), "slope": torch.full((self.num_heads,), 0.5)}

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        return PositionalTerm(-self.slope[:, None, None] * self.distance[:seq_len, :seq_len])  # (H, T, T)
