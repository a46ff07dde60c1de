"""TUPE-A without the [CLS] reset (TUPE Table 1): the untied term on every entry; declared as TUPE-A otherwise."""
from functools import partial

from references._shared import content_plus, untied_term, untied_term_obvious
from references.tupe_a import ARCH_ONLY, BEYOND, ENTERS, INPUT, SCALE  # noqa: F401  (the same declarations)

positional = partial(untied_term, untie_cls=False)
differentiable = partial(untied_term_obvious, untie_cls=False)
layer0_logits = content_plus(SCALE, positional)
