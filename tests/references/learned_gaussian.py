"""The L&S learned prior (attenuated_l.py): ``w[l, h, |j - i|]``, one table per layer."""
from references._shared import by_distance, content_plus, positions
from tupe_core.base import LAYER_BIAS

ENTERS, INPUT, SCALE = LAYER_BIAS, None, 1  # L&S: 1/sqrt(dh)
BEYOND = ""  # a learned weight per distance
ARCH_ONLY = False


def positional(model, T: int, layer: int = 0):
    return by_distance(positions(model).distance_bias[layer].detach(), T)  # (L, H, max_positions)


layer0_logits = content_plus(SCALE, positional)
