"""TUPE's untied positional term (Ke et al. 2021, Eq. 7-11): TUPE-A, TUPE-R and TUPE-A without the [CLS] reset.

    a_ij = content_ij / sqrt(2 dh) + reset_theta( (p_i U^Q)(p_j U^K)^T / sqrt(2 dh) [+ b_{j-i}] )

computed once per forward from a position table of its own and shared by all layers. The official code
(guolinke/TUPE) is the reference where it differs from the paper (docs/positional_encodings.md):

* the position table has ``max_positions + 1`` rows; token ``i`` uses row ``i + 1``;
* ``U^Q, U^K`` are ``nn.Linear(d, d)`` *with* bias, applied to ``LayerNorm(table)``;
* the absolute term is scaled by ``(2 * dh) ** -0.5``; the relative bias is not scaled;
* [CLS] untie: ``theta1 = q(row 0) . k(row 0)`` fills row 0 (incl. [0, 0]), ``theta2 = q(row 1) . k(row 1)``
  fills column 0 (rows 1..T-1); TUPE-R's relative bias adds its own [CLS] buckets (``t5_relative.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from .base import BIAS, POSITIONS, PositionalEncoding, PositionalTerm, at_positions, check_length
from .options import Flag, option
from .t5_relative import (BINS_HELP, MAX_REL_POS_HELP, REL_POS_HELP, UNTIE_CLS_HELP, bucket_tables, cls_values,
                          relative_bias, reset_cls)

UNTIED_POS = Flag("untied_pos", False, "TUPE untied absolute term with U^Q/U^K")


@dataclass(frozen=True)
class TupeOptions:
    untie_cls: bool = option(False, UNTIE_CLS_HELP)
    rel_pos: bool = option(False, REL_POS_HELP)  # TUPE-R: T5's relative bias added in this module (Eq. 11)
    rel_pos_bins: int = option(32, BINS_HELP)
    max_rel_pos: int = option(128, MAX_REL_POS_HELP)


class Tupe(PositionalEncoding):
    """TUPE-A (``--untied-pos --untie-cls``), TUPE-R (``+ --rel-pos``), tie-cls (``--untied-pos`` alone)."""

    enters = BIAS
    score_scale = 2.0  # the paper's 1/sqrt(2d), per head: content and positional terms alike
    # absolute positions and the [CLS] untie: a left-padded batch gets the term of each token's position, per sequence
    left_padding = POSITIONS

    name = "tupe"
    Options = TupeOptions
    flags = (UNTIED_POS,)
    selected_by = {"untied_pos": True, "pos_mixed_terms": False}
    combines = True  # TUPE's Table 1

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.untie_cls, self.rel_pos, self.bins = self.cls_and_relative(options)
        self.scaling = (self.head_dim * self.scale_for(options)) ** -0.5
        self.pos = nn.Embedding(max_positions + 1, embed_dim)
        self.pos_ln = nn.LayerNorm(embed_dim)
        self.pos_q_linear = nn.Linear(embed_dim, embed_dim)
        self.pos_k_linear = nn.Linear(embed_dim, embed_dim)
        if self.rel_pos:  # TUPE-R: T5's table, in this module (its state-dict key in every checkpoint)
            self.relative_attention_bias = nn.Embedding(self.bins + 1, num_heads)

    @classmethod
    def cls_and_relative(cls, options) -> Tuple[bool, bool, int]:
        """(``untie_cls``, ``rel_pos``, ``rel_pos_bins``) of ``options`` (BertAd: neither, its options are none)."""
        return options.untie_cls, options.rel_pos, options.rel_pos_bins

    def fixed_tables(self) -> Dict[str, Tensor]:
        return bucket_tables(self.options, self.max_positions) if self.cls_and_relative(self.options)[1] else {}

    def position_qk(self, seq_len: int) -> Tuple[Tensor, Tensor]:
        """(H, T+1, dh) each: ``LN(p) U^Q`` and ``LN(p) U^K`` of table rows 0..T (row i + 1 is token i)."""
        T, H, dh = seq_len, self.num_heads, self.head_dim
        p = self.pos_ln(self.pos.weight[: T + 1])  # (T+1, d)
        q = self.pos_q_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
        k = self.pos_k_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
        return q, k

    def forward(self, seq_len: int, position_ids: Optional[Tensor] = None) -> PositionalTerm:
        """(H, T, T), shared by the batch; with ``position_ids`` (a left-padded batch) (B, H, T, T), each sequence's
        term at its tokens' positions (``at_positions``): a per-sequence bias, made only for such a batch."""
        check_length(seq_len, self.max_positions)
        q, k = self.position_qk(seq_len)
        abs_term = torch.bmm(q * self.scaling, k.transpose(1, 2))  # (H, T+1, T+1)
        bias = abs_term[:, 1:, 1:]  # token i <-> table row i + 1
        # theta1: [CLS] -> all, theta2: others -> [CLS] (copies: bias, a view of abs_term, is written below)
        cls_row = abs_term[:, 0, 0].clone() if self.untie_cls else None
        cls_col = abs_term[:, 1, 1].clone() if self.untie_cls else None
        if self.rel_pos:
            bias = bias + relative_bias(self.relative_attention_bias, self.rp_bucket_by_distance, seq_len)
            if self.untie_cls:  # the relative bias's own [CLS] scalars add to the thetas (official code)
                row, col = cls_values(self.relative_attention_bias, self.bins)
                cls_row, cls_col = cls_row + row, cls_col + col
        if self.untie_cls:
            bias = reset_cls(bias, cls_row, cls_col)
        return PositionalTerm(bias if position_ids is None else at_positions(bias, position_ids))

    def trained_positions(self, encoder_state) -> Optional[int]:
        table = encoder_state.get("positions.pos.weight")  # max_positions + 1 rows: row 0 is [CLS]'s
        return None if table is None else table.size(0) - 1

    @classmethod
    def untrained_beyond(cls, options, trained: int) -> Optional[str]:
        return "learned absolute positions (the untied positional term): the rows past T were never trained"
