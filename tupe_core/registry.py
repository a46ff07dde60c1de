"""The registry of positional variants, and which encodings each one is built from.

A variant is a name, a line on what it is, and its record (``record.PositionalVariant``: the flags that select it
on any ``tupe_roberta`` arch, stored in every checkpoint). Its encodings follow from the record: every encoding
class declares which records it serves (``PositionalEncoding.selected``); a record has at most one encoding
added to the words (``embed_positions``) and one at the attention (``positions``; ``NoTerm`` when none). The
archs ``<name>_base/_large/_tiny`` (tupe_plugin/models/architectures.py), ``tupe-checkpoint-info --list-variants``,
``pretrain.sh VARIANT=<name-with-dashes>`` and the docs' tables all read ``VARIANTS``.

A new encoding is one file with its class, one import and one ``register`` line here (``docs/extending.md``);
one that brings no flag of its own is registered with ``encoding=`` and recorded by ``encoding_id``.
"""
from __future__ import annotations

import zlib
from typing import Callable, Dict, List, Optional, Tuple, Type

from .alibi import Alibi
from .base import AS_IS, INPUT, POSITIONS, REFUSED, InputEncoding, NoTerm, PositionalEncoding
from .bert_ad import BertAd
from .deberta import Deberta
from .gaussian_prior import GaussianPrior
from .kerple import Kerple
from .learned_absolute import LearnedAbsolute
from .learned_gaussian import LearnedGaussian
from .pam import Pam
from .record import ENCODINGS, VARIANTS, PositionalVariant
from .rope import Rope
from .sinusoidal import Sinusoidal
from .t5_relative import T5Relative
from .tupe import Tupe

# every encoding class a record can select (the list of record.py, which validate reads); register(..., encoding=Cls)
# appends
ENCODINGS.extend([
    LearnedAbsolute, Sinusoidal, Tupe, BertAd, T5Relative, GaussianPrior, LearnedGaussian, Alibi, Rope, Deberta, Pam,
])
ABOUT: Dict[str, str] = {}  # name -> what it is and its source (docs/positional_encodings.md has the math)
_ON_REGISTER: List[Callable[[str], None]] = []  # e.g. models/architectures.py: the archs of a new variant


class UnknownEncodingError(ValueError):
    """A record whose encoding is not registered in this process."""


def names() -> List[str]:
    """The registered variants' names as every interface writes them (dashes: ``tupe-r``), in registry order."""
    return [name.replace("_", "-") for name in ABOUT]


def archs() -> Dict[str, str]:
    """Every ``--arch`` of the ``tupe_roberta`` model -> its variant (as :func:`names`): ``<name>_<size>`` of every
    registered variant and size of ``facts.SIZES``, and ``tupe_roberta_<size>`` (TUPE-R), as
    ``tupe_plugin/models/architectures.py`` registers them with fairseq (here without importing it)."""
    from .facts import SIZES

    return {**{f"tupe_roberta_{size}": "tupe-r" for size in SIZES},
            **{f"{name}_{size}": name.replace("_", "-") for name in ABOUT for size in SIZES}}


def about() -> Dict[str, str]:
    """Registered variant (dashes, as :func:`names`) -> its one-line description, in registry order."""
    return {name.replace("_", "-"): line for name, line in ABOUT.items()}


def record_id(name: str) -> int:
    """The record number of a flagless encoding: a stable 31-bit checksum of its variant's name."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF or 1


def register(name: str, about: str, encoding: Optional[Type[PositionalEncoding]] = None,
             **settings) -> PositionalVariant:
    """Add a variant: archs ``<name>_base/_large/_tiny``, ``pretrain.sh VARIANT=<name-with-dashes>``.
    ``settings``: the record's flags of a built-in encoding; or ``encoding``: a class with no flag of its own."""
    if encoding is not None:
        if settings:
            raise ValueError(f"variant {name!r}: give either an encoding class or flags, not both")
        encoding.record_id = record_id(name)
        ENCODINGS.append(encoding)
        settings = {"encoding_id": encoding.record_id}
    variant = PositionalVariant(**settings)
    variant.validate()
    if name in VARIANTS or variant in VARIANTS.values():
        raise ValueError(f"variant {name!r} is registered twice (or equals another variant)")
    encodings(variant)  # exactly one class per place, or an error here rather than at build time
    VARIANTS[name], ABOUT[name] = variant, about
    for callback in _ON_REGISTER:
        callback(name)
    return variant


def on_register(callback: Callable[[str], None]) -> None:
    """Call ``callback(name)`` for every variant registered from now on."""
    _ON_REGISTER.append(callback)


def encodings(variant: PositionalVariant) -> Tuple[Optional[Type[InputEncoding]], Type[PositionalEncoding]]:
    """(the encoding added to the words or None, the encoding at the attention) of a record."""
    chosen = [cls for cls in ENCODINGS if cls.selected(variant)]
    inputs = [cls for cls in chosen if cls.enters == INPUT]
    attention = [cls for cls in chosen if cls.enters != INPUT]
    if variant.encoding_id and not chosen:
        raise UnknownEncodingError(
            f"the checkpoint's positional encoding #{variant.encoding_id} is not registered in this process: "
            "import the plugin that registers it (--user-dir), as when it was trained")
    if len(inputs) > 1 or len(attention) > 1:
        names = ", ".join(cls.__name__ for cls in chosen)
        raise ValueError(f"the flags {variant.flags()} select {names}: at most one encoding at the input and one "
                         "at the attention")
    return (inputs[0] if inputs else None), (attention[0] if attention else NoTerm)


def build(variant: PositionalVariant, embed_dim: int, num_heads: int, max_positions: int, num_layers: int,
          padding_idx: int = 1) -> Tuple[Optional[InputEncoding], PositionalEncoding]:
    """The two encodings of ``variant``, built: (``embed_positions`` or None, ``positions``)."""
    variant.validate()
    input_cls, attention_cls = encodings(variant)
    sizes = (variant, embed_dim, num_heads, max_positions, num_layers)
    return (input_cls(*sizes, padding_idx=padding_idx) if input_cls else None), attention_cls(*sizes)


def untrained_beyond(variant: PositionalVariant, trained: int) -> Optional[str]:
    """Why ``variant``'s positions beyond the trained length mean nothing (its encodings' reasons), or None."""
    reasons = [cls.untrained_beyond(variant, trained) for cls in encodings(variant) if cls is not None]
    return next((r for r in reasons if r), None)


def left_padding(variant: PositionalVariant) -> str:
    """What a left-padded row of ``variant`` needs, from its encodings' declarations (``left_padding_for``):
    ``REFUSED`` if one refuses it, else ``POSITIONS`` if one reads each token's position, else ``AS_IS``."""
    answers = {cls.left_padding_for(variant) for cls in encodings(variant) if cls is not None}
    return REFUSED if REFUSED in answers else POSITIONS if POSITIONS in answers else AS_IS


# TUPE's Table 1 (Ke et al. 2021)
register("bert_a", "BERT-A: learned absolute PE at the input (TUPE Table 1)", input_pe=True)
register("bert_r", "BERT-R: BERT-A + T5 relative bias (TUPE Table 1)", input_pe=True, rel_pos=True)
register("tupe_a", "TUPE-A: untied absolute term, [CLS] untie (TUPE Eq. 10)", untied_pos=True, untie_cls=True)
register("tupe_r", "TUPE-R: TUPE-A + T5 relative bias (TUPE Eq. 11)", untied_pos=True, untie_cls=True, rel_pos=True)
register("tupe_a_tie_cls", "TUPE-A without the [CLS] reset (TUPE Table 1)", untied_pos=True)
register("bert_ad", "BERT-Ad: U^Q/U^K, all four terms, 1/sqrt(4d) (TUPE Table 1)", untied_pos=True,
         pos_mixed_terms=True)
# The Locality & Symmetry paper's code (Chen et al. 2023): no PE, a distance prior on the logits.
register("gaussian_prior", "fixed softmax(-0.5 (j-i)^2) prior (L&S attenuated.py)", distance_prior="gaussian")
register("learned_gaussian", "learned per layer/head/|j-i| prior (L&S attenuated_l.py)",
         distance_prior="learned_gaussian")
# The PEs of common encoders.
register("sinusoidal", "fixed sin/cos PE at the input (Vaswani et al. 2017)", sinusoidal_pe=True)
register("nope", "no position information: the ablation baseline (only via nope_* archs)", no_position=True)
register("t5_rel", "T5 bucketed relative bias alone (Raffel et al. 2020)", rel_pos=True)
register("alibi", "ALiBi, bidirectional -m_h |j-i| (Press et al. 2022)", alibi=True)
register("rope", "rotary q/k in every layer, base 10000 (Su et al., RoFormer)", attention_block="rope")
register("deberta_rel", "DeBERTa disentangled c2p + p2c, k=128 (He et al. 2021)", attention_block="deberta")
# The L&S code's positional-attention (PAM) systems: no PE, position-only weights used as attention.
register("pam_concat", "PAM concat: learned |j-i| weights || self-attention, Linear(2d->d) (L&S concat.py)",
         attention_block="pam_concat")
register("pam_sequential", "PAM sequential: learned |j-i| weights, then self-attention (L&S seuqence.py)",
         attention_block="pam_sequential")
register("pam_window", "PAM window: fixed 1/3 on i-1,i,i+1 || self-attention (L&S bert.py PAMBlock)",
         attention_block="pam_window")
# Learned relative biases without flags of their own (recorded by encoding_id).
register("kerple", "KERPLE log kernel -r1_h log(1 + r2_h |j-i|), r1, r2 learned (Chi et al. 2022)", encoding=Kerple)
