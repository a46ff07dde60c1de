"""Every ``--arch`` of the ``tupe_roberta`` model: ``<variant>_<size>`` for every variant of the registry
(``variants.py``: ``VARIANTS``) and every size below, plus ``tupe_roberta_base/_large/_tiny`` (= TUPE-R).

===========  ===================================================================
size         encoder
===========  ===================================================================
``base``     BERT-base: 12 layers, width 768, 12 heads, FFN 3072 (fairseq's RoBERTa base)
``large``    BERT-large: 24 layers, width 1024, 16 heads, FFN 4096
``tiny``     2 layers, width 64, 4 heads, FFN 128 (tests and demos)
===========  ===================================================================

Variants (``python -m tupe_plugin.checkpoint_info --list-variants``): TUPE Table 1 ``bert_a``, ``bert_r``,
``tupe_a``, ``tupe_r``, ``tupe_a_tie_cls``, ``bert_ad``; the L&S priors ``gaussian_prior``,
``learned_gaussian``; common encoders' PEs ``sinusoidal``, ``nope``, ``t5_rel``, ``alibi``, ``rope``,
``deberta_rel``. So ``tupe_r_base``, ``bert_a_tiny``, ``rope_large``, ... Any variant except ``nope`` is
also reachable from ``tupe_roberta_base`` by its flags (``PositionalVariant.flags``), e.g.
``--input-pe --no-untied-pos --no-untie-cls --no-rel-pos`` is BERT-A.
"""
from __future__ import annotations

from typing import Callable, Dict

from fairseq.models import register_model_architecture
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.utils import safe_getattr

from .variants import VARIANTS, PositionalVariant

SIZES: Dict[str, Dict[str, int]] = {
    "base": {},  # fairseq's RoBERTa base defaults
    "large": dict(encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096, encoder_attention_heads=16),
    "tiny": dict(encoder_layers=2, encoder_embed_dim=64, encoder_ffn_embed_dim=128, encoder_attention_heads=4),
}


def _set_defaults(args, values: Dict) -> None:
    for name, value in values.items():
        setattr(args, name, safe_getattr(args, name, value))


def _set_variant_defaults(args, variant: PositionalVariant) -> None:
    _set_defaults(args, vars(variant))


@register_model_architecture("tupe_roberta", "tupe_roberta_base")
def tupe_roberta_base_architecture(args):
    """TUPE-R at BERT-base size: Post-LN, LayerNorm on token embeddings, no segment embeddings."""
    _set_variant_defaults(args, VARIANTS["tupe_r"])
    args.tupe_attention = safe_getattr(args, "tupe_attention", "auto")  # checkpoints without it: auto
    roberta_base_architecture(args)


def _architecture(variant: str, size: str) -> Callable:
    def architecture(args):
        _set_variant_defaults(args, VARIANTS[variant])
        _set_defaults(args, SIZES[size])
        tupe_roberta_base_architecture(args)

    architecture.__name__ = f"{variant}_{size}_architecture"
    architecture.__doc__ = f"``{variant}`` at {size} size."
    return architecture


for _size in SIZES:
    if _size != "base":
        register_model_architecture("tupe_roberta", f"tupe_roberta_{_size}")(_architecture("tupe_r", _size))
    for _variant in VARIANTS:
        register_model_architecture("tupe_roberta", f"{_variant}_{_size}")(_architecture(_variant, _size))
