"""RoPE (Su et al., RoFormer): q and k of every layer rotated by their token's position, base 10000, before the
usual ``(dh)^-0.5`` scaled dot product (a rotation keeps norms, so the scale of the logits is BERT's)."""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor

from .attend import fused_kernels
from .attention import SelfAttention
from .base import AS_IS, ATTENTION_BLOCK, ROTATION, ContentDependentPositions, PositionalEncoding, PositionalTerm, PositionMap, check_length


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on (..., T, dh): dims ``m`` and ``m + dh/2`` form the pair rotated by angle ``t * theta_m``
    (the GPT-NeoX layout of RoFormer's pairs ``(2m, 2m+1)``; the learned q/k projections absorb the
    fixed permutation between the two)."""
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class Rotation(NamedTuple):
    """RoPE's payload: the cos and sin of every token's angles, (T, dh) each, shared by all layers."""

    cos: Tensor
    sin: Tensor


class RotarySelfAttention(SelfAttention):
    """``SelfAttention`` with q and k rotated by ``positions.payload`` (``Rotation``) before the dot product: on CUDA by our Triton
    kernel (``kernels/rotary.py``), elsewhere by ``rotate``."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {self.head_dim} (embed_dim / heads)")

    def positional_qk(self, q, k, mask, positions):
        cos, sin = positions.payload  # Rotation: (T, dh) each
        kernel = fused_kernels("rotary") if q.is_cuda else None
        if kernel is not None and kernel.available(q.device):  # one read and one write per tensor, each way
            return (*kernel.rotate_qk(q, k, cos, sin), mask)
        return rotate(q, cos, sin), rotate(k, cos, sin), mask


class Rope(PositionalEncoding):
    """``--attention-block rope``: the (cos, sin) tables, (T, dh) each, shared by all layers."""

    enters = ROTATION
    left_padding = AS_IS  # a function of j - i only: a row shifted by its left padding keeps its meaning
    block = RotarySelfAttention
    name = "rope"
    flags = (ATTENTION_BLOCK,)
    selected_by = {"attention_block": "rope"}

    def fixed_tables(self) -> Dict[str, Tensor]:
        dh = self.head_dim
        inv_freq = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)  # (dh/2,)
        angle = torch.arange(self.max_positions).double()[:, None] * inv_freq  # (P, dh/2)
        angle = torch.cat([angle, angle], dim=-1)  # (P, dh): dims m and m + dh/2 share angle m
        return {"rope_cos": angle.cos().float(), "rope_sin": angle.sin().float()}

    def forward(self, seq_len: int) -> PositionalTerm:
        check_length(seq_len, self.max_positions)
        return PositionalTerm(None, Rotation(self.rope_cos[:seq_len], self.rope_sin[:seq_len]))

    def content_free_map(self, seq_len: int, encoder_state: Dict[str, Tensor]) -> Optional[PositionMap]:
        raise ContentDependentPositions("RoPE rotates the content q and k by position, so its positional effect "
                                        "depends on content")
