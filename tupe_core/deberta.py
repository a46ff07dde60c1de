"""DeBERTa's disentangled relative positions (He et al. 2021): content-to-position and position-to-content terms
added to the content logits by an attention block of its own, from relative embeddings shared by all layers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor, nn

from .attention import SelfAttention
from .base import AS_IS, ATTENTION_BLOCK, BLOCK, ContentDependentPositions, PositionalEncoding, PositionalTerm, PositionMap, check_length
from .masks import AttentionMask
from .options import option
from .take_columns import TakeColumns


class RelativeRows(NamedTuple):
    """DeBERTa's payload: the rows of the shared relative table that T tokens use, and which row each pair reads."""

    embeddings: Tensor  # (R, d) rows lo .. lo + R - 1 of the (2k, d) relative embeddings
    index: Tensor  # (T, T): the row of ``embeddings`` for query i, key j


class DisentangledSelfAttention(SelfAttention):
    """DeBERTa's attention (He et al. 2021): content-to-content, content-to-position
    ``Q^c_i . K^r_{delta(i,j)}`` and position-to-content ``K^c_j . Q^r_{delta(i,j)}``, all scaled by
    ``(3 dh)^-0.5``, with ``delta(i,j) = clamp(i - j + k, 0, 2k - 1)``. p2c indexes by ``delta(i,j)`` as the
    official code does (the paper's Eq. 4 writes ``delta(j,i)``; docs/positional_encodings.md). The
    relative embeddings are shared by all layers (``Deberta``, below); the projections ``K^r = P W_{k,r}``
    (no bias) and ``Q^r = P W_{q,r}`` (with bias, as the official code) belong to each layer."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.pos_key_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.pos_query_proj = nn.Linear(embed_dim, embed_dim)

    def positional_qk(self, q, k, mask, positions):
        rel, index = positions.payload  # RelativeRows: (R, d), (T, T)
        R, H, dh = rel.size(0), self.num_heads, self.head_dim
        B, _, T, _ = q.shape
        # the scale goes on the (H, dh, R) projections, not on a (B, H, T, T) sum
        k_r = (self.pos_key_proj(rel) * self.scaling).view(R, H, dh).permute(1, 2, 0).to(q.dtype)  # (H, dh, R)
        q_r = (self.pos_query_proj(rel) * self.scaling).view(R, H, dh).permute(1, 2, 0).to(q.dtype)

        def scores(x: Tensor, r: Tensor) -> Tensor:
            """(B, H, T, dh) x (H, dh, R) -> (H, B, T R): one (B T, dh) @ (dh, R) product per head. The
            projections are shared by the batch; a broadcasting matmul would copy them B times (and keep
            the copy for backward)."""
            return torch.bmm(x.transpose(0, 1).reshape(H, B * T, dh), r).view(H, B, T * R)

        # One column selection per term straight into the [i, j] layout, from the (T, R) scores flattened:
        # c2p[i, j] = (q k_r)[i, d(i,j)] at i R + d(i,j); p2c[i, j] = (k q_r)[j, d(i,j)] at j R + d(i,j)
        rows = torch.arange(T, device=index.device) * R
        bias = TakeColumns.apply(scores(q, k_r), (index + rows[:, None]).view(-1))
        bias += TakeColumns.apply(scores(k, q_r), (index + rows[None, :]).view(-1))  # backward does not read it
        bias = bias.view(H, B, T, T).transpose(0, 1)  # (B, H, T, T), a view
        # this layer's own per-sequence bias (no shared one: DeBERTa has none), the key padding apart
        return q, k, AttentionMask(bias, None if mask is None else mask.key_padding, q.dtype, owned=True)


@dataclass(frozen=True)
class DebertaOptions:
    max_rel_pos: int = option(128, "max relative distance of the T5 buckets, and DeBERTa's clip k (128)")


class Deberta(PositionalEncoding):
    """``--attention-block deberta``: the (2k, d) relative embeddings shared by all layers and, per forward, the
    rows that T tokens use with the (T, T) row of query i, key j: ``delta(i, j) = clamp(i - j + k, 0, 2k - 1)``."""

    enters = BLOCK
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    block = DisentangledSelfAttention
    score_scale = 3.0  # three terms: 1/sqrt(3 dh)

    name = "deberta"
    Options = DebertaOptions
    flags = (ATTENTION_BLOCK,)
    selected_by = {"attention_block": "deberta"}

    def __init__(self, options, embed_dim: int, num_heads: int, max_positions: int, num_layers: int = 1):
        super().__init__(options, embed_dim, num_heads, max_positions, num_layers)
        self.k = options.max_rel_pos
        self.rel_embeddings = nn.Embedding(2 * self.k, embed_dim)  # shared by all layers

    def fixed_tables(self) -> Dict[str, Tensor]:
        idx, k = torch.arange(self.max_positions), self.options.max_rel_pos
        return {"rel_index": (idx[:, None] - idx[None, :] + k).clamp(0, 2 * k - 1)}  # (P, P)

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        T, k = seq_len, self.k
        lo, hi = max(0, k - T + 1), min(2 * k, k + T)  # the rows that T tokens can use
        return PositionalTerm(None, RelativeRows(self.rel_embeddings.weight[lo:hi], self.rel_index[:T, :T] - lo))

    @classmethod
    def untrained_beyond(cls, options, trained: int) -> Optional[str]:
        k = options.max_rel_pos
        if trained > k:
            return None  # every row was trained; beyond, the clamp saturates, as T5's buckets
        # row i - j + k of 2k, clamped: T tokens reach rows k - T + 1 .. k + T - 1, so row 0 (every key k or more
        # to the right of its query) is trained only when T > k
        return (f"relative embeddings clipped at k = {k} (--max-rel-pos): at T = {trained} <= k the row of "
                "the keys k or more to the right of their query was never trained")

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        raise ContentDependentPositions("DeBERTa's c2p and p2c terms multiply content by relative embeddings, "
                                        "so its positional effect depends on content")
