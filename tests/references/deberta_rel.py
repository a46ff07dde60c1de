"""DeBERTa v1's disentangled attention: (c2c + c2p + p2c) / sqrt(3 dh), k = --max-rel-pos (128); its position
signal depends on content, so there is no position-only map."""
import math

from references._shared import content, deberta_reference
from tupe_core.base import BLOCK

ENTERS, INPUT, SCALE = BLOCK, None, 3  # DeBERTa: scale_factor = 1 + len(["c2p", "p2c"])
BEYOND = "k = 128"  # distances past k share the clipped rows
ARCH_ONLY = False

positional = None


def layer0_logits(model, attn, term, q, k, h):
    T = q.size(-2)
    return content(q, k, SCALE) + deberta_reference(model, attn, q, k, h, T) / math.sqrt(SCALE * q.size(-1))


def position_map(model, T: int):
    return None  # tupe-pos-maps refuses: c2p and p2c multiply content vectors
