"""No position information: plain content logits, a map of zeros; reachable only through its archs."""
import torch

from references._shared import content_plus, positions
from tupe_core.base import NONE

ENTERS, INPUT, SCALE = NONE, None, 1
BEYOND = None  # no positions at all
ARCH_ONLY = True

positional = None
layer0_logits = content_plus(SCALE, positional)


def position_map(model, T: int):
    return torch.zeros(positions(model).num_heads, T, T, dtype=torch.float64)
