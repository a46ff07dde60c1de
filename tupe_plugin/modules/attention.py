"""Self-attention with an additive, batch-shared logit bias (the TUPE positional term)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn


def attention_mask(
    bias: Optional[Tensor], padding_mask: Optional[Tensor], dtype: torch.dtype
) -> Optional[Tensor]:
    """One additive mask for all layers, broadcastable to (B, H, T, T).

    Without padding the (H, T, T) bias is only viewed as (1, H, T, T), never copied per batch
    element. With right padding SDPA needs a single mask, so the bias and the (B, T) key-padding
    mask are combined once per forward (not once per layer).
    """
    if padding_mask is None:
        return None if bias is None else bias.to(dtype).unsqueeze(0)  # (1, H, T, T)
    pad = torch.zeros(padding_mask.shape, dtype=dtype, device=padding_mask.device)
    pad = pad.masked_fill(padding_mask, float("-inf"))[:, None, None, :]  # (B, 1, 1, T)
    return pad if bias is None else bias.to(dtype).unsqueeze(0) + pad  # (B, H, T, T)


class BiasedSelfAttention(nn.Module):
    """Multi-head self-attention: ``softmax(q k^T * (scale_factor * dh)^-0.5 + mask) v``.

    Parameter names follow fairseq's ``MultiheadAttention`` (q_proj, k_proj, v_proj, out_proj).
    ``scale_factor`` is 1 for BERT, 2 for TUPE (the paper's 1/sqrt(2d) per head), 4 for BERT-Ad.
    ``impl="sdpa"`` uses ``F.scaled_dot_product_attention`` (fused kernels where the device has
    them); ``impl="reference"`` is the plain softmax path, which can also return the weights.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        scale_factor: float = 1.0,
        impl: str = "sdpa",
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if impl not in ("sdpa", "reference"):
            raise ValueError(f"attention impl must be 'sdpa' or 'reference', got {impl!r}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = (self.head_dim * scale_factor) ** -0.5
        self.impl = impl
        self.dropout_p = dropout
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.q_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.k_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.v_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)
        self.out_proj = quant_noise(nn.Linear(embed_dim, embed_dim), q_noise, qn_block_size)

    def _heads(self, x: Tensor) -> Tensor:
        T, B, _ = x.shape
        return x.view(T, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)  # (B, H, T, dh)

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor] = None,
        pos_query: Optional[Tensor] = None,
        pos_key: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (T, B, C); mask: additive, broadcastable to (B, H, T, T); pos_query/pos_key:
        (H, T, dh) added to the content q/k (BERT-Ad). Returns (T, B, C) and, with
        ``need_weights`` (reference path), the (B, H, T, T) attention probabilities."""
        T, B, C = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        if pos_query is not None:
            q, k = q + pos_query.unsqueeze(0), k + pos_key.unsqueeze(0)
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)  # e.g. --amp: fp16 q/k with an fp32 positional term
        weights = None
        if self.impl == "sdpa" and not need_weights:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0,
                scale=self.scaling,
            )
        else:
            logits = torch.matmul(q * self.scaling, k.transpose(-1, -2))  # (B, H, T, T)
            if mask is not None:
                logits = logits + mask
            weights = torch.softmax(logits, dim=-1, dtype=torch.float32).type_as(logits)
            out = torch.matmul(self.dropout_module(weights), v)  # (B, H, T, dh)
        out = out.permute(2, 0, 1, 3).reshape(T, B, C)
        return self.out_proj(out), weights
