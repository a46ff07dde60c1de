"""TUPE-A (TUPE Eq. 10): the untied absolute term with the [CLS] reset, content and term at (2 dh)^-0.5."""
from functools import partial

from references._shared import content_plus, untied_term, untied_term_obvious
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, None, 2  # TUPE: scale factor 2
BEYOND = ""  # a learned row per position
ARCH_ONLY = False

positional = partial(untied_term, untie_cls=True)
differentiable = partial(untied_term_obvious, untie_cls=True)
layer0_logits = content_plus(SCALE, positional)
