"""PAM concat (L&S code's concat.py): learned |j-i| weights used as attention weights in its own block; the
block's output is checked against loops in tests/test_pam.py."""
from tupe_core.base import BLOCK

ENTERS, INPUT, SCALE = BLOCK, None, 1
BEYOND = ""  # a learned weight per distance
ARCH_ONLY = False

positional = None
layer0_logits = None  # not a softmax of logits alone: tests/test_pam.py
