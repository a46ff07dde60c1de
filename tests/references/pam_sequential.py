"""PAM sequential (L&S code's seuqence.py): declared as PAM concat (its own block, learned |j-i| weights); the
block's output is checked against loops in tests/test_pam.py."""
from references.pam_concat import ARCH_ONLY, BEYOND, ENTERS, INPUT, SCALE, layer0_logits, positional  # noqa: F401
