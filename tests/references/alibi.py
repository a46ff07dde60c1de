"""ALiBi (Press et al. 2022), bidirectional: ``-m_h |j - i|``, ``m_h = 2^(-8 h / H)`` for a power-of-2 head count."""
import torch

from references._shared import content_plus, positions
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 1
BEYOND = None  # a fixed function of the distance
ARCH_ONLY = False


def positional(model, T: int, layer: int = 0):
    H = positions(model).num_heads
    assert H & (H - 1) == 0, "the loop knows the slopes of a power-of-2 head count (4 at tiny size)"
    out = torch.zeros(H, T, T, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                out[h, i, j] = -(2.0 ** (-8.0 * (h + 1) / H)) * abs(j - i)
    return out


layer0_logits = content_plus(SCALE, positional)
position_map = positional
