"""``biased_attention``: fused attention with an additive, learnable positional bias, our Triton kernels
(``attention_kernels.py``, FlashAttention-2's algorithm) behind one ``torch.autograd.Function``:

    out = dropout(softmax(q k^T * scale + bias + padding)) v

SDPA sends a bias that needs a gradient to its memory-efficient kernel; here the bias is read through its
strides inside the tiles (a batch-shared (H, T, T) bias, e.g. T5's permuted view, is never copied or expanded
to (B, H, T, T), forward or backward) and its gradient is summed over the batch inside the backward kernel.
Key padding is a separate (B, T) mask, never merged into the bias: a padded key gets a large finite negative
logit, as on the explicit path (``padding_value`` in ``masks.py``), so a row whose keys are all padding
gets uniform weights (the mean of v) instead of NaN. Attention dropout is drawn inside the kernels from a
counter-based generator and redrawn in the backward (no stored mask).

Runs on CUDA, or anywhere under Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is first
imported in the process; the tests run it on CPU tensors): ``triton_available``. Plain torch and triton, no
fairseq import; the module imports without triton (``triton_available`` is then False).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

try:
    import triton
except ImportError:  # this module still imports: triton_available() is False, biased_attention refuses
    triton = None


def _kernels():
    """The kernel module (imported on first use: it needs triton)."""
    from . import attention_kernels

    return attention_kernels


def _interpreted() -> bool:
    """Whether triton runs its interpreter in this process: TRITON_INTERPRET=1 was set before triton and the
    kernels were first imported (triton reads it when it decorates a function, its own library included)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton.language.random.rand, InterpretedFunction) and isinstance(
        _kernels().attention_forward_kernel, InterpretedFunction
    )


def triton_available(device) -> bool:
    """Whether ``biased_attention`` runs on ``device``: triton imports, and ``device`` is CUDA, or the process
    runs Triton's interpreter (any device; CPU tensors for tests)."""
    if triton is None:
        return False
    if _interpreted():
        return True
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


# ------------------------------------------------------------------------------------------------------------
# Launch configuration: every block size and grid of the kernels, in this one place.


@dataclass(frozen=True)
class Blocks:
    """Tile sizes (powers of two, at least 16: ``tl.dot``'s minimum) and warps of the three kernels."""

    forward_m: int  # query rows per forward program
    forward_n: int  # keys per step of its loop
    forward_warps: int
    dq_m: int  # query rows per dQ program
    dq_n: int  # keys per step of its loop
    dq_warps: int
    dkdv_m: int  # query rows per step of a dK/dV program's loop
    dkdv_n: int  # keys per dK/dV program
    dkdv_warps: int
    num_stages: int = 2


# CUDA, head dim <= 64 (BERT/RoBERTa base and large). Chosen from offline sm_90 builds (ptxas -v) so that the
# kernels keep their values in registers (no spill stores; under 100 bytes for dK/dV with a fixed bias and
# dropout), where larger or 4-warp forward tiles spilled; not yet timed against other tiles on a GPU.
HALF_BLOCKS = Blocks(forward_m=128, forward_n=64, forward_warps=8, dq_m=128, dq_n=64, dq_warps=8,
                     dkdv_m=32, dkdv_n=64, dkdv_warps=4)
# fp32 inputs: fp32 tiles take twice the registers and shared memory (and without TF32 the products run on
# FMA units): smaller tiles (sm_90 builds still spill up to a few hundred bytes: a correctness path, not a fast one).
FP32_BLOCKS = Blocks(forward_m=64, forward_n=32, forward_warps=4, dq_m=64, dq_n=32, dq_warps=4,
                     dkdv_m=32, dkdv_n=32, dkdv_warps=4)
# Triton's interpreter (tests): the smallest tiles, so that tiny sequences span several blocks and a ragged tail.
INTERPRETER_BLOCKS = Blocks(forward_m=16, forward_n=16, forward_warps=1, dq_m=16, dq_n=16, dq_warps=1,
                            dkdv_m=16, dkdv_n=16, dkdv_warps=1, num_stages=1)
MAX_HEAD_DIM = 64  # the tiles above are sized for it (BERT/RoBERTa base and large)
# Sequences whose bias gradients one dK/dV program sums (a batch-shared bias that needs a gradient): the batch
# splits into G = ceil(B / BIAS_GRAD_SEQUENCES) groups, one set of programs per group, each group with its own
# fp32 (H, T, T) partial sum, added in torch afterwards. Without groups there would be only H * T / dkdv_n
# programs (96 at T = 512 for an H100's 132 SMs); the partial sums never reach the size of a (B, H, T, T) tensor.
BIAS_GRAD_SEQUENCES = 8


def blocks_for(dtype: torch.dtype) -> Blocks:
    if _interpreted():
        return INTERPRETER_BLOCKS
    return FP32_BLOCKS if dtype == torch.float32 else HALF_BLOCKS


def _block_d(head_dim: int) -> int:
    """Head dim rounded up to a power of two, at least 16 (masked loads fill the rest with zeros)."""
    return max(16, triton.next_power_of_2(head_dim))


def _precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision: fp32 inputs in full fp32 unless torch allows TF32 for matmuls."""
    return "ieee" if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32 else "tf32"


def _bias_strides(bias: Optional[Tensor]):
    """(batch, head, query, key) strides of an (H, T, T) (batch stride 0) or (B, H, T, T) bias."""
    if bias is None:
        return 0, 0, 0, 0
    return (0, *bias.stride()) if bias.dim() == 3 else tuple(bias.stride())


def _forward(q, k, v, bias, pad, scale, dropout_p, seed):
    """out (B, H, T, D) in q's dtype and layout, row_max, row_sum (B * H, T) fp32."""
    B, H, T, D = q.shape
    blocks = blocks_for(q.dtype)
    out = torch.empty_like(q)  # q's strides (the (T, B, H, D) layout the model permutes back without a copy)
    row_max = torch.empty(B * H, T, device=q.device, dtype=torch.float32)
    row_sum = torch.empty_like(row_max)
    grid = (triton.cdiv(T, blocks.forward_m), B * H)
    _kernels().attention_forward_kernel[grid](
        q, k, v, q if bias is None else bias, q if pad is None else pad, out, row_max, row_sum,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), *_bias_strides(bias),
        *((0, 0) if pad is None else pad.stride()),
        H, T, D, scale, dropout_p, seed,
        HAS_BIAS=bias is not None, HAS_PAD=pad is not None, DROPOUT=dropout_p > 0, PRECISION=_precision(q.dtype),
        BLOCK_M=blocks.forward_m, BLOCK_N=blocks.forward_n, BLOCK_D=_block_d(D),
        num_warps=blocks.forward_warps, num_stages=blocks.num_stages,
    )
    return out, row_max, row_sum


def _backward(q, k, v, bias, pad, out, dout, row_max, row_sum, scale, dropout_p, seed, bias_grad):
    """dq, dk, dv in their input's dtype, and the bias gradient in fp32 ((H, T, T) or (B, H, T, T)) or None."""
    B, H, T, D = q.shape
    blocks = blocks_for(q.dtype)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(row_max)  # (B * H, T) fp32, written by the dQ kernel
    flags = dict(HAS_BIAS=bias is not None, HAS_PAD=pad is not None, DROPOUT=dropout_p > 0,
                 PRECISION=_precision(q.dtype), BLOCK_D=_block_d(D), num_stages=blocks.num_stages)
    bias_arg, pad_arg = q if bias is None else bias, q if pad is None else pad
    bias_strides, pad_strides = _bias_strides(bias), (0, 0) if pad is None else pad.stride()
    kernels = _kernels()

    grid = (triton.cdiv(T, blocks.dq_m), B * H)
    kernels.attention_backward_dq_kernel[grid](
        q, k, v, bias_arg, pad_arg, out, dout, row_max, row_sum, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), *dout.stride(), *dq.stride(),
        *bias_strides, *pad_strides, H, T, D, scale, dropout_p, seed,
        BLOCK_M=blocks.dq_m, BLOCK_N=blocks.dq_n, num_warps=blocks.dq_warps, **flags,
    )

    # dK/dV programs: one per (key block, head, group of sequences); a group is one sequence unless a
    # batch-shared bias needs its gradient summed over the batch (BIAS_GRAD_SEQUENCES).
    per_program = BIAS_GRAD_SEQUENCES if bias_grad and bias.dim() == 3 else 1
    groups = triton.cdiv(B, per_program)
    dbias = None
    if bias_grad:  # (G, H, T, T) group sums, or (B, H, T, T) for a per-sequence bias; every entry is written
        dbias = torch.empty(groups, H, T, T, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(T, blocks.dkdv_n), H, groups)
    kernels.attention_backward_dkdv_kernel[grid](
        q, k, v, bias_arg, pad_arg, dout, row_max, row_sum, delta, dk, dv, q if dbias is None else dbias,
        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dk.stride(), *dv.stride(),
        *bias_strides, *pad_strides, *((0, 0, 0, 0) if dbias is None else dbias.stride()),
        B, H, T, D, scale, dropout_p, seed, per_program, BIAS_GRAD=bias_grad,
        BLOCK_M=blocks.dkdv_m, BLOCK_N=blocks.dkdv_n, num_warps=blocks.dkdv_warps, **flags,
    )
    if dbias is not None and bias.dim() == 3:
        dbias = dbias[0] if groups == 1 else dbias.sum(0)  # (H, T, T)
    return dq, dk, dv, dbias


class BiasedAttention(torch.autograd.Function):
    """``biased_attention`` as an autograd function; ``seed`` is the dropout seed (``draw_dropout_seed``)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, pad, scale, dropout_p, seed):
        out, row_max, row_sum = _forward(q, k, v, bias, pad, scale, dropout_p, seed)
        ctx.save_for_backward(q, k, v, bias, pad, out, row_max, row_sum)
        ctx.scale, ctx.dropout_p, ctx.seed = scale, dropout_p, seed
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, pad, out, row_max, row_sum = ctx.saved_tensors
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        dq, dk, dv, dbias = _backward(q, k, v, bias, pad, out, dout, row_max, row_sum, ctx.scale, ctx.dropout_p,
                                      ctx.seed, bias_grad)
        if dbias is not None:
            dbias = dbias.to(bias.dtype)
        return dq, dk, dv, dbias, None, None, None, None


def draw_dropout_seed() -> int:
    """A dropout seed from torch's default (CPU) generator: ``torch.manual_seed`` makes the dropout reproducible,
    and drawing it never waits for the GPU. In [0, 2**31), so the kernels are compiled for one seed type."""
    return int(torch.randint(0, 2**31 - 1, ()).item())


def biased_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], key_padding_mask: Optional[Tensor], scale: float,
    dropout_p: float, training: bool = True,
) -> Tensor:
    """``dropout(softmax(q k^T * scale + bias + padding)) v``, fused; differentiable in q, k, v and bias.

    q, k, v: (B, H, T, D), one dtype of fp32/fp16/bf16, any strides (the last one 1 reads fastest), D <= 64.
    bias: (H, T, T) shared by the batch, any strides (a permuted or overlapping view is read in place), or
    (B, H, T, T) per sequence, or None; any float dtype (read as fp32), may require grad (its gradient comes in
    its dtype, summed in fp32). key_padding_mask: (B, T) bool, True at padding, or None. Dropout (``dropout_p``
    when ``training``) keeps each probability with probability 1 - p and scales it by 1 / (1 - p), as F.dropout;
    its seed comes from torch's default generator. Returns (B, H, T, D) in q's dtype, with q's strides.
    """
    _check(q, k, v, bias, key_padding_mask, dropout_p)
    p = float(dropout_p) if training else 0.0
    seed = draw_dropout_seed() if p > 0 else 0
    pad = None if key_padding_mask is None else key_padding_mask.view(torch.uint8)  # the kernels read bytes
    return BiasedAttention.apply(q, k, v, bias, pad, float(scale), p, seed)


def dropout_keep_mask(seed: int, B: int, H: int, T: int, dropout_p: float, device) -> Tensor:
    """(B, H, T, T) bool: the entries the kernels keep for ``seed`` (for tests: a reference with the same mask)."""
    if not triton_available(device):
        raise RuntimeError(_unavailable(torch.device(device)))
    keep = torch.empty(B, H, T, T, dtype=torch.int8, device=device)
    blocks = blocks_for(torch.bfloat16)
    grid = (triton.cdiv(T, blocks.forward_m), triton.cdiv(T, blocks.forward_n), B * H)
    _kernels().dropout_keep_kernel[grid](keep, H, T, float(dropout_p), seed,
                                         BLOCK_M=blocks.forward_m, BLOCK_N=blocks.forward_n,
                                         num_warps=blocks.forward_warps)
    return keep.bool()


def _unavailable(device: torch.device) -> str:
    if triton is None:
        return "biased_attention needs triton (pip install triton)"
    return (f"biased_attention runs on CUDA, or on {device.type} under Triton's interpreter: set TRITON_INTERPRET=1 "
            "before triton is first imported in the process")


def _check(q, k, v, bias, key_padding_mask, dropout_p) -> None:
    if not triton_available(q.device):
        raise RuntimeError(_unavailable(q.device))
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must be (B, H, T, D) of one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype of float32/float16/bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, T, D = q.shape
    if D > MAX_HEAD_DIM:
        raise ValueError(f"head dim {D} > {MAX_HEAD_DIM}")
    if bias is not None and (tuple(bias.shape) not in ((H, T, T), (B, H, T, T)) or not bias.is_floating_point()):
        raise ValueError(f"bias must be (H, T, T) = {(H, T, T)} or (B, H, T, T) = {(B, H, T, T)}, floating point, "
                         f"got {tuple(bias.shape)} {bias.dtype}")
    if key_padding_mask is not None and (key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (B, T)):
        raise ValueError(f"key_padding_mask must be (B, T) = {(B, T)} bool, got {tuple(key_padding_mask.shape)} "
                         f"{key_padding_mask.dtype}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    tensors = [q, k, v] + [x for x in (bias, key_padding_mask) if x is not None]
    if any(x.device != q.device for x in tensors):
        raise ValueError("q, k, v, bias and key_padding_mask must be on one device")
