"""BERT-Ad (TUPE Table 1): TUPE's separate position projections, but all four word/position terms of Eq. 6 kept,
``[ww + w pU^K + pU^Q w + pU^Q pU^K] / sqrt(4 dh)``: every layer adds the position q/k to its content q/k."""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .attention import SelfAttention
from .base import QK, PositionalTerm, PositionMap, check_length
from .options import Flag, NoOptions
from .tupe import Tupe


class PositionQK(NamedTuple):
    """BERT-Ad's payload: the position query and key, (H, T, dh) each ((B, H, T, dh) in a left-padded batch: each
    sequence's at its tokens' positions), added to every layer's content q and k."""

    query: Tensor
    key: Tensor


class PositionQKSelfAttention(SelfAttention):
    """``SelfAttention`` with the position q/k of ``PositionQK`` added to the content q/k (no parameters of its own:
    the state-dict keys are the plain block's)."""

    def positional_qk(self, q, k, mask, positions):
        pos = positions.payload  # PositionQK, (H, T, dh) or (B, H, T, dh) each: both broadcast to q's (B, H, T, dh)
        return q + pos.query, k + pos.key, mask


class BertAd(Tupe):
    """``--untied-pos --pos-mixed-terms``: not a logit bias but position q/k, (H, T, dh) each."""

    enters = QK
    score_scale = 4.0  # four terms: 1/sqrt(4 dh)
    block = PositionQKSelfAttention

    name = "bert_ad"
    Options = NoOptions  # defined without the [CLS] untie and the relative bias (TUPE Table 1)
    flags = (Flag("pos_mixed_terms", False, "BERT-Ad: keep word-position terms"),)
    selected_by = {"untied_pos": True, "pos_mixed_terms": True}

    @classmethod
    def cls_and_relative(cls, options) -> Tuple[bool, bool, int]:
        return False, False, 0

    def forward(self, seq_len: int, position_ids: Optional[Tensor] = None) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        q, k = self.position_qk(seq_len)
        q, k = q[:, 1:], k[:, 1:]  # (H, T, dh): token i <-> table row i + 1
        if position_ids is not None:  # a left-padded batch: (B, H, T, dh), each token's position (left_padding)
            q, k = (x[:, position_ids].transpose(0, 1) for x in (q, k))
        return PositionalTerm(None, PositionQK(q, k))

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        """The position-position term of every layer, ``(p_i U^Q)(p_j U^K)^T / sqrt(4 dh)``."""
        with torch.no_grad():
            pos = self(seq_len).payload
            return PositionMap(pos.query @ pos.key.transpose(1, 2) * self.scaling)
