"""RoPE's attention block (Su et al., RoFormer): q and k rotated by their token's position in every layer.

Plain torch (no fairseq import): ``tupe-export-hf`` ships this file into the exported model folder.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .attention import SelfAttention


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on (..., T, dh): dims ``m`` and ``m + dh/2`` form the pair rotated by angle ``t * theta_m``
    (the GPT-NeoX layout of RoFormer's pairs ``(2m, 2m+1)``; the learned q/k projections absorb the
    fixed permutation between the two)."""
    half = x.size(-1) // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class RotarySelfAttention(SelfAttention):
    """RoPE (Su et al., RoFormer): q and k of every layer rotated by their token's position, base
    10000, before the usual ``(dh)^-0.5`` scaled dot product (a rotation keeps norms, so the scale
    of the logits is BERT's)."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {self.head_dim} (embed_dim / heads)")

    def positional_qk(self, q, k, mask, positions):
        cos, sin = positions.rotary  # (T, dh) each
        return rotate(q, cos, sin), rotate(k, cos, sin), mask
