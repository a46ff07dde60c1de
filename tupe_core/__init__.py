"""The model core: every positional encoding, the attention core, the encoder's forward, the kernels and the
model's facts, in plain torch (no fairseq, no transformers, nothing of ``tupe_plugin``).

* ``base.py``: ``PositionalEncoding`` (what an encoding declares) and ``PositionalTerm``;
* one file per encoding: ``learned_absolute``, ``sinusoidal``, ``tupe``, ``bert_ad``, ``t5_relative``,
  ``gaussian_prior``, ``learned_gaussian``, ``alibi``, ``kerple``, ``rope``, ``deberta``, ``pam``;
* ``options.py`` (what an encoding's options and flags are), ``record.py`` (a variant: (encoding, its options)
  per encoding, and its JSON checkpoint record), ``legacy_record.py`` (frozen: records written before),
  ``variant_flags.py`` (the flags of the encodings and the variant they select) and ``registry.py`` (the
  encodings and variants, and records and flags made variants);
* the attention core every block uses (``attention.py``, ``attend.py`` and its table of paths ``PATHS``,
  ``masks.py``, ``take_columns.py``) and the encoder's forward shared by the fairseq model and the exported one
  (``encoder_stack.py``);
* ``kernels/``: the fused Triton and FlexAttention kernels of ``attend``'s ``triton`` and ``flex`` paths and
  RoPE's rotation;
* ``facts.py``: the model's facts (the sizes of the archs, the state-dict key of the variant's record,
  ELECTRA's generator sizes and keys), read by the fairseq adapter and by the launchers.

Three users import it as it is: the fairseq adapter (``tupe_plugin``, ``--user-dir``), the launchers
(``tupe_tools``, ``pretrain.sh``, the study's plan: no fairseq import), and the ``transformers`` export,
which copies the modules its model code imports next to it (``tupe_tools/hf/export.py``). So the modules here
import torch and each other only, with single-dot relative imports (``from .base import ...``), and reach the
kernels by ``from . import kernels`` (an exported folder has no ``kernels`` package: the paths that need it
refuse there, the others run). ``tests/test_layers.py`` checks it.

This file imports nothing, so the torch-free modules (``facts.py``, ``options.py``) import without torch (the
launchers' settings read them); import names from their modules (``from tupe_core.registry import VARIANTS``).
"""
