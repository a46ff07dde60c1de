"""DeBERTa's attention block (He et al. 2021): content-to-position and position-to-content terms added to the
content logits.

Plain torch (no fairseq import): ``tupe-export-hf`` ships this file into the exported model folder.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import SelfAttention
from .masks import sdpa_layout
from .take_columns import TakeColumns


class DisentangledSelfAttention(SelfAttention):
    """DeBERTa's attention (He et al. 2021): content-to-content, content-to-position
    ``Q^c_i . K^r_{delta(i,j)}`` and position-to-content ``K^c_j . Q^r_{delta(i,j)}``, all scaled by
    ``(3 dh)^-0.5``, with ``delta(i,j) = clamp(i - j + k, 0, 2k - 1)``. p2c indexes by ``delta(i,j)`` as the
    official code does (the paper's Eq. 4 writes ``delta(j,i)``; docs/positional_encodings.md). The
    relative embeddings are shared by all layers (``TupePositions``); the projections ``K^r = P W_{k,r}``
    (no bias) and ``Q^r = P W_{q,r}`` (with bias, as the official code) belong to each layer."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.pos_key_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.pos_query_proj = nn.Linear(embed_dim, embed_dim)

    def positional_qk(self, q, k, mask, positions):
        rel, index = positions.rel_embeddings, positions.rel_index  # (R, d), (T, T)
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
        return q, k, sdpa_layout(bias if mask is None else bias.add_(mask))  # as the shared mask is laid out
