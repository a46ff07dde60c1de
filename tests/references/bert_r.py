"""BERT-R (TUPE Table 1): BERT-A's input positions plus T5's bias without [CLS] buckets."""
from references._shared import content_plus
from references.t5_rel import differentiable, positional  # noqa: F401  (declared as this variant's too)
from tupe_core.base import BIAS

ENTERS, INPUT, SCALE = BIAS, "LearnedAbsolute", 1
BEYOND = "absolute"  # its input positions are learned rows
ARCH_ONLY = False

layer0_logits = content_plus(SCALE, positional)
