"""A toy encoding: ``a_ij += -s_h |j - i|`` with a learned slope ``s_h`` per head (ALiBi with learned slopes), and
one option, the slopes' start (``--toy-initial-slope``)."""
from dataclasses import dataclass
from typing import Dict

import torch
from torch import Tensor, nn

from tupe_core.base import BIAS, PositionalEncoding, PositionalTerm, check_length
from tupe_core.options import option


@dataclass(frozen=True)
class LinearDistanceOptions:
    toy_initial_slope: float = option(0.5, "the toy's slopes at initialisation")


class LinearDistanceBias(PositionalEncoding):
    enters = BIAS
    name = "toy_linear_distance"  # its name in the checkpoint record; no flag selects it: its arch does
    Options = LinearDistanceOptions

    @classmethod
    def validate(cls, options: LinearDistanceOptions) -> None:
        super().validate(options)
        if not options.toy_initial_slope > 0:
            raise ValueError(f"--toy-initial-slope must be positive, got {options.toy_initial_slope}")

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.slope = nn.Parameter(torch.full((num_heads,), options.toy_initial_slope))

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx = torch.arange(self.max_positions)
        return {"distance": (idx[None, :] - idx[:, None]).abs().float()}

    def initial_values(self) -> Dict[str, Tensor]:
        return {**self.fixed_tables(), "slope": torch.full((self.num_heads,), self.options.toy_initial_slope)}

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        return PositionalTerm(-self.slope[:, None, None] * self.distance[:seq_len, :seq_len])  # (H, T, T)
