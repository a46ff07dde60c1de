"""PAM window (L&S code's bert.py PAMBlock): fixed 1/3 on i-1, i, i+1 in its own block; the block's output is
checked against loops in tests/test_pam.py."""
from tupe_core.base import BLOCK

ENTERS, INPUT, SCALE = BLOCK, None, 1
BEYOND = None  # a fixed band
ARCH_ONLY = False

positional = None
layer0_logits = None  # not a softmax of logits alone: tests/test_pam.py
