"""Every positional encoding, one module each, with the plain-torch model code they plug into.

* ``base.py``: ``PositionalEncoding`` (what an encoding declares) and ``PositionalTerm``;
* one file per encoding: ``learned_absolute``, ``sinusoidal``, ``tupe``, ``bert_ad``, ``t5_relative``,
  ``gaussian_prior``, ``learned_gaussian``, ``alibi``, ``rope``, ``deberta``, ``pam``;
* ``record.py`` (the checkpoint record of a variant) and ``registry.py`` (the variants, and which encodings a
  record builds);
* the attention core every block uses (``attention.py``, ``attend.py``, ``masks.py``, ``take_columns.py``) and
  the encoder's forward shared by the fairseq model and the exported one (``encoder_stack.py``).

Plain torch, no fairseq import, and no import from the rest of ``tupe_plugin``: ``tupe-export-hf`` ships every
module of this package, as it is, into the exported model folder (single-dot imports only).
"""
from .base import PositionalEncoding, PositionalTerm  # noqa: F401
from .record import PositionalVariant  # noqa: F401
from .registry import ABOUT, VARIANTS, build, encodings, register  # noqa: F401
