"""The L&S fixed prior (attenuated.py): ``softmax_j(-0.5 (j - i)^2)`` over all max_positions keys, every head."""
import math

import torch

from references._shared import content_plus, positions
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 1  # L&S: 1/sqrt(dh)
BEYOND = None  # a fixed function of the distance
ARCH_ONLY = False


def positional(model, T: int, layer: int = 0):
    pos = positions(model)
    out = torch.zeros(pos.num_heads, T, T, dtype=torch.float64)
    for i in range(T):  # normalised over all max_positions keys (padding-independent)
        row = [math.exp(-0.5 * (j - i) ** 2) for j in range(pos.max_positions)]
        for j in range(T):
            out[:, i, j] = row[j] / sum(row)
    return out


layer0_logits = content_plus(SCALE, positional)
