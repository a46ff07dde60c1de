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


def scaled_rotation(x, scaling: str, s: float, trained: int = 0):
    """RoPE of (..., T, dh) with ``--rope-scaling`` (docs/positional_encodings.md, "RoPE scaling"), by loops:
    pair (m, m + dh/2) at position t turns by ``t theta'_m``, then is multiplied by YaRN's ``sqrt(1/t)``.

    linear (Chen et al. 2023): ``theta'_m = theta_m / s``; ntk: ``theta'_m = (10000 s^(dh/(dh-2)))^(-2m/dh)``; yarn
    (Peng et al. 2023, Eq. 17-20, alpha 1, beta 32): ``r = T theta_m / (2 pi)``, ``g = 0 if r < 1, 1 if r > 32, else
    (r - 1) / 31``, ``theta'_m = (1 - g) theta_m / s + g theta_m``, and q, k times ``0.1 ln s + 1``."""
    import math

    out = x.clone()
    dh = x.size(-1)
    for m in range(dh // 2):
        theta = 10000.0 ** (-2.0 * m / dh)
        if scaling == "linear":
            theta = theta / s
        elif scaling == "ntk":
            theta = (10000.0 * s ** (dh / (dh - 2))) ** (-2.0 * m / dh)
        elif scaling == "yarn":
            r = trained / (2 * math.pi / theta)
            g = 0.0 if r < 1 else 1.0 if r > 32 else (r - 1) / (32 - 1)
            theta = (1 - g) * theta / s + g * theta
        temperature = 0.1 * math.log(s) + 1 if scaling == "yarn" else 1.0
        for t in range(x.size(-2)):
            a = t * theta
            x1, x2 = x[..., t, m], x[..., t, m + dh // 2]
            out[..., t, m] = (x1 * math.cos(a) - x2 * math.sin(a)) * temperature
            out[..., t, m + dh // 2] = (x2 * math.cos(a) + x1 * math.sin(a)) * temperature
    return out
