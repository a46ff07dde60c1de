"""Every ``--arch`` of the ``tupe_roberta`` model: ``<variant>_<size>`` for every variant of the registry
(``tupe_core/registry.py``: ``VARIANTS``, also those registered later; ``tupe-checkpoint-info --list-variants`` lists them) and every size of
``SIZES`` (``tupe_core/facts.py``), plus ``tupe_roberta_base/_large/_tiny`` (= TUPE-R). So ``tupe_r_base``, ``bert_a_tiny``,
``rope_large``, ... Any variant except ``nope`` is also reachable from ``tupe_roberta_base`` by its flags
(``registry.flags_of``), e.g. ``--input-pe --no-untied-pos --no-untie-cls --no-rel-pos`` is BERT-A.
"""
from __future__ import annotations

from typing import Callable, Dict

from fairseq.models import register_model_architecture
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.utils import safe_getattr

from tupe_core.facts import SIZES
from tupe_core.record import PositionalVariant
from tupe_core.registry import DEFAULT_VARIANT, VARIANTS, flag_values, on_register


def _set_defaults(args, values: Dict) -> None:
    for name, value in values.items():
        setattr(args, name, safe_getattr(args, name, value))


def _set_variant_defaults(args, variant: PositionalVariant) -> None:
    _set_defaults(args, flag_values(variant))  # its flags, and the arch-only no_position and arch_encodings


@register_model_architecture("tupe_roberta", "tupe_roberta_base")
def tupe_roberta_base_architecture(args):
    """TUPE-R at BERT-base size: Post-LN, LayerNorm on token embeddings, no segment embeddings."""
    _set_variant_defaults(args, VARIANTS[DEFAULT_VARIANT])
    args.tupe_attention = safe_getattr(args, "tupe_attention", "auto")  # checkpoints without it: auto
    args.compile_layers = safe_getattr(args, "compile_layers", False)
    roberta_base_architecture(args)


def _architecture(variant: str, size: str) -> Callable:
    def architecture(args):
        _set_variant_defaults(args, VARIANTS[variant])
        _set_defaults(args, SIZES[size].args())
        tupe_roberta_base_architecture(args)

    architecture.__name__ = f"{variant}_{size}_architecture"
    architecture.__doc__ = f"``{variant}`` at {size} size."
    return architecture


for _size in SIZES:
    if _size != "base":
        register_model_architecture("tupe_roberta", f"tupe_roberta_{_size}")(_architecture(DEFAULT_VARIANT, _size))


def register_archs(variant: str) -> None:
    """``<variant>_base/_large/_tiny``."""
    for size in SIZES:
        register_model_architecture("tupe_roberta", f"{variant}_{size}")(_architecture(variant, size))


for _variant in VARIANTS:
    register_archs(_variant)
on_register(register_archs)  # a variant registered later (a plugin of its own) gets its archs too
