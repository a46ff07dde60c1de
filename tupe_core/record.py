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
from typing import Any, Callable, Dict, Optional, Tuple

import torch

DISTANCE_PRIORS = ("none", "gaussian", "learned_gaussian")
# the encodings with their own attention block (rope.py, deberta.py, pam.py); append only
ATTENTION_BLOCKS = ("standard", "rope", "deberta", "pam_concat", "pam_sequential", "pam_window")


UPGRADE = "upgrade tupe_plugin to the version that wrote it (git pull; pip install -c constraints.txt -e .)"


class NewerRecordError(ValueError):
    """A checkpoint's variant record written by a newer plugin: fields or choices this one does not know."""


def _opt(help: str, choices: Tuple[str, ...] = (), arch_only: bool = False,
         legacy: Optional[Callable[[Dict[str, Any]], Any]] = None):
    """Field metadata: the flag's help, a string field's choices, ``arch_only`` (no flag: set by the variant's
    own archs only, so no flag combination reaches it by accident) and ``legacy``: the value a record written
    before the field existed decodes to, from the fields it has (default: the field's default)."""
    return {"help": help, "choices": choices, "arch_only": arch_only, "legacy": legacy}


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
    encoding_id: int = field(default=0, metadata=_opt("the record number of a flagless encoding", arch_only=True))

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
        """Refuse combinations that are not a variant, naming the flags to change."""
        for f in fields(self):
            choices = f.metadata["choices"]
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"--{f.name.replace('_', '-')} must be one of {choices}, got {getattr(self, f.name)!r}")
        if self.pos_mixed_terms and not self.untied_pos:
            raise ValueError("--pos-mixed-terms (BERT-Ad) needs --untied-pos (the U^Q/U^K projections)")
        if self.pos_mixed_terms and (self.untie_cls or self.rel_pos):
            raise ValueError("--pos-mixed-terms (BERT-Ad) is defined without --untie-cls/--rel-pos")
        if self.untie_cls and not (self.untied_pos or self.rel_pos):
            raise ValueError("--untie-cls needs a positional term to reset: --untied-pos or --rel-pos")
        if not self.sinusoidal_scaled and not self.sinusoidal_pe:
            raise ValueError("--no-sinusoidal-scaled is a setting of --sinusoidal-pe; drop it or add --sinusoidal-pe")
        if self.input_pe and self.sinusoidal_pe:
            raise ValueError("--input-pe (learned) and --sinusoidal-pe (fixed) are two input PEs: pick one")
        table1 = {"--input-pe": self.input_pe, "--untied-pos": self.untied_pos, "--rel-pos": self.rel_pos}
        alone = {  # position signals that are the only one of their variant
            "--distance-prior": self.distance_prior != "none",
            "--sinusoidal-pe": self.sinusoidal_pe,
            "--alibi": self.alibi,
            "--attention-block": self.attention_block != "standard",
            "a registered encoding without flags": self.encoding_id != 0,
        }
        active = [flag for flag, on in alone.items() if on]
        others = [flag for flag, on in table1.items() if on] + active[1:]
        if active and others:  # one encoding at the attention (registry.encodings): these are not defined together
            raise ValueError(
                f"{active[0]} cannot be combined with {', '.join(others)} (it is the only position signal of its "
                "variant): add --no-input-pe --no-untied-pos "
                "--no-untie-cls --no-rel-pos and leave --distance-prior none, --no-sinusoidal-pe, --no-alibi, "
                "--attention-block standard for the others"
            )
        has_position = any(table1.values()) or bool(active)
        if self.no_position and has_position:
            raise ValueError("the NoPE arch (nope_*) takes no positional flags; drop them or use another --arch")
        if not has_position and not self.no_position:
            raise ValueError(
                "this variant has no position information at all; the NoPE ablation is its own arch: "
                "--arch nope_base (or nope_large/nope_tiny); see docs/positional_encodings.md"
            )

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
