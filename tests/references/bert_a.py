"""BERT-A (TUPE Table 1): fairseq's learned absolute positions added to the words; plain content logits."""
from references._shared import content_plus
from tupe_core.base import NONE

ENTERS, INPUT, SCALE = NONE, "LearnedAbsolute", 1
BEYOND = "absolute"  # a learned row per position: rows beyond the trained length were never trained
ARCH_ONLY = False

positional = None
layer0_logits = content_plus(SCALE, positional)
