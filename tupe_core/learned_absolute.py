"""BERT's learned absolute positions at the input (BERT-A, and BERT-R's input part): fairseq's
``LearnedPositionalEmbedding``, restated so that the fairseq model and the exported one share it.

Restates fairseq 0.12.3 ``LearnedPositionalEmbedding.forward`` with ``utils.make_positions``: token positions
are counted over the real tokens only, from ``padding_idx + 1``, so padding (left or right) does not move them;
the table has ``max_positions + padding_idx + 1`` rows (row ``padding_idx`` is the pads', zero).
tests/test_restated_code.py compares the two.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import AS_IS, BERT_INIT_STD, InputEncoding, check_length
from .options import Flag


class LearnedAbsolute(InputEncoding):
    """``--input-pe``: ``x_i = w_i + p_{pos(i)}``, ``p`` learned (N(0, 0.02) at first, the pad row zero)."""

    left_padding = AS_IS  # positions count real tokens only (it reads them from the tokens, as fairseq)
    name = "learned_absolute"
    flags = (Flag("input_pe", False, "add learned absolute PE to word embeddings (BERT)"),)
    selected_by = {"input_pe": True}
    combines = True  # BERT-R: with T5's relative bias (TUPE Table 1)

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1,
                 padding_idx: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers, padding_idx)
        self.weight = nn.Parameter(torch.empty(max_positions + padding_idx + 1, embed_dim))
        with torch.no_grad():  # as fairseq's init_bert_params initialises its LearnedPositionalEmbedding
            nn.init.normal_(self.weight, mean=0.0, std=BERT_INIT_STD)
            self.weight[padding_idx].zero_()

    def rows(self, seq_len: int) -> Tensor:
        return self.weight[self.padding_idx + 1: self.padding_idx + 1 + seq_len]

    def forward(self, src_tokens: Tensor, position_ids: Optional[Tensor] = None) -> Tensor:  # (B, T) -> (B, T, d)
        check_length(src_tokens.size(1), self.max_positions)
        real = src_tokens.ne(self.padding_idx).int()
        positions = (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.padding_idx  # make_positions
        return F.embedding(positions, self.weight, self.padding_idx)

    def trained_positions(self, encoder_state) -> Optional[int]:
        table = encoder_state.get("embed_positions.weight")  # max_positions + padding_idx + 1 rows
        return None if table is None else table.size(0) - self.padding_idx - 1

    @classmethod
    def untrained_beyond(cls, options, trained: int) -> Optional[str]:
        return "learned absolute position embeddings: the rows past T were never trained"
