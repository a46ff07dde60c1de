"""The registry of positional variants, and of the encodings they are built from.

A variant (``record.PositionalVariant``) is an ordered tuple of (encoding name, its options); a registered variant
is a name, a line on what it is, and that tuple, given here as the flags that select it on any ``tupe_roberta``
arch (``register("alibi", ..., alibi=True)``) or, for an encoding no flag selects, its class
(``register("kerple", ..., encoding=Kerple)``). This module owns the tables: ``ENCODINGS`` (record name -> class),
``VARIANTS`` and ``ABOUT``; it turns flags (``from_flags``, ``from_args``) and checkpoint records (``from_record``:
JSON, or an older integer record through the frozen ``legacy_record.py``) into variants, and a variant into its
encodings (``encodings``, ``build``). The archs ``<name>_base/_large/_tiny`` (tupe_plugin/models/architectures.py),
``tupe-checkpoint-info --list-variants``, ``pretrain.sh VARIANT=<name-with-dashes>`` and the docs' tables all read
``VARIANTS``.

A new encoding is one file with its class (its ``name``, ``Options``, flags and ``validate``) and one ``register``
line here (``docs/extending.md``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type

import torch

from .alibi import Alibi
from .base import AS_IS, INPUT, POSITIONS, REFUSED, InputEncoding, NoTerm, PositionalEncoding
from .bert_ad import BertAd
from .deberta import Deberta
from .fire import Fire
from .gaussian_prior import GaussianPrior
from .kerple import Kerple
from .learned_absolute import LearnedAbsolute
from .learned_gaussian import LearnedGaussian
from .legacy_record import ENCODING_IDS, encoding_id, entries as legacy_entries, fields_from_config, fields_from_tensor
from .options import Flag
from .pam import Pam
from .record import UPGRADE, NewerRecordError, PositionalVariant, record_entries
from .rope import Rope
from .sinusoidal import Sinusoidal
from .t5_relative import T5Relative
from .tupe import Tupe
from .variant_flags import ARCH_ONLY, chosen, declared, full, validate as validate_flags, words
from .variant_flags import flag_values as variant_flag_values

# every encoding a variant can have, by its record name, in the order the flags and refusals list them: the eleven
# of the first releases here; an encoding added since comes with its first variant, register(..., encoding=Cls),
# which appends it (so the help and the messages of the eleven keep their order)
ENCODINGS: Dict[str, Type[PositionalEncoding]] = {cls.name: cls for cls in (
    LearnedAbsolute, Tupe, BertAd, T5Relative, GaussianPrior, LearnedGaussian, Sinusoidal, Alibi, Rope, Deberta, Pam,
)}
VARIANTS: Dict[str, PositionalVariant] = {}  # name -> variant, in registration order
ABOUT: Dict[str, str] = {}  # name -> what it is and its source (docs/positional_encodings.md has the math)
DEFAULT_VARIANT = "tupe_r"  # what tupe_roberta_SIZE is without flags (registered below)
_ON_REGISTER: List[Callable[[str], None]] = []  # e.g. models/architectures.py: the archs of a new variant


class UnknownEncodingError(NewerRecordError):
    """A record whose encoding is not registered in this process (a newer plugin's, or a --user-dir's not imported)."""


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


# --- flags --------------------------------------------------------------------------------------------------------
def flags() -> Dict[str, Flag]:
    """Every ``--flag`` of the registered encodings (``tupe_roberta.add_args`` adds them), in order."""
    return declared(list(ENCODINGS.values()))


def from_flags(values: Mapping[str, Any]) -> PositionalVariant:
    """The variant that flag values select (a flag not given: its default; ``no_position`` and ``arch_encodings``:
    the arch's), refused with the flags to change where they are not one (``variant_flags.validate``)."""
    encodings = list(ENCODINGS.values())
    values = full(values, flags())
    unknown = [name for name in values["arch_encodings"] if name not in ENCODINGS]
    if unknown:
        raise UnknownEncodingError(f"the positional encoding {unknown[0]!r} is not registered in this process: import "
                                   "the plugin that registers it (--user-dir), as when it was trained")
    validate_flags(values, encodings)
    variant = PositionalVariant(tuple((cls.name, cls.options_from_flags(values))
                                      for cls in _input_first(chosen(values, encodings))))
    check(variant)
    return named(variant)


def from_args(args) -> PositionalVariant:
    """The variant of a fairseq model's arguments. Arguments saved before ``arch_encodings`` existed name an
    encoding without flags by its old record number (``encoding_id``, legacy_record.py)."""
    names = [*flags(), *ARCH_ONLY]
    values = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    old_id = getattr(args, "encoding_id", 0)
    if old_id and not values.get("arch_encodings"):
        values["arch_encodings"] = (_old_encoding_ids().get(old_id, f"#{old_id}"),)
    return from_flags(values)


def _old_encoding_ids() -> Dict[int, str]:
    """Old record number -> encoding, for the records written before records named their encodings: the built-in
    ones (legacy_record.py) and those of the variants registered now with an encoding no flag selects (a plugin's:
    the number was a checksum of the variant's name)."""
    by_plugins = {encoding_id(name): variant.names()[-1] for name, variant in VARIANTS.items()
                  if variant.encodings and not (ENCODINGS[variant.names()[-1]].selected_by
                                                or ENCODINGS[variant.names()[-1]].flags)}
    return {**by_plugins, **ENCODING_IDS}


def flag_values(variant: PositionalVariant) -> Dict[str, Any]:
    """Every flag's value (and the arch-only values) that select ``variant``: what its archs set."""
    return variant_flag_values([(ENCODINGS[name], options) for name, options in variant.encodings],
                               list(ENCODINGS.values()))


def flags_of(variant: PositionalVariant) -> str:
    """The command-line flags that select ``variant`` on any tupe_roberta arch (the arch-only values excluded)."""
    table = flags()
    return " ".join(words(name, value, table) for name, value in flag_values(variant).items()
                    if name in table)


def arch_only(variant: PositionalVariant) -> bool:
    """Whether only an arch reaches ``variant`` (NoPE, an encoding that no flag selects)."""
    values = flag_values(variant)
    return any(values[name] != default for name, default in ARCH_ONLY.items())


# --- variants -----------------------------------------------------------------------------------------------------
def _input_first(classes: List[type]) -> List[type]:
    return [cls for cls in classes if cls.enters == INPUT] + [cls for cls in classes if cls.enters != INPUT]


def check(variant: PositionalVariant) -> None:
    """Refuse a variant that is not one, whatever made it: each encoding's options (its ``validate``), at most one
    encoding at the input and one at the attention, the input one first, and no company beside an encoding that
    does not combine."""
    classes = []
    for name, options in variant.encodings:
        cls = ENCODINGS.get(name)
        if cls is None:
            raise UnknownEncodingError(f"the positional encoding {name!r} is not registered in this process: import "
                                       "the plugin that registers it (--user-dir), as when it was trained, or "
                                       f"{UPGRADE}")
        if type(options).__name__ != cls.Options.__name__:  # by name: an exported folder may hold two copies
            raise ValueError(f"{cls.__name__} takes {cls.Options.__name__}, got {type(options).__name__}")
        cls.validate(options)
        classes.append(cls)
    inputs = [cls for cls in classes if cls.enters == INPUT]
    if len(inputs) > 1 or len(classes) - len(inputs) > 1 or classes != _input_first(classes):
        raise ValueError(f"the positional encodings {', '.join(c.__name__ for c in classes)}: at most one encoding at "
                         "the input, then one at the attention")
    alone = [cls for cls in classes if not cls.combines]
    if alone and len(classes) > 1:
        others = ", ".join(cls.__name__ for cls in classes if cls is not alone[0])
        raise ValueError(f"{alone[0].__name__} is the only position signal of its variant: it cannot be combined "
                         f"with {others}")


def named(variant: PositionalVariant) -> PositionalVariant:
    """``variant`` with its name in the registry ("custom" for a variant that is not registered)."""
    return replace(variant, name=next((name for name, v in VARIANTS.items() if v == variant), "custom"))


def register(name: str, about: str, encoding: Optional[Type[PositionalEncoding]] = None,
             **settings) -> PositionalVariant:
    """Add a variant: archs ``<name>_base/_large/_tiny``, ``pretrain.sh VARIANT=<name-with-dashes>``.
    ``settings``: the flags that select it; ``encoding``: a class registered with it (its flags, or its arch alone,
    select it), added to ``ENCODINGS``."""
    if encoding is not None:
        if not encoding.name or ENCODINGS.get(encoding.name, encoding) is not encoding:
            raise ValueError(f"variant {name!r}: its encoding {encoding.__name__} needs a record name of its own "
                             f"(name = ...), got {encoding.name!r}")
        ENCODINGS[encoding.name] = encoding
        if not (encoding.selected_by or encoding.flags):
            settings = {**settings, "arch_encodings": (encoding.name,)}
    variant = from_flags(settings)
    if name in VARIANTS or variant in VARIANTS.values():
        raise ValueError(f"variant {name!r} is registered twice (or equals another variant)")
    VARIANTS[name], ABOUT[name] = replace(variant, name=name), about
    for callback in _ON_REGISTER:
        callback(name)
    return VARIANTS[name]


def on_register(callback: Callable[[str], None]) -> None:
    """Call ``callback(name)`` for every variant registered from now on."""
    _ON_REGISTER.append(callback)


# --- records ------------------------------------------------------------------------------------------------------
def from_entries(entries: List[Dict[str, Any]]) -> PositionalVariant:
    """The variant of a record's JSON entries (``{"encoding": name, **options}``); an encoding or an option this
    version does not know is refused (``NewerRecordError``)."""
    out = []
    for entry in entries:
        options = dict(entry)
        name = options.pop("encoding")
        cls = ENCODINGS.get(name)
        if cls is None:
            raise UnknownEncodingError(
                f"the checkpoint's positional encoding {name!r} is not registered in this process: import the plugin "
                f"that registers it (--user-dir), as when it was trained; or it was written by a newer tupe_plugin: "
                f"{UPGRADE}")
        known = set(cls.Options.__dataclass_fields__)
        newer = sorted(set(options) - known)
        if newer:
            raise NewerRecordError(f"the checkpoint's positional encoding {name!r} has options {newer} that this "
                                   f"tupe_plugin does not know: it was written by a newer tupe_plugin, with settings "
                                   f"this one cannot read; {UPGRADE}")
        value = cls.Options(**options)
        try:
            cls.validate(value)
        except ValueError as e:
            raise NewerRecordError(f"the checkpoint's positional encoding {name!r}: {e}: it was written by a newer "
                                   f"tupe_plugin; {UPGRADE}") from None
        out.append((name, value))
    variant = PositionalVariant(tuple(out))
    check(variant)
    return named(variant)


def from_record(record: torch.Tensor) -> PositionalVariant:
    """The variant of a checkpoint's record: JSON (uint8), or an older integer record through the frozen table of
    ``legacy_record.py``."""
    entries = record_entries(record)
    if entries is None:
        entries = [{"encoding": name, **options}
                   for name, options in legacy_entries(fields_from_tensor(record), _old_encoding_ids())]
    return from_entries(entries)


def from_config(config: Mapping[str, Any], variant_name_: Optional[str] = None) -> PositionalVariant:
    """The variant of an exported ``config.json``: its ``positional_encodings`` (the record's entries), or the one
    key per old field of an export written before (``legacy_record.fields_from_config``)."""
    if config.get("positional_encodings") is not None:
        return from_entries(list(config["positional_encodings"]))
    old = fields_from_config(config, variant_name_)
    return from_entries([{"encoding": name, **options} for name, options in legacy_entries(old, _old_encoding_ids())])


# --- what a variant is built from ---------------------------------------------------------------------------------
def encodings(variant: PositionalVariant) -> Tuple[Optional[Type[InputEncoding]], Type[PositionalEncoding]]:
    """(the encoding added to the words or None, the encoding at the attention) of a variant."""
    classes = [ENCODINGS[name] for name in variant.names()]
    inputs = [cls for cls in classes if cls.enters == INPUT]
    attention = [cls for cls in classes if cls.enters != INPUT]
    return (inputs[0] if inputs else None), (attention[0] if attention else NoTerm)


def options_of(variant: PositionalVariant, cls: Type[PositionalEncoding]) -> Any:
    """The options of encoding ``cls`` in ``variant`` (``NoTerm``'s: none)."""
    options = variant.options(cls.name)
    return cls.Options() if options is None else options


def build(variant: PositionalVariant, embed_dim: int, num_heads: int, max_positions: int, num_layers: int,
          padding_idx: int = 1) -> Tuple[Optional[InputEncoding], PositionalEncoding]:
    """The two encodings of ``variant``, built: (``embed_positions`` or None, ``positions``)."""
    check(variant)
    input_cls, attention_cls = encodings(variant)
    sizes = (embed_dim, num_heads, max_positions, num_layers)
    at_input = input_cls(options_of(variant, input_cls), *sizes, padding_idx=padding_idx) if input_cls else None
    return at_input, attention_cls(options_of(variant, attention_cls), *sizes)


def attention_block(variant: PositionalVariant, embed_dim: int, num_heads: int, dropout: float, attention_path: str,
                    max_positions: int):
    """The attention block of every layer of ``variant`` (its attention encoding's ``attention_block``)."""
    _, cls = encodings(variant)
    return cls.attention_block(options_of(variant, cls), embed_dim, num_heads, dropout, attention_path, max_positions)


def untrained_beyond(variant: PositionalVariant, trained: int) -> Optional[str]:
    """Why ``variant``'s positions beyond the trained length mean nothing (its encodings' reasons), or None."""
    reasons = [cls.untrained_beyond(options_of(variant, cls), trained) for cls in encodings(variant) if cls is not None]
    return next((r for r in reasons if r), None)


def left_padding(variant: PositionalVariant) -> str:
    """What a left-padded row of ``variant`` needs, from its encodings' declarations (``left_padding_for``):
    ``REFUSED`` if one refuses it, else ``POSITIONS`` if one reads each token's position, else ``AS_IS``."""
    answers = {cls.left_padding_for(options_of(variant, cls)) for cls in encodings(variant) if cls is not None}
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
# Encodings added with their variant (encoding=): KERPLE, selected by its arch alone; FIRE, by its flag --fire too.
register("kerple", "KERPLE log kernel -r1_h log(1 + r2_h |j-i|), r1, r2 learned (Chi et al. 2022)", encoding=Kerple)
register("fire", "FIRE f(psi(|i-j|) / psi(max(L, i))), a learned MLP, two-sided (Li et al. 2024)", encoding=Fire,
         fire=True)
