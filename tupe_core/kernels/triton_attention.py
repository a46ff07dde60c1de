"""``biased_attention``: fused attention with an additive, learnable positional bias, our Triton kernels
(``attention_kernels.py``, FlashAttention-2's algorithm) behind one ``torch.autograd.Function``:

    out = dropout(softmax(q k^T * scale + bias + padding)) v

SDPA sends a bias that needs a gradient to its memory-efficient kernel; here the bias is read inside the tiles
as rows padded to 16 elements (``kernel_layout``: a bias in another layout, e.g. T5's permuted view, is copied
into it once per forward; a batch-shared (H, T, T) bias is never expanded to (B, H, T, T), forward or
backward) and its gradient is summed over the batch inside the backward kernel.
Key padding is a separate (B, T) mask, never merged into the bias: a padded key gets a large finite negative
logit, as on the explicit path (``padding_value`` in ``masks.py``), so a row whose keys are all padding
gets uniform weights (the mean of v) instead of NaN. Attention dropout is drawn inside the forward kernel from a
counter-based generator (p rounded to 1/256, ``effective_dropout``) and kept as a 1-bit mask
that the backward reads.

Runs on CUDA, or anywhere under Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is first
imported in the process; the tests run it on CPU tensors): ``triton_available``. Plain torch and triton, no
fairseq import; the module imports without triton (``triton_available`` is then False).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

try:
    import triton
except ImportError:  # this module still imports: triton_available() is False, biased_attention refuses
    triton = None


logger = logging.getLogger(__name__)


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
    num_stages: int = 2  # software pipeline stages of every kernel's loop, but the dK/dV kernel's with dropout
    dkdv_per_sm: int = 2  # dK/dV programs that fit one SM (its registers; bench/kernel_sass.py): sizes the groups
    # The dK/dV kernel's stages with dropout. Not pipelined: with 2 stages it holds the next step's bias tile in
    # registers and its dK, dV products in flight across the step's end, and at 255 registers it spilled under the
    # Triton of a GPU machine's torch (3.6, 3.7; bench/kernel_sass.py, docs/gpu.md). Its step already waits on an
    # unpipelined load (the keep mask, 2 bytes a group: too narrow for an asynchronous copy).
    dkdv_dropout_stages: int = 1

    def __post_init__(self):
        # dropout is drawn and stored in whole groups of 16 queries x 64 keys (attention_kernels._draw_keep)
        tiles = [(self.forward_m, self.forward_n), (self.dq_m, self.dq_n), (self.dkdv_m, self.dkdv_n)]
        if any(m % 16 or n % 64 for m, n in tiles):
            raise ValueError(f"{self}: every tile must be a multiple of 16 queries x 64 keys")


# CUDA, head dim <= 64 (BERT/RoBERTa base and large), half precision: the default tiles, and each kernel's
# autotune list for Hopper (``tuned_blocks``): (query rows, keys, warps[, dK/dV programs per SM]). Every member
# compiles for sm_90 without spilling and leaves 8 of the 255 registers (bench/kernel_sass.py, bf16, shared
# learned bias, padding, dropout 0.1); 3 pipeline stages were larger and spilled in dK/dV, so 2 (1 in dK/dV with
# dropout: ``Blocks.dkdv_dropout_stages``). Not a forward candidate: 128 x 128, which holds a 128 x 128 fp32 tile
# of logits (64 registers a thread at 8 warps) beside the dropout draws: 255 registers and 16 bytes spilled at 8
# warps, 168-240 bytes spilled at 16 (whose limit is 128 registers a thread); docs/gpu.md.
HALF_BLOCKS = Blocks(forward_m=128, forward_n=64, forward_warps=8, dq_m=128, dq_n=64, dq_warps=8,
                     dkdv_m=32, dkdv_n=64, dkdv_warps=4)
FORWARD_TILES = ((128, 64, 8), (64, 64, 4))
DQ_TILES = ((128, 64, 8), (64, 64, 4))
DKDV_TILES = ((32, 64, 4, 2), (16, 64, 4, 2))
# fp32 inputs: fp32 tiles take twice the registers and shared memory (and without TF32 the products run on
# FMA units): smaller tiles (sm_90 builds still spill up to a few hundred bytes: a correctness path, not a fast one).
FP32_BLOCKS = Blocks(forward_m=64, forward_n=64, forward_warps=4, dq_m=64, dq_n=64, dq_warps=4,
                     dkdv_m=32, dkdv_n=64, dkdv_warps=4)
# Triton's interpreter (tests): the smallest tiles, so that tiny sequences span several blocks and a ragged tail.
INTERPRETER_BLOCKS = Blocks(forward_m=16, forward_n=64, forward_warps=1, dq_m=16, dq_n=64, dq_warps=1,
                            dkdv_m=16, dkdv_n=64, dkdv_warps=1, num_stages=1)
MAX_HEAD_DIM = 64  # the tiles above are sized for it (BERT/RoBERTa base and large)
BIAS_ROW_MULTIPLE = 16  # the bias's row stride, in elements (Triton's alignment hint is "divisible by 16")
LOG2E = 1.4426950408889634  # the kernels' logits are in base 2: the scale and the bias are multiplied by it
# The gradient of a batch-shared bias is summed over the batch inside the dK/dV kernel: its programs split the
# batch into G groups of sequences, each program summing its group's sequences into the group's own fp32 (H, T, T)
# partial sum (no atomics: the same order on every run), the G sums added in torch afterwards. One group would be
# only H * ceil(T / dkdv_n) programs (96 at T = 512 for an H100's 132 SMs); G is the smallest that fills
# BIAS_GRAD_WAVES waves of the card (Blocks.dkdv_per_sm programs per SM), with at most BIAS_GRAD_SEQUENCES
# sequences per group; the partial sums never reach the size of a (B, H, T, T) tensor.
BIAS_GRAD_SEQUENCES = 8
BIAS_GRAD_WAVES = 2


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


def dropout_threshold(dropout_p: float) -> int:
    """The kernels' 8-bit dropout threshold: a weight is dropped when its random byte is below it, so the
    dropped fraction is ``threshold / 256``, p rounded to the nearest 1/256 (0.1 becomes 26 / 256 = 0.1016)."""
    threshold = round(dropout_p * 256)
    if dropout_p > 0 and not 0 < threshold < 256:
        raise ValueError(f"dropout_p {dropout_p} rounds to {threshold}/256: the kernels drop in steps of 1/256, "
                         "so p must lie in [1/512, 1 - 1/512)")
    return threshold


def effective_dropout(dropout_p: float) -> float:
    """The fraction the kernels drop and scale for: ``dropout_p`` rounded to 1/256 (``dropout_threshold``)."""
    return dropout_threshold(dropout_p) / 256


def _bias_strides(bias: Optional[Tensor]):
    """(batch, head, query) strides of an (H, T, T) (batch stride 0) or (B, H, T, T) bias (key stride 1)."""
    if bias is None:
        return 0, 0, 0
    return (0, *bias.stride()[:2]) if bias.dim() == 3 else tuple(bias.stride()[:3])


def padded(T: int) -> int:
    """T rounded up to ``BIAS_ROW_MULTIPLE``: the row length of the bias, the softmax statistics and a shared bias's
    keys-major gradient, whose rows then load and store as whole vectors for any T."""
    return -(-T // BIAS_ROW_MULTIPLE) * BIAS_ROW_MULTIPLE


def kernel_layout(bias: Optional[Tensor]) -> Optional[Tensor]:
    """``bias`` as the kernels read it: key stride 1, every other stride a multiple of ``BIAS_ROW_MULTIPLE``
    elements (its rows load as whole 16-byte vectors for any T); a bias in another layout (T5's permuted view,
    an offset view, T not a multiple of 16) is copied once into padded rows, differentiably. The model's mask
    does this once per forward (``AttentionMask.kernel_bias``), so the layers never copy."""
    if bias is None or (bias.stride(-1) == 1 and all(s % BIAS_ROW_MULTIPLE == 0 for s in bias.stride()[:-1])):
        return bias
    T = bias.size(-1)
    rows = bias.new_zeros(*bias.shape[:-1], padded(T))[..., :T]
    return rows.copy_(bias)  # row-major whatever the input's layout; the copy passes the gradient back


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the jitted kernel, its grid, its arguments in order and its compile-time settings.
    ``biased_attention`` runs it; ``bench/kernel_sass.py`` compiles the same launch for a GPU it does not have."""

    kernel: Any
    grid: Tuple[int, ...]
    args: Tuple[Any, ...]
    constexprs: Dict[str, Any]
    num_warps: int
    num_stages: int

    def __call__(self) -> None:
        self.kernel[self.grid](*self.args, **self.constexprs, num_warps=self.num_warps, num_stages=self.num_stages)


def forward_launch(q, k, v, bias, pad, scale: float, dropout_p: float, seed: int, blocks: Blocks):
    """The forward's launch and its outputs: out (B, H, T, D) in q's dtype and layout, row_max, row_sum (B * H,
    T padded to 16: ``padded``) fp32, and with dropout the keep mask (``keep_mask_buffer``; else None)."""
    B, H, T, D = q.shape
    out = torch.empty_like(q)  # q's strides (the (T, B, H, D) layout the model permutes back without a copy)
    row_max = torch.empty(B * H, padded(T), device=q.device, dtype=torch.float32)  # whole-vector rows at any T
    row_sum = torch.empty_like(row_max)
    threshold = dropout_threshold(dropout_p)
    keep = keep_mask_buffer(B * H, T, q.device) if threshold else None
    launch = Launch(
        _kernels().attention_forward_kernel, (triton.cdiv(T, blocks.forward_m), B * H),
        (q, k, v, _or(bias, q), _or(pad, q), out, row_max, row_sum, _or(keep, q),
         *q.stride(), *k.stride(), *v.stride(), *out.stride(), *_bias_strides(bias),
         *((0, 0) if pad is None else pad.stride()), row_max.stride(0),
         H, T, D, scale * LOG2E, threshold, 1 / (1 - effective_dropout(dropout_p)), seed),
        dict(HAS_BIAS=bias is not None, HAS_PAD=pad is not None, DROPOUT=threshold > 0, DROP_MAJORITY=threshold >= 128,
             PRECISION=_precision(q.dtype), BLOCK_M=blocks.forward_m, BLOCK_N=blocks.forward_n, BLOCK_D=_block_d(D)),
        blocks.forward_warps, blocks.num_stages)
    return launch, (out, row_max, row_sum, keep)


def sequences_per_program(B: int, programs_per_group: int, sms: int, per_sm: int = 2) -> int:
    """Sequences one dK/dV program sums for a shared bias's gradient: groups enough for ``BIAS_GRAD_WAVES`` full
    waves of ``sms`` SMs holding ``per_sm`` programs each (no SM count known, e.g. Triton's interpreter: 0), at
    most ``BIAS_GRAD_SEQUENCES`` a group."""
    slots = sms * per_sm * BIAS_GRAD_WAVES
    groups = min(B, max(triton.cdiv(B, BIAS_GRAD_SEQUENCES), triton.cdiv(slots, programs_per_group)))
    return triton.cdiv(B, groups)


def multiprocessors(device: torch.device) -> int:
    """The SM count of a CUDA device; 0 elsewhere (Triton's interpreter)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0


def backward_launches(q, k, v, bias, pad, out, dout, row_max, row_sum, keep, scale: float, dropout_p: float,
                      bias_grad: bool, blocks: Blocks, sms: Optional[int] = None, group_size: Optional[int] = None):
    """The backward's two launches (dQ, then dK/dV, which reads the dQ kernel's Delta) and their outputs: dq, dk,
    dv in their input's dtype and the bias gradient: a shared bias's fp32 group sums (G, H, T, T)
    (``_sum_groups`` adds them), a per-sequence bias's (B, H, T, T) in its own dtype, or None. ``sms``: the SMs
    the dK/dV grid is sized for (default: the device's); ``group_size``: the sequences a shared bias's dK/dV
    program sums, instead of ``sequences_per_program``'s (the first-use check groups its small batch so)."""
    B, H, T, D = q.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty_like(row_max)  # (B * H, padded T) fp32, written by the dQ kernel
    threshold = dropout_threshold(dropout_p)
    flags = dict(HAS_BIAS=bias is not None, HAS_PAD=pad is not None, DROPOUT=threshold > 0,
                 PRECISION=_precision(q.dtype), BLOCK_D=_block_d(D))
    bias_arg, pad_arg, keep_arg = _or(bias, q), _or(pad, q), _or(keep, q)
    bias_strides, pad_strides = _bias_strides(bias), (0, 0) if pad is None else pad.stride()
    inv_keep = 1 / (1 - effective_dropout(dropout_p))  # the kept weights' scale
    kernels = _kernels()
    dq_launch = Launch(
        kernels.attention_backward_dq_kernel, (triton.cdiv(T, blocks.dq_m), B * H),
        (q, k, v, bias_arg, pad_arg, out, dout, row_max, row_sum, keep_arg, delta, dq,
         *q.stride(), *k.stride(), *v.stride(), *out.stride(), *dout.stride(), *dq.stride(),
         *bias_strides, *pad_strides, row_max.stride(0), H, T, D, scale * LOG2E, inv_keep),
        dict(flags, BLOCK_M=blocks.dq_m, BLOCK_N=blocks.dq_n), blocks.dq_warps, blocks.num_stages)

    # dK/dV programs: one per (key block, head, group of sequences); a group is one sequence unless a
    # batch-shared bias needs its gradient summed over the batch (sequences_per_program).
    key_blocks = triton.cdiv(T, blocks.dkdv_n)
    shared = bias_grad and bias.dim() == 3
    sms = multiprocessors(q.device) if sms is None else sms
    per_program = 1
    if shared:
        per_program = group_size or sequences_per_program(B, key_blocks * H, sms, blocks.dkdv_per_sm)
    groups = triton.cdiv(B, per_program)
    dbias = None
    dbias_args = (0, 0, 0, 0, 0)
    if shared:  # fp32 group sums, keys-major, queries padded to a multiple of 16: the kernel holds (keys x queries)
        # tiles and adds them in along their contiguous axis, in whole vectors (TUPE-R's dK/dV loop: 716 -> 655
        # instructions a step, docs/gpu.md); the sums are the transposed view. Every entry is written.
        keys_major = torch.empty(groups, H, T, padded(T), device=q.device, dtype=torch.float32)
        dbias = keys_major[..., :T].transpose(2, 3)
        dbias_args = (*keys_major.stride()[:2], 1, padded(T), padded(T))
    elif bias_grad:  # the per-sequence gradient in the bias's dtype and layout (written once, no read-back)
        dbias = torch.empty(groups, H, T, T, device=q.device, dtype=bias.dtype)
        dbias_args = (*dbias.stride()[:3], 1, T)
    dkdv_launch = Launch(
        kernels.attention_backward_dkdv_kernel, (key_blocks, H, groups),
        (q, k, v, bias_arg, pad_arg, dout, row_max, row_sum, keep_arg, delta, dk, dv, _or(dbias, q),
         *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dk.stride(), *dv.stride(),
         *bias_strides, *pad_strides, *dbias_args, row_max.stride(0),
         B, H, T, D, scale * LOG2E, inv_keep, per_program),
        dict(flags, BIAS_GRAD=bias_grad, BLOCK_M=blocks.dkdv_m, BLOCK_N=blocks.dkdv_n),
        blocks.dkdv_warps, blocks.dkdv_dropout_stages if threshold else blocks.num_stages)
    return [dq_launch, dkdv_launch], (dq, dk, dv, dbias)


_TUNED: Dict[Tuple, Blocks] = {}  # tuned_blocks' choices in this process


def tuned_choices() -> Dict[Tuple, Blocks]:
    """The tiles ``tuned_blocks`` chose in this process, by (device, dtype, T, D, dropout, bias kind, padding)."""
    return dict(_TUNED)


def tuned_blocks(q, k, v, bias, pad, scale: float, dropout_p: float, bias_grad: bool) -> Blocks:
    """The tiles for this call: on CUDA in half precision, each kernel's fastest from its autotune list, timed
    once per (device, dtype, T, D, dropout or not, bias kind, padding or not) on fresh inputs of the call's
    shapes and kept for the process (``tune``); elsewhere ``blocks_for``'s."""
    if q.device.type != "cuda" or q.dtype == torch.float32 or _interpreted():
        return blocks_for(q.dtype)
    kind = "none" if bias is None else ("per_sequence" if bias.dim() == 4 else "shared") + ("_grad" if bias_grad else "")
    key = (str(q.device), str(q.dtype).replace("torch.", ""), q.shape[2], q.shape[3], dropout_threshold(dropout_p) > 0,
           kind, pad is not None)
    if key not in _TUNED:
        _TUNED[key] = tune(q, k, v, bias, pad, scale, dropout_p, bias_grad, HALF_BLOCKS, FORWARD_TILES, DQ_TILES,
                           DKDV_TILES, _cuda_ms)
        logger.info(f"triton attention tiles for T={key[2]} D={key[3]} {key[1]} dropout={key[4]} bias={kind} "
                    f"padding={key[6]}: {_TUNED[key]}")
    return _TUNED[key]


def tune(q, k, v, bias, pad, scale: float, dropout_p: float, bias_grad: bool, start: Blocks,
         forward_tiles, dq_tiles, dkdv_tiles, timer: Callable[[Launch], float]) -> Blocks:
    """Each kernel's tiles chosen in turn (forward, dQ, dK/dV, each with the previous choices) as the fastest by
    ``timer`` (a launch -> its time) on fresh random inputs with the shapes, strides and dtypes of the call's; a
    candidate that fails to compile or run is skipped, and ``start`` stays where all fail. The dropout mask does
    not depend on the tiles, so the choice changes only the order of fp32 sums."""
    def fresh(x):
        return None if x is None else x.new_empty_strided(x.shape, x.stride()).normal_()

    q, k, v, bias = fresh(q), fresh(k), fresh(v), fresh(bias)
    seed = 12345

    def fastest(candidates, launch_of, fallback: Blocks) -> Blocks:
        times = {}
        for blocks in candidates:
            try:
                times[blocks] = timer(launch_of(blocks))
            except Exception:  # noqa: BLE001  (e.g. out of shared memory on a smaller card: not a candidate)
                continue
        return min(times, key=times.get) if times else fallback

    best = fastest([replace(start, forward_m=m, forward_n=n, forward_warps=w) for m, n, w in forward_tiles],
                   lambda b: forward_launch(q, k, v, bias, pad, scale, dropout_p, seed, b)[0], start)
    launch, (out, row_max, row_sum, keep) = forward_launch(q, k, v, bias, pad, scale, dropout_p, seed, best)
    launch()
    dout = fresh(out)

    def backward(b):
        return backward_launches(q, k, v, bias, pad, out, dout, row_max, row_sum, keep, scale, dropout_p, bias_grad,
                                 b)[0]

    best = fastest([replace(best, dq_m=m, dq_n=n, dq_warps=w) for m, n, w in dq_tiles], lambda b: backward(b)[0],
                   best)
    backward(best)[0]()  # Delta, which the dK/dV kernel reads
    return fastest([replace(best, dkdv_m=m, dkdv_n=n, dkdv_warps=w, dkdv_per_sm=per_sm)
                    for m, n, w, per_sm in dkdv_tiles], lambda b: backward(b)[1], best)


def _cuda_ms(launch: Launch, iters: int = 3) -> float:
    """Median ms of ``launch`` on CUDA over ``iters`` runs after one (that one compiles)."""
    launch()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def keep_mask_buffer(sequences_heads: int, T: int, device) -> Tensor:
    """The forward's dropout keep mask, one bit per weight: (B * H, ceil(T / 16) * 8, ceil(T / 64) * 8) uint16,
    one value per group of 16 weights (``unpack_keep``)."""
    return torch.empty(sequences_heads, triton.cdiv(T, 16) * 8, triton.cdiv(T, 64) * 8, device=device,
                       dtype=torch.uint16)


def _or(x: Optional[Tensor], fallback: Tensor) -> Tensor:
    """A tensor argument the kernel does not read when its flag is off still needs a pointer: ``fallback``."""
    return fallback if x is None else x


def _sum_groups(dbias: Optional[Tensor], bias: Optional[Tensor]) -> Optional[Tensor]:
    """The shared bias's gradient from the kernel's group sums (a per-sequence bias's is already whole)."""
    if dbias is None or bias.dim() != 3:
        return dbias
    keys_major = dbias.transpose(-1, -2)  # the kernel's layout: the sum reads it along its contiguous axis
    return (keys_major[0] if keys_major.shape[0] == 1 else keys_major.sum(0)).transpose(-1, -2)  # (H, T, T)


class BiasedAttention(torch.autograd.Function):
    """``biased_attention`` as an autograd function; ``seed`` is the dropout seed (``draw_dropout_seed``)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, pad, scale, dropout_p, seed, group_size):
        blocks = tuned_blocks(q, k, v, bias, pad, scale, dropout_p, bias is not None and bias.requires_grad)
        launch, (out, row_max, row_sum, keep) = forward_launch(q, k, v, bias, pad, scale, dropout_p, seed, blocks)
        launch()
        ctx.save_for_backward(q, k, v, bias, pad, out, row_max, row_sum, keep)
        ctx.scale, ctx.dropout_p, ctx.blocks, ctx.group_size = scale, dropout_p, blocks, group_size
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, pad, out, row_max, row_sum, keep = ctx.saved_tensors
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        launches, (dq, dk, dv, dbias) = backward_launches(
            q, k, v, bias, pad, out, dout, row_max, row_sum, keep, ctx.scale, ctx.dropout_p, bias_grad, ctx.blocks,
            group_size=ctx.group_size)
        for launch in launches:
            launch()
        dbias = _sum_groups(dbias, bias)
        if dbias is not None:
            dbias = dbias.to(bias.dtype)
        return dq, dk, dv, dbias, None, None, None, None, None


def draw_dropout_seed() -> int:
    """A dropout seed from torch's default (CPU) generator: ``torch.manual_seed`` makes the dropout reproducible,
    and drawing it never waits for the GPU. In [0, 2**31), so the kernels are compiled for one seed type."""
    return int(torch.randint(0, 2**31 - 1, ()).item())


def biased_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], key_padding_mask: Optional[Tensor], scale: float,
    dropout_p: float, training: bool = True, group_size: Optional[int] = None,
) -> Tensor:
    """``dropout(softmax(q k^T * scale + bias + padding)) v``, fused; differentiable in q, k, v and bias.

    q, k, v: (B, H, T, D), one dtype of fp32/fp16/bf16, any strides (the last one 1 reads fastest), D <= 64.
    bias: (H, T, T) shared by the batch or (B, H, T, T) per sequence, or None; any float dtype (read as fp32),
    may require grad (its gradient comes in its dtype, summed in fp32); read in place when it has the kernels'
    layout (``kernel_layout``), else copied into it first. key_padding_mask: (B, T) bool, True at padding, or
    None. Dropout (``dropout_p`` when ``training``) drops each probability with probability ``dropout_p``
    rounded to 1/256 (``effective_dropout``) and scales the kept ones by 1 / (1 - that), as F.dropout; its seed
    comes from torch's default generator. ``group_size``: the sequences one dK/dV program sums for a shared bias's
    gradient (default: ``sequences_per_program``'s, from the batch and the device). Returns (B, H, T, D) in q's
    dtype, with q's strides.
    """
    _check(q, k, v, bias, key_padding_mask, dropout_p)
    p = float(dropout_p) if training else 0.0
    seed = draw_dropout_seed() if dropout_threshold(p) else 0
    pad = None if key_padding_mask is None else key_padding_mask.view(torch.uint8)  # the kernels read bytes
    return BiasedAttention.apply(q, k, v, kernel_layout(bias), pad, float(scale), p, seed, group_size)


def unpack_keep(keep: Tensor, B: int, H: int, T: int) -> Tensor:
    """(B, H, T, T) bool from the kernels' keep mask (``keep_mask_buffer``): the value at [b * H + h, R * 8 + i,
    C * 8 + j] holds the 16 weights (16 R + i + 8 s, 64 C + j + 8 k), s = 0, 1, k = 0..7, at bit 8 s + k."""
    groups = keep.view(torch.int16).to(torch.int32) & 0xFFFF
    bits = (groups[..., None] >> torch.arange(16, device=keep.device, dtype=torch.int32)) & 1
    R, C = groups.shape[1] // 8, groups.shape[2] // 8
    bits = bits.reshape(B, H, R, 8, C, 8, 2, 8)  # (b, h, R, i, C, j, s, k)
    tile = bits.permute(0, 1, 2, 6, 3, 4, 7, 5).reshape(B, H, R * 16, C * 64)  # (R, s, i) rows, (C, k, j) keys
    return tile[:, :, :T, :T].bool()


def dropout_keep_mask(seed: int, B: int, H: int, T: int, dropout_p: float, device) -> Tensor:
    """(B, H, T, T) bool: the entries the kernels keep for ``seed`` (for tests: a reference with the same mask),
    as the forward kernel draws and stores them."""
    if not triton_available(device):
        raise RuntimeError(_unavailable(torch.device(device)))
    q = torch.zeros(B, H, T, 16, device=device)
    launch, (_, _, _, keep) = forward_launch(q, q, q, None, None, 1.0, dropout_p, seed, blocks_for(q.dtype))
    launch()
    return unpack_keep(keep, B, H, T)


# The first-use check's tolerance on max |x - ref| / max |ref| (ref: the same ops in fp32): a few roundings of
# the dtype (bf16 keeps 8 mantissa bits, fp16 11); fp32 runs the products in TF32 on CUDA.
CHECK_TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 2e-3}
CHECK_DROPOUT = 0.1  # the check's dropout where its configuration has dropout (RoBERTa's attention dropout)
CHECK_SEQUENCES, CHECK_HEADS, CHECK_GROUP = 3, 2, 2  # its batch: dK/dV sums 2 sequences a program, then 1
CHECK_SHAPE = (80, 64)  # (T, head dim) without a training call to copy: a ragged key block of 64


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".strip()


def self_check(device, dtype: torch.dtype, attention=None, per_sequence: bool = False, dropout_p: float = 0.0,
               like: Optional[Tuple[Tensor, Tensor]] = None) -> Optional[str]:
    """Run ``attention`` (default ``biased_attention``) once as training runs it, against the same math in fp32 torch
    ops, forward and the four gradients; None when they agree within ``CHECK_TOLERANCE``, else why, in one line
    (an exception, or what differs by how much). ``--tupe-attention auto`` runs it before it first takes the kernel
    for a configuration (``attend.triton_failure``).

    The configuration: a learned bias, (H, T, T) shared or (B, H, T, T) per sequence (``per_sequence``), and
    ``dropout_p`` (0, or ``CHECK_DROPOUT``: the reference applies the kernel's own keep mask, drawn again from the
    same seed by ``dropout_keep_mask``). ``like``: the training call's (q, bias); the check takes its T and head
    dim, and first asks the tuner for the tiles at that call's full shape (``tuned_blocks``, which keeps its choice
    per T, not per batch), so that the check's small batch runs the tiles training will. The batch:
    ``CHECK_SEQUENCES`` sequences of ``CHECK_HEADS`` heads, the first right-padded from 3/4 of T, a shared bias's
    gradient summed ``CHECK_GROUP`` sequences a dK/dV program (the grouped loop, and a last group of one). The
    fp32 reference holds a few (3, 2, T, T) tensors: under 1 GiB up to T = 2048."""
    attention = biased_attention if attention is None else attention
    T, D = CHECK_SHAPE if like is None else like[0].shape[2:]
    B, H = CHECK_SEQUENCES, CHECK_HEADS
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(B, H, T, D, generator=g) for _ in range(3)]
    leaves.append(torch.randn((B, H, T, T) if per_sequence else (H, T, T), generator=g))
    dout, pad = torch.randn(B, H, T, D, generator=g), torch.zeros(B, T, dtype=torch.bool)
    pad[0, 3 * T // 4:] = True
    keep = None
    with torch.enable_grad(), torch.autocast(torch.device(device).type, enabled=False), \
            torch.random.fork_rng(devices=[]):  # the check draws dropout seeds: training's draws stay as they were
        try:
            if like is not None:  # the tiles for the training call's shape, with the check's padding (kept)
                q_like, bias_like = like
                tuned_blocks(q_like, q_like, q_like, kernel_layout(bias_like.detach()),
                             torch.zeros(q_like.shape[0], T, dtype=torch.uint8, device=device), 0.125, dropout_p, True)
            inputs = [x.to(device, dtype).requires_grad_() for x in leaves]
            dout, pad = dout.to(device, dtype), pad.to(device)
            if dropout_threshold(dropout_p):  # the seed biased_attention draws next, and the mask it gives
                torch.manual_seed(0)
                keep = dropout_keep_mask(draw_dropout_seed(), B, H, T, dropout_p, device)
                kept = keep.float().mean().item()
                if abs(kept - (1 - effective_dropout(dropout_p))) > 0.02:
                    return f"its dropout keeps {kept:.3f} of the weights, not {1 - effective_dropout(dropout_p):.3f}"
            torch.manual_seed(0)
            out = attention(*inputs, pad, 0.125, dropout_p, group_size=CHECK_GROUP)
            got = [out, *torch.autograd.grad(out, inputs, dout)]
        except Exception as error:  # whatever the compiler, the tuner or the launch raises: the caller keeps SDPA
            return one_line(error)
        ref_inputs = [x.detach().float().requires_grad_() for x in inputs]
        q, k, v, bias = ref_inputs
        logits = torch.matmul(q * 0.125, k.transpose(-1, -2)) + bias  # (B, H, T, T)
        logits = logits.masked_fill(pad[:, None, None, :], torch.finfo(torch.float32).min / 2)
        weights = torch.softmax(logits, dim=-1)
        if keep is not None:  # the kernel's own mask; kept weights scaled by 1 / (1 - p rounded to 1/256)
            weights = weights * keep / (1 - effective_dropout(dropout_p))
        ref_out = torch.matmul(weights, v)
        expected = [ref_out, *torch.autograd.grad(ref_out, ref_inputs, dout.float())]
    for name, x, ref in zip(("output", "dq", "dk", "dv", "dbias"), got, expected):
        error = ((x.float() - ref).abs().max() / ref.abs().max()).item()
        if not error <= CHECK_TOLERANCE[dtype]:  # NaN fails too
            return f"its {name} differs from the same math in fp32 torch by {error:.2g} (> {CHECK_TOLERANCE[dtype]})"
    return None


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
