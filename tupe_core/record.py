"""The checkpoint record of a positional variant: ``PositionalVariant``, one frozen object of flags and options.

Every field is a ``--flag`` of ``tupe_roberta`` (except ``arch_only`` ones); the encodings read their options
from it (``PositionalEncoding.selected`` says which record builds which encoding; ``registry.py`` names the
variants).

Checkpoint record: ``to_tensor`` writes the field values in declaration order as one long tensor (a string
field as the index of its value in the field's ``choices``). New fields and new choices are only ever
**appended**, so a record written before a field existed is shorter and decodes with the field's default (or
its ``legacy`` value), and a record longer than this version's fields (or with a choice it does not have) was
written by a newer plugin: it is refused (``NewerRecordError``), not truncated into another variant.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

DISTANCE_PRIORS = ("none", "gaussian", "learned_gaussian")
# the encodings with their own attention block (rope.py, deberta.py, pam.py); append only
ATTENTION_BLOCKS = ("standard", "rope", "deberta", "pam_concat", "pam_sequential", "pam_window")


UPGRADE = "upgrade tupe_plugin to the version that wrote it (git pull; pip install -c constraints.txt -e .)"


class NewerRecordError(ValueError):
    """A checkpoint's variant record written by a newer plugin: fields or choices this one does not know."""


def _opt(help: str, choices: Tuple[str, ...] = (), arch_only: bool = False,
         legacy: Optional[Callable[[Dict[str, Any]], Any]] = None, called: str = ""):
    """Field metadata: the flag's help, a string field's choices, ``arch_only`` (no flag: set by the variant's
    own archs only, so no flag combination reaches it by accident), ``legacy``: the value a record written
    before the field existed decodes to, from the fields it has (default: the field's default), and ``called``:
    how a refusal names a field that has no flag."""
    return {"help": help, "choices": choices, "arch_only": arch_only, "legacy": legacy, "called": called}


@dataclass(frozen=True)
class PositionalVariant:
    """How positions enter the encoder. Every field is a ``--flag`` of ``tupe_roberta`` (except
    ``arch_only`` ones); fields are appended only (see the module docstring)."""

    input_pe: bool = field(default=False, metadata=_opt("add learned absolute PE to word embeddings (BERT)"))
    untied_pos: bool = field(default=False, metadata=_opt("TUPE untied absolute term with U^Q/U^K"))
    untie_cls: bool = field(default=False, metadata=_opt("reset [CLS] row/column to per-head thetas"))
    rel_pos: bool = field(default=False, metadata=_opt("add the T5-bucketed relative bias (TUPE-R, t5_rel)"))
    pos_mixed_terms: bool = field(default=False, metadata=_opt("BERT-Ad: keep word-position terms"))
    rel_pos_bins: int = field(default=32, metadata=_opt("relative buckets (32)"))
    max_rel_pos: int = field(
        default=128, metadata=_opt("max relative distance of the T5 buckets, and DeBERTa's clip k (128)")
    )
    distance_prior: str = field(
        default="none",
        metadata=_opt("L&S paper: add a fixed (gaussian) or learned per-layer (learned_gaussian) distance prior",
                      DISTANCE_PRIORS),
    )
    # --- appended after the first checkpoints: older records decode these as their defaults ---
    sinusoidal_pe: bool = field(default=False, metadata=_opt("add fixed sin/cos PE to word embeddings (Vaswani)"))
    alibi: bool = field(default=False, metadata=_opt("ALiBi: add -m_h |j-i| to the logits (bidirectional)"))
    attention_block: str = field(
        default="standard",
        metadata=_opt("attention of every layer: standard, rope (rotary q/k), deberta (c2p + p2c)", ATTENTION_BLOCKS),
    )
    no_position: bool = field(default=False, metadata=_opt("NoPE ablation (only via --arch nope_*)", arch_only=True))
    # Records before this field hold an unscaled sinusoidal table (positions 35:1 over words at the embedding
    # LayerNorm): they decode as --no-sinusoidal-scaled, so such a checkpoint loads as it was trained.
    sinusoidal_scaled: bool = field(default=True, metadata=_opt(
        "with --sinusoidal-pe: the table times the word embeddings' init std 0.02, Vaswani's word:position ratio "
        "(--no-sinusoidal-scaled: the unscaled table of checkpoints written before 2026-11-26)",
        legacy=lambda values: not values.get("sinusoidal_pe", False)))
    # an encoding registered without flags of its own (registry.register(..., encoding=Cls)): its record number
    encoding_id: int = field(default=0, metadata=_opt("the record number of a flagless encoding", arch_only=True,
                                                      called="a registered encoding without flags"))

    @property
    def name(self) -> str:
        """Its name in the registry, or "custom" for a flag combination that is not registered."""
        for name, v in VARIANTS.items():
            if v == self:
                return name
        return "custom"

    def flags(self) -> str:
        """The command-line flags that select this variant on any tupe_roberta arch (arch-only fields
        excluded: see ``arch_hint``)."""
        out = []
        for f in fields(self):
            if f.metadata["arch_only"]:
                continue
            value, opt = getattr(self, f.name), "--" + f.name.replace("_", "-")
            out.append(opt if value is True else "--no-" + opt[2:] if value is False else f"{opt} {value}")
        return " ".join(out)

    def arch_hint(self) -> str:
        """``--arch NAME_base`` for a registered variant, else an empty string."""
        return f"--arch {self.name}_base" if self.name != "custom" else ""

    def validate(self) -> None:
        """Refuse combinations that are not a variant, naming the flags to change. The checks are derived from what
        the registered encodings declare (``ENCODINGS``, filled by registry.py; ``base.PositionalEncoding``): which
        fields switch each one on (``switches``), which fields it reads (``selected_by`` and ``reads``) and whether
        it is defined together with another encoding (``combines``), so a new encoding adds no line here:

        * a choice that is not one of its field's;
        * a position signal that is its variant's only one (an encoding that does not combine), beside another;
        * no signal at all (outside the NoPE arch), or one in the NoPE arch;
        * a flag set away from its default that no encoding of the variant reads (e.g. --untie-cls without a
          term to reset, --no-sinusoidal-scaled without --sinusoidal-pe).
        """
        for f in fields(self):
            choices = f.metadata["choices"]
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"--{f.name.replace('_', '-')} must be one of {choices}, got {getattr(self, f.name)!r}")
        signal = {name for cls in ENCODINGS for name in cls.switches()}
        alone = {name for cls in ENCODINGS if not cls.combines for name in cls.switches()}
        on = [f.name for f in fields(self) if f.name in signal and getattr(self, f.name) != f.default]
        only = [name for name in on if name in alone]
        if only and len(on) > 1:  # one encoding at the attention (registry.encodings): these are not defined together
            others = [name for name in on if name != only[0]]
            defaults = ", ".join(self._flag(f.name, default=True) for f in fields(self)
                                 if f.name in signal and f.name != only[0] and not f.metadata["arch_only"])
            raise ValueError(f"{self._flag(only[0])} cannot be combined with {', '.join(map(self._flag, others))} "
                             f"(it is the only position signal of its variant): leave the others at their defaults "
                             f"({defaults})")
        if self.no_position and on:
            raise ValueError("the NoPE arch (nope_*) takes no positional flags; drop them or use another --arch")
        if not on and not self.no_position:
            raise ValueError(
                "this variant has no position information at all; the NoPE ablation is its own arch: "
                "--arch nope_base (or nope_large/nope_tiny); see docs/positional_encodings.md"
            )
        chosen = [cls for cls in ENCODINGS if cls.selected(self)]
        read = {name for cls in chosen for name in (*cls.selected_by, *cls.reads)}
        for f in fields(self):  # a flag no encoding of this variant reads
            value = getattr(self, f.name)
            if f.type != "bool" or f.metadata["arch_only"] or value == f.default or f.name in read:
                continue
            readers = [cls for cls in ENCODINGS if f.name in cls.reads or cls.selected_by.get(f.name, not value) == value]
            ways = " or ".join(f"{flags} ({cls.__name__})" if flags else cls.__name__ for cls in readers
                               for flags in [" ".join(self._flag(s, on=True) for s in cls.switches() if s != f.name)])
            what = (f"not of this variant's {', '.join(cls.__name__ for cls in chosen)}: drop it" if chosen
                    else "which this variant does not have: drop it, or add what it is a setting of")
            raise ValueError(f"{self._flag(f.name)} is a setting of {ways}, {what}")

    def _flag(self, name: str, default: bool = False, on: bool = False) -> str:
        """How a refusal names field ``name``: its flag with this record's value (``--no-x`` for False, ``--x v`` for
        a value), with its default (``default``), or as the flag that switches it on (``on``)."""
        f = next(f for f in fields(self) if f.name == name)
        if f.metadata["called"]:
            return f.metadata["called"]
        opt = "--" + name.replace("_", "-")
        value = f.default if default else getattr(self, name)
        if f.type != "bool":
            return opt if on or not default else f"{opt} {value}"
        return opt if (value if not on else True) else "--no-" + opt[2:]

    def to_tensor(self) -> torch.Tensor:
        values = [
            f.metadata["choices"].index(v) if isinstance(v, str) else int(v)
            for f, v in zip(fields(self), asdict(self).values())
        ]
        return torch.tensor(values, dtype=torch.long)

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> "PositionalVariant":
        """Inverse of to_tensor; checkpoints written before a field existed hold its default (or its ``legacy``
        value). A record of a newer plugin (more fields, or a choice appended later) is refused:
        ``NewerRecordError``."""
        known, record = fields(cls), [int(x) for x in t.tolist()]
        if len(record) > len(known):
            raise NewerRecordError(
                f"the checkpoint's positional-variant record has {len(record)} fields but this tupe_plugin "
                f"knows {len(known)}: it was written by a newer tupe_plugin, with settings this one cannot "
                f"read; {UPGRADE}"
            )
        values = {}
        for f, x in zip(known, record):
            choices = f.metadata["choices"]
            if choices and not 0 <= x < len(choices):
                raise NewerRecordError(
                    f"the checkpoint's positional variant has --{f.name.replace('_', '-')} choice #{x}, but this "
                    f"tupe_plugin knows only {choices}: it was written by a newer tupe_plugin; {UPGRADE}"
                )
            values[f.name] = choices[x] if choices else (bool(x) if f.type == "bool" else x)
        for f in known[len(record):]:  # fields appended after the record was written
            if f.metadata["legacy"] is not None:
                values[f.name] = f.metadata["legacy"](values)
        return cls(**values)

    @classmethod
    def from_args(cls, args) -> "PositionalVariant":
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


# The registered variants by name, in registration order: filled by registry.register (registry.py)
VARIANTS: Dict[str, PositionalVariant] = {}
# Every encoding class a record can select (base.PositionalEncoding subclasses), in the registry's order: filled by
# registry.py; ``validate`` reads their declarations
ENCODINGS: List[type] = []
