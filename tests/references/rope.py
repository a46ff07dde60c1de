"""RoPE (Su et al., RoFormer): q and k of every layer rotated by position (pairs m, m + dh/2), plain scale; its
position signal depends on content, so there is no position-only map."""
from references._shared import content, rope_reference
from tupe_core.base import ROTATION

ENTERS, INPUT, SCALE = ROTATION, None, 1
BEYOND = None  # a fixed function of the position
ARCH_ONLY = False

positional = None


def layer0_logits(model, attn, term, q, k, h):
    return content(rope_reference(q), rope_reference(k), SCALE)


def position_map(model, T: int):
    return None  # tupe-pos-maps refuses: the rotation acts on content vectors
