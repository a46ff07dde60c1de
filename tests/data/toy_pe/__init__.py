"""A positional encoding from outside tupe_plugin, as a user would add one: one file (``linear_bias.py``) and one
registry line. ``fairseq-train --user-dir tests/data/toy_pe --arch toy_linear_bias_tiny`` trains it
(tests/test_extending.py)."""
import tupe_plugin  # noqa: F401  (registers tupe_roberta and the built-in variants)
from tupe_core.registry import register

from .linear_bias import LinearDistanceBias

register("toy_linear_bias", "a learned slope per head times -|j-i| (a test of docs/extending.md)",
         encoding=LinearDistanceBias)
