"""Every ``--arch`` of the ``tupe_roberta`` model. Paper rows (TUPE Table 1) at base size:

=====================  ==========================================================
``bert_a_base``        BERT-A: absolute PE added to the input
``bert_r_base``        BERT-R: BERT-A + relative bias
``tupe_a_base``        TUPE-A: untied absolute term + [CLS] untie, no input PE
``tupe_r_base``        TUPE-R: TUPE-A + relative bias (= ``tupe_roberta_base``)
``tupe_a_tie_cls_base`` TUPE-A without the [CLS] reset
``bert_ad_base``       BERT-Ad: separate U^Q/U^K, all four word/position terms, 1/sqrt(4d)
=====================  ==========================================================

The Locality & Symmetry paper's distance priors (no PE): ``gaussian_prior_base`` (fixed
``softmax(-0.5 (j-i)^2)``, attenuated.py) and ``learned_gaussian_base`` (learned per layer, head and
distance, attenuated_l.py), also ``_tiny``.

``tupe_a_large``/``tupe_r_large`` (= ``tupe_roberta_large``) are BERT-large sized; the
``*_tiny`` archs (2 layers, width 64) exist for tests and demos. Any row is also reachable from
``tupe_roberta_base`` by flags, e.g. ``--input-pe --no-untied-pos --no-untie-cls --no-rel-pos`` is
BERT-A (see ``PositionalVariant.flags``).
"""
from __future__ import annotations

from fairseq.models import register_model_architecture
from fairseq.models.roberta.model import base_architecture as roberta_base_architecture
from fairseq.utils import safe_getattr

from .variants import VARIANTS, PositionalVariant


def _set_variant_defaults(args, variant: PositionalVariant) -> None:
    for name, value in vars(variant).items():
        setattr(args, name, safe_getattr(args, name, value))


@register_model_architecture("tupe_roberta", "tupe_roberta_base")
def tupe_roberta_base_architecture(args):
    """TUPE-R at BERT-base size: Post-LN, LayerNorm on token embeddings, no segment embeddings."""
    _set_variant_defaults(args, VARIANTS["tupe_r"])
    args.attention_impl = safe_getattr(args, "attention_impl", "sdpa")
    roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_roberta_large")
def tupe_roberta_large_architecture(args):
    args.encoder_layers = safe_getattr(args, "encoder_layers", 24)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 16)
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_roberta_tiny")
def tupe_roberta_tiny_architecture(args):
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    tupe_roberta_base_architecture(args)


# The paper's rows by name (base and tiny; large for TUPE-A/TUPE-R).

@register_model_architecture("tupe_roberta", "bert_a_base")
def bert_a_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_a"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "bert_a_tiny")
def bert_a_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_a"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "bert_r_base")
def bert_r_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_r"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "bert_r_tiny")
def bert_r_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_r"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_a_base")
def tupe_a_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_a"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_a_large")
def tupe_a_large_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_a"])
    tupe_roberta_large_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_a_tiny")
def tupe_a_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_a"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_r_base")
def tupe_r_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_r"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_r_large")
def tupe_r_large_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_r"])
    tupe_roberta_large_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_r_tiny")
def tupe_r_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_r"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_a_tie_cls_base")
def tupe_a_tie_cls_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_a_tie_cls"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "tupe_a_tie_cls_tiny")
def tupe_a_tie_cls_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["tupe_a_tie_cls"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "bert_ad_base")
def bert_ad_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_ad"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "bert_ad_tiny")
def bert_ad_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["bert_ad"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "gaussian_prior_base")
def gaussian_prior_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["gaussian_prior"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "gaussian_prior_tiny")
def gaussian_prior_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["gaussian_prior"])
    tupe_roberta_tiny_architecture(args)


@register_model_architecture("tupe_roberta", "learned_gaussian_base")
def learned_gaussian_base_architecture(args):
    _set_variant_defaults(args, VARIANTS["learned_gaussian"])
    tupe_roberta_base_architecture(args)


@register_model_architecture("tupe_roberta", "learned_gaussian_tiny")
def learned_gaussian_tiny_architecture(args):
    _set_variant_defaults(args, VARIANTS["learned_gaussian"])
    tupe_roberta_tiny_architecture(args)
