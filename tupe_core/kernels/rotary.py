"""``rotate_qk``: RoPE's rotation of q and k as one Triton kernel per tensor, forward and backward.

The plain-torch rotation (``rope.py``: ``x * cos + cat(-x2, x1) * sin``) is five elementwise kernels
per tensor and keeps a copy of ``cat`` for its backward; here each tensor is read once and written once, in each
direction. Dims ``m`` and ``m + dh/2`` form the pair rotated by angle ``t * theta_m`` (the GPT-NeoX layout), so
with ``c = cos``, ``s = sin`` of the pair's angle:

    forward:   y1 = x1 c - x2 s,   y2 = x2 c + x1 s
    backward:  g1' = g1 c + g2 s,  g2' = g2 c - g1 s     (the rotation by -angle: its transpose)

Runs on CUDA, or anywhere under Triton's interpreter (tests); plain torch and triton, no fairseq import.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # the module still imports: available() is False
    triton = None

BLOCK_T = 16  # tokens per program; a program owns one (sequence, head, block of tokens) of one tensor


def available(device) -> bool:
    """Whether ``rotate_qk`` runs on ``device`` (the attention kernels' rule: CUDA, or the interpreter)."""
    from .triton_attention import triton_available

    return triton is not None and triton_available(device)


if triton is not None:

    @triton.jit
    def _rotate_kernel(X, Y, Cos, Sin, T, H, stride_xb, stride_xh, stride_xt, stride_yb, stride_yh, stride_yt,
                       stride_ct, HALF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK: tl.constexpr,
                       SIGN: tl.constexpr):
        """One (b, h, token block) of X (B, H, T, 2 HALF) rotated by +angle (SIGN 1) or -angle (SIGN -1) into Y.
        fp32 arithmetic whatever the input dtype (the tables are fp32)."""
        block, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        t = block * BLOCK + tl.arange(0, BLOCK)[:, None]  # (BLOCK, 1)
        d = tl.arange(0, BLOCK_D)[None, :]  # (1, BLOCK_D): the first half's dims
        inside = (t < T) & (d < HALF)
        x = X + b * stride_xb + h * stride_xh + t * stride_xt
        x1 = tl.load(x + d, mask=inside, other=0.0).to(tl.float32)
        x2 = tl.load(x + d + HALF, mask=inside, other=0.0).to(tl.float32)
        c = tl.load(Cos + t * stride_ct + d, mask=inside, other=0.0)
        s = tl.load(Sin + t * stride_ct + d, mask=inside, other=0.0) * SIGN
        y = Y + b * stride_yb + h * stride_yh + t * stride_yt
        tl.store(y + d, (x1 * c - x2 * s).to(Y.dtype.element_ty), mask=inside)
        tl.store(y + d + HALF, (x2 * c + x1 * s).to(Y.dtype.element_ty), mask=inside)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, sign: int) -> Tensor:
    """x (B, H, T, dh) any strides with the last one 1; cos, sin (T, dh) fp32 with equal halves."""
    B, H, T, dh = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = torch.empty_like(x)  # x's layout
    cos, sin = cos.float().contiguous(), sin.float().contiguous()
    half = dh // 2
    grid = (triton.cdiv(T, BLOCK_T), B * H)
    _rotate_kernel[grid](x, y, cos, sin, T, H, x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1),
                         y.stride(2), cos.stride(0), HALF=half, BLOCK_D=triton.next_power_of_2(half),
                         BLOCK=BLOCK_T, SIGN=sign)
    return y


class RotateQK(torch.autograd.Function):
    """q and k rotated by their token's angle; the fixed tables get no gradient."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate(q, cos, sin, 1), _rotate(k, cos, sin, 1)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        cos, sin = ctx.saved_tensors
        return _rotate(grad_q, cos, sin, -1), _rotate(grad_k, cos, sin, -1), None, None


def rotate_qk(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> Tuple[Tensor, Tensor]:
    """RoPE on q and k, (B, H, T, dh) each (dh even), by the (T, dh) tables whose halves are equal
    (``rope.py``'s ``rope_cos``/``rope_sin``). Returns them rotated, in their dtype."""
    if not available(q.device):
        raise RuntimeError("rotate_qk runs on CUDA, or under Triton's interpreter (TRITON_INTERPRET=1 before "
                           "triton is imported); rope.py rotates in plain torch elsewhere")
    if q.size(-1) % 2 or cos.shape != (q.size(2), q.size(-1)):
        raise ValueError(f"q (B, H, T, dh) with dh even and tables (T, dh); got {tuple(q.shape)}, {tuple(cos.shape)}")
    return RotateQK.apply(q, k, cos, sin)
