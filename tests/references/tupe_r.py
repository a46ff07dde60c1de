"""TUPE-R (TUPE Eq. 11): TUPE-A's term, then the T5 bias with its own [CLS] buckets (16 for row 0, 32 for column 0);
declared as TUPE-A otherwise."""
from references._shared import content_plus, t5_bias, t5_bias_obvious, untied_term, untied_term_obvious
from references.tupe_a import ARCH_ONLY, BEYOND, ENTERS, INPUT, SCALE  # noqa: F401  (the same declarations)


def positional(model, T: int, layer: int = 0):
    return untied_term(model, T, untie_cls=True) + t5_bias(model, T, cls_buckets=True)


def differentiable(pos, T: int):
    return untied_term_obvious(pos, T, untie_cls=True) + t5_bias_obvious(pos, T, cls_buckets=True)


layer0_logits = content_plus(SCALE, positional)
