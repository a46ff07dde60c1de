"""T5's bucketed relative bias (Raffel et al. 2020): ``b_h[bucket(j - i)]``, one learned scalar per bucket and
head, shared by all layers (``t5_rel``, BERT-R's term, and TUPE-R's relative term in ``tupe.py``).

Buckets as the official TUPE code computes them: T5's bidirectional scheme, 32 buckets, max distance 128; with
the [CLS] untie, column 0 uses the extra bucket 32 and row 0 the never-used bucket 16.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from .base import AS_IS, BIAS, POSITIONS, PositionalEncoding, PositionalTerm, at_positions, check_length
from .options import Flag, option


def relative_position_bucket(
    relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bidirectional bucket of ``j - i``: keys on the left (and self) get
    ``0 .. num_buckets/2 - 1``, keys on the right ``num_buckets/2 ..``; exact up to
    ``num_buckets/4``, logarithmic up to ``max_distance``, then saturated."""
    half = num_buckets // 2
    n = -relative_position
    bucket = (n < 0).long() * half
    n = n.abs()
    max_exact = half // 2
    # float32 log, as in the official code (it decides the bucket edges, e.g. distance 16 -> 10)
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + log_ratio * (half - max_exact)).long().clamp(max=half - 1)
    return bucket + torch.where(n < max_exact, n, large)


REL_POS_HELP = "add the T5-bucketed relative bias (TUPE-R, t5_rel)"
UNTIE_CLS_HELP = "reset [CLS] row/column to per-head thetas"
BINS_HELP = "relative buckets (32)"
MAX_REL_POS_HELP = "max relative distance of the T5 buckets, and DeBERTa's clip k (128)"


@dataclass(frozen=True)
class RelativeOptions:
    """T5's bias alone (``t5_rel``) or beside BERT-A's input PE (BERT-R)."""

    untie_cls: bool = option(False, UNTIE_CLS_HELP)
    rel_pos_bins: int = option(32, BINS_HELP)
    max_rel_pos: int = option(128, MAX_REL_POS_HELP)


def relative_buckets(options, max_positions: int) -> Tensor:
    """(P, P) bucket of query i, key j, with the [CLS] buckets of ``untie_cls``: the table the original TUPE
    release stores (``rp_bucket``; the converter compares it). The model reads the 2P - 1 distances only.
    ``options``: T5's or TUPE's (``rel_pos_bins``, ``max_rel_pos``, ``untie_cls``)."""
    idx = torch.arange(max_positions)
    bucket = relative_position_bucket(idx[None, :] - idx[:, None], options.rel_pos_bins, options.max_rel_pos)
    if options.untie_cls:
        bucket[:, 0] = options.rel_pos_bins  # others -> [CLS]: the extra bucket
        bucket[0, :] = options.rel_pos_bins // 2  # [CLS] -> all: the bucket no pair uses
    return bucket


def bucket_by_distance(bins: int, max_distance: int, max_positions: int) -> Tensor:
    """(2P - 1,): the bucket of every distance ``j - i = -(P-1) .. P-1``, the fixed table ``relative_bias`` reads."""
    P = max_positions
    return relative_position_bucket(torch.arange(-(P - 1), P), bins, max_distance)


def relative_bias(table: nn.Embedding, by_distance_bucket: Tensor, seq_len: int) -> Tensor:
    """(H, T, T) ``b_h[bucket(j - i)]`` of a (buckets, H) table, read from the 2T - 1 distances (a Toeplitz matrix
    as a view of one row per distance, then one copy: ``flip``), not T^2 lookups: the same values, a far
    cheaper backward than the embedding gradient of T^2 indices."""
    T, P = seq_len, (by_distance_bucket.numel() + 1) // 2
    by_distance = table(by_distance_bucket[P - T: P + T - 1])  # (2T-1, H)
    # unfold: [h, s, t] = by_distance[s + t, h]; flipping s -> T - 1 - i gives index j - i + T - 1
    return by_distance.t().unfold(-1, T, 1).flip(1)


def bucket_tables(options, max_positions: int) -> Dict[str, Tensor]:
    """The fixed table of T5's bias (and TUPE-R's): the bucket of every distance, by its buffer name."""
    return {"rp_bucket_by_distance": bucket_by_distance(options.rel_pos_bins, options.max_rel_pos, max_positions)}


def cls_values(table: nn.Embedding, bins: int) -> Tuple[Tensor, Tensor]:
    """The untied [CLS] scalars per head, (H,) each: row 0 reads the bucket no pair uses, column 0 the extra one."""
    w = table.weight  # (bins + 1, H)
    return w[bins // 2], w[bins]


def reset_cls(bias: Tensor, row: Tensor, col: Tensor) -> Tensor:
    """``bias`` (H, T, T) with column 0 set to ``col`` and row 0 to ``row``, in place and row last, so [0, 0]
    is [CLS]'s own row (the official code's order: with the row constant, its value cannot change the output)."""
    bias[:, 1:, 0] = col[:, None]
    bias[:, 0, :] = row[:, None]
    return bias


class T5Relative(PositionalEncoding):
    """``t5_rel`` (alone) and BERT-R's attention term (with BERT-A's input PE): ``a_ij += b_h[bucket(j - i)]``,
    unscaled; with ``--untie-cls`` the [CLS] row and column take their own buckets."""

    enters = BIAS
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    name = "t5_relative"
    Options = RelativeOptions
    flags = (Flag("rel_pos", False, REL_POS_HELP),)
    selected_by = {"rel_pos": True, "untied_pos": False}  # with --untied-pos it is TUPE-R's (tupe.py)
    combines = True  # BERT-R: with BERT-A's input PE (TUPE Table 1)

    @classmethod
    def left_padding_for(cls, options) -> str:
        """With ``--untie-cls`` the [CLS] row and column are those of position 0, which left padding moves: it reads
        each token's position."""
        return POSITIONS if options.untie_cls else AS_IS

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.bins, self.untie_cls = options.rel_pos_bins, options.untie_cls
        self.relative_attention_bias = nn.Embedding(self.bins + 1, num_heads)

    def fixed_tables(self) -> Dict[str, Tensor]:
        return bucket_tables(self.options, self.max_positions)

    def forward(self, seq_len: int, position_ids: Optional[Tensor] = None) -> PositionalTerm:
        """(H, T, T); with ``position_ids`` (a left-padded batch, ``--untie-cls``) (B, H, T, T) at those positions."""
        check_length(seq_len, self.max_positions)
        bias = relative_bias(self.relative_attention_bias, self.rp_bucket_by_distance, seq_len)  # (H, T, T), a copy
        if self.untie_cls:
            bias = reset_cls(bias, *cls_values(self.relative_attention_bias, self.bins))
        return PositionalTerm(bias if position_ids is None else at_positions(bias, position_ids))
