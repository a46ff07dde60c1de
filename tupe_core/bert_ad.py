"""BERT-Ad (TUPE Table 1): TUPE's separate position projections, but all four word/position terms of Eq. 6 kept,
``[ww + w pU^K + pU^Q w + pU^Q pU^K] / sqrt(4 dh)``: every layer adds the position q/k to its content q/k."""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor

from .base import QK, PositionMap, PositionalTerm, check_length
from .tupe import Tupe


class BertAd(Tupe):
    """``--untied-pos --pos-mixed-terms``: not a logit bias but position q/k, (H, T, dh) each."""

    enters = QK
    score_scale = 4.0  # four terms: 1/sqrt(4 dh)

    selected_by = {"untied_pos": True, "pos_mixed_terms": True}

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        q, k = self.position_qk(seq_len)
        return PositionalTerm(None, query=q[:, 1:], key=k[:, 1:])

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        """The position-position term of every layer, ``(p_i U^Q)(p_j U^K)^T / sqrt(4 dh)``."""
        with torch.no_grad():
            term = self(seq_len)
            return PositionMap(term.query @ term.key.transpose(1, 2) * self.scaling)
