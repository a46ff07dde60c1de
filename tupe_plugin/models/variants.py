"""The paper's Table 1 rows as flag sets, and how a checkpoint records which one it is."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch


@dataclass(frozen=True)
class PositionalVariant:
    """How positions enter the encoder (one row of TUPE's Table 1 = one setting)."""

    input_pe: bool  # learned absolute PE added to the word embeddings (BERT)
    untied_pos: bool  # separate position table + U^Q/U^K, one (H, T, T) term for all layers
    untie_cls: bool  # reset row/column of [CLS] to per-head thetas
    rel_pos: bool  # T5-bucketed relative bias, shared by all layers
    pos_mixed_terms: bool = False  # BERT-Ad: keep the word-position terms (q/k += p U)
    rel_pos_bins: int = 32
    max_rel_pos: int = 128
    distance_prior: str = "none"  # L&S paper: "gaussian" (fixed) or "learned_gaussian" (per layer/head)

    @property
    def attn_scale_factor(self) -> float:
        """Logits are scaled by (factor * head_dim)^-0.5: 1 BERT, 2 TUPE (1/sqrt(2d)), 4 BERT-Ad."""
        return 4.0 if self.pos_mixed_terms else 2.0 if self.untied_pos else 1.0

    @property
    def name(self) -> str:
        for name, v in VARIANTS.items():
            if v == self:
                return name
        return "custom"

    def flags(self) -> str:
        """The command-line flags that select this variant on any tupe_roberta arch."""
        out = []
        for f in fields(self):
            value, opt = getattr(self, f.name), "--" + f.name.replace("_", "-")
            out.append(opt if value is True else "--no-" + opt[2:] if value is False else f"{opt} {value}")
        return " ".join(out)

    def validate(self) -> None:
        if self.pos_mixed_terms and not self.untied_pos:
            raise ValueError("--pos-mixed-terms (BERT-Ad) needs --untied-pos (the U^Q/U^K projections)")
        if self.pos_mixed_terms and (self.untie_cls or self.rel_pos):
            raise ValueError("--pos-mixed-terms (BERT-Ad) is defined without --untie-cls/--rel-pos")
        if self.untie_cls and not (self.untied_pos or self.rel_pos):
            raise ValueError("--untie-cls needs a positional term to reset: --untied-pos or --rel-pos")
        if self.distance_prior not in DISTANCE_PRIORS:
            raise ValueError(f"--distance-prior must be one of {DISTANCE_PRIORS}, got {self.distance_prior!r}")
        if self.distance_prior != "none" and (self.input_pe or self.untied_pos or self.rel_pos):
            raise ValueError("--distance-prior is the only position signal of its variants: add "
                             "--no-input-pe --no-untied-pos --no-untie-cls --no-rel-pos")
        if not (self.input_pe or self.untied_pos or self.rel_pos or self.distance_prior != "none"):
            raise ValueError("this variant has no position information at all; see models/variants.py")

    def to_tensor(self) -> torch.Tensor:
        values = [DISTANCE_PRIORS.index(v) if isinstance(v, str) else int(v) for v in asdict(self).values()]
        return torch.tensor(values, dtype=torch.long)

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> "PositionalVariant":
        """Inverse of to_tensor; checkpoints written before a field existed hold its default."""
        decode = {"bool": bool, "int": int, "str": lambda v: DISTANCE_PRIORS[v]}
        values = [decode[f.type](int(x)) for f, x in zip(fields(cls), t.tolist())]
        return cls(*values)

    @classmethod
    def from_args(cls, args) -> "PositionalVariant":
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


DISTANCE_PRIORS = ("none", "gaussian", "learned_gaussian")

VARIANTS = {
    "bert_a": PositionalVariant(input_pe=True, untied_pos=False, untie_cls=False, rel_pos=False),
    "bert_r": PositionalVariant(input_pe=True, untied_pos=False, untie_cls=False, rel_pos=True),
    "tupe_a": PositionalVariant(input_pe=False, untied_pos=True, untie_cls=True, rel_pos=False),
    "tupe_r": PositionalVariant(input_pe=False, untied_pos=True, untie_cls=True, rel_pos=True),
    "tupe_a_tie_cls": PositionalVariant(input_pe=False, untied_pos=True, untie_cls=False, rel_pos=False),
    "bert_ad": PositionalVariant(
        input_pe=False, untied_pos=True, untie_cls=False, rel_pos=False, pos_mixed_terms=True
    ),
    # The Locality & Symmetry paper's code (PAPERS.md §2.6): no PE, a distance prior on the logits.
    "gaussian_prior": PositionalVariant(
        input_pe=False, untied_pos=False, untie_cls=False, rel_pos=False, distance_prior="gaussian"
    ),
    "learned_gaussian": PositionalVariant(
        input_pe=False, untied_pos=False, untie_cls=False, rel_pos=False, distance_prior="learned_gaussian"
    ),
}
