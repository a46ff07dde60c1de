"""One attention layer's forward + backward on each path, with and without a positional bias, and the Triton
kernel's errors against a float64 explicit path.

Paths: ``sdpa`` (``F.scaled_dot_product_attention``, the bias as its mask), ``explicit`` (matmul, + bias,
softmax in fp32, dropout, matmul), ``triton`` (``tupe_core.kernels.triton_attention.biased_attention``),
``flex`` (``tupe_core.kernels.flex_attention.flex_biased_attention``, compiled on CUDA; no dropout). Bias
(``BIASES``): ``none``, ``fixed`` (an (H, T, T) bias without gradient), ``learned`` (with gradient), in the
layouts the variants pass: ``permuted`` (T5's and BERT-R's (T, T, H) bucket gather seen as (H, T, T)),
``offset`` (TUPE-A's [CLS]-reset term, an (H, T + 1, T + 1) tensor seen from row and column 1), and
``per_sequence`` (a learned (B, H, T, T) bias, as DeBERTa's terms). The Triton path copies a bias that is not in
its layout on every call here (the model does it once per forward for all its layers). Dropout 0 and 0.1;
padding (``--padding``): none, or what training sees, a quarter of the sequences right-padded from 3/4 of T.
Every length T has ``--tokens // T`` sequences (equal tokens per step), H = 12, D = 64, bf16 on CUDA; the core
of attention only (q, k, v and the bias given, no projections), timed with CUDA events (median of ``--iters``).
``ratio`` = ms / ms of ``sdpa`` without bias and without padding at the same T and dropout (on an H100 in bf16,
cuDNN's kernel: the fastest this layer gets). The error table: the Triton path and
the explicit path in the same dtype, each against the explicit path in float64 (two sequences, one right-padded,
learned bias, no dropout), max |x - ref| / max |ref| of the output, dq, dk, dv and dbias.

    python bench/bench_attention.py                       # on a GPU
    python bench/bench_attention.py --dry-run             # CPU, tiny sizes (Triton's interpreter): it runs

``attention_rows`` and ``error_rows`` return the tables as lists of dicts (for bench/gpu_check).
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

# the GPU kit: on the lent GPU machine the checkout is not installed (gpu_check runs this with GPU_SITE and the
# checkout on its path), so the checkout is put first here too
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tupe_core.attend import PATHS as ATTENTION_PATHS  # noqa: E402

PATHS = tuple(ATTENTION_PATHS)  # the values of --tupe-attention but auto: what attend() below runs for each
BIASES = ("none", "fixed", "learned", "permuted", "offset", "per_sequence")  # the module docstring says what each is
PADDINGS = (False, True)


def explicit_attention(q, k, v, bias, padding, scale, dropout_p):
    """The explicit path's ops: (q * scale) k^T + bias (+ padding), softmax in fp32, dropout, @ v."""
    logits = torch.matmul(q * scale, k.transpose(-1, -2))  # (B, H, T, T)
    if bias is not None:
        logits = logits + bias
    if padding is not None:
        logits = logits.masked_fill(padding[:, None, None, :], torch.finfo(logits.dtype).min / 2)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(F.dropout(weights, p=dropout_p) if dropout_p else weights, v)


def attend(path: str, q, k, v, bias, padding, scale: float, dropout_p: float):
    if path == "sdpa":
        mask = None if bias is None else bias if bias.dim() == 4 else bias.unsqueeze(0)  # (B or 1, H, T, T)
        if padding is not None:
            pad = torch.zeros(padding.shape, dtype=q.dtype, device=q.device).masked_fill(
                padding, torch.finfo(q.dtype).min / 2)[:, None, None, :]
            mask = pad if mask is None else mask + pad
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    if path == "explicit":
        return explicit_attention(q, k, v, bias, padding, scale, dropout_p)
    if path == "triton":
        from tupe_core.kernels.triton_attention import biased_attention

        return biased_attention(q, k, v, bias, padding, scale, dropout_p)
    if path == "flex":
        from tupe_core.kernels.flex_attention import flex_biased_attention

        return flex_biased_attention(q, k, v, bias, padding, scale, dropout_p)
    raise ValueError(f"bench_attention has no runner for the attention path {path!r} (tupe_core.attend.PATHS)")


def forward_backward(path: str, q, k, v, bias, padding, grad_out, scale: float, dropout_p: float) -> None:
    attend(path, q, k, v, bias, padding, scale, dropout_p).backward(grad_out)


def training_padding(B: int, T: int, device) -> torch.Tensor:
    """(B, T) bool, True at padding: a quarter of the sequences (at least one) padded from 3/4 of T."""
    padding = torch.zeros(B, T, dtype=torch.bool, device=device)
    padding[:max(1, B // 4), 3 * T // 4:] = True
    return padding


def unavailable(path: str, device: torch.device, dropout_p: float) -> Optional[str]:
    """Why ``path`` cannot run here, or None."""
    if path == "triton":
        from tupe_core.kernels.triton_attention import triton_available

        if not triton_available(device):
            return "triton unavailable (CUDA, or TRITON_INTERPRET=1 before triton is imported)"
    if path == "flex" and dropout_p:
        return "no dropout in FlexAttention"
    if path == "flex" and device.type != "cuda":
        return "no FlexAttention backward on CPU"
    return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(step: Callable[[], None], device: torch.device, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def inputs(B: int, H: int, T: int, D: int, device, dtype, bias_kind: str, seed: int = 0):
    """q, k, v (B, H, T, D) with gradients, the bias of ``bias_kind`` (``BIASES``; None for ``none``) and a
    gradient for the output."""
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, device=device, dtype=dtype).requires_grad_() for _ in range(3))
    bias = None
    if bias_kind != "none":
        shape = {"per_sequence": (B, H, T, T), "permuted": (T, T, H), "offset": (H, T + 1, T + 1)}.get(bias_kind, (H, T, T))
        leaf = torch.randn(shape, generator=g, device=device, dtype=dtype).requires_grad_(bias_kind != "fixed")
        bias = {"permuted": lambda w: w.permute(2, 0, 1), "offset": lambda w: w[:, 1:, 1:]}.get(bias_kind, lambda w: w)(leaf)
    grad_out = torch.randn(B, H, T, D, generator=g, device=device, dtype=dtype)
    return q, k, v, bias, grad_out


def attention_rows(device, dtype: torch.dtype, lengths: Sequence[int], heads: int = 12, head_dim: int = 64,
                   tokens: int = 16384, paths: Sequence[str] = PATHS, biases: Sequence[str] = BIASES,
                   dropouts: Sequence[float] = (0.0, 0.1), warmup: int = 3, iters: int = 10,
                   paddings: Sequence[bool] = PADDINGS) -> List[Dict]:
    """One row per (T, dropout, padding, bias, path): ms of forward + backward, and the ratio to SDPA without bias
    and without padding (timed first, also where ``paddings`` holds only True)."""
    device = torch.device(device)
    scale = head_dim ** -0.5
    rows = []
    for T in lengths:
        B = max(1, tokens // T)
        for dropout_p in dropouts:
            baseline = None
            cells = [(False, "none", "sdpa")] if "sdpa" in paths else []  # the baseline first
            cells += [(padded, bias_kind, path) for padded in paddings for bias_kind in biases for path in paths
                      if (padded, bias_kind, path) != (False, "none", "sdpa")]
            for padded, bias_kind, path in cells:
                row = dict(path=path, bias=bias_kind, dropout=dropout_p, padding=padded, T=T, B=B, H=heads,
                           D=head_dim, dtype=str(dtype).replace("torch.", ""), ms=None, ratio=None, note="")
                rows.append(row)
                why = unavailable(path, device, dropout_p)
                if why:
                    row["note"] = why
                    continue
                q, k, v, bias, grad_out = inputs(B, heads, T, head_dim, device, dtype, bias_kind)
                padding = training_padding(B, T, device) if padded else None
                step = functools.partial(forward_backward, path, q, k, v, bias, padding, grad_out, scale, dropout_p)
                try:
                    row["ms"] = median_ms(step, device, warmup, iters)
                except Exception as e:  # noqa: BLE001  (a path that fails is a row of the table, not the end)
                    row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    continue
                if (padded, bias_kind, path) == (False, "none", "sdpa"):
                    baseline = row["ms"]
                if baseline:
                    row["ratio"] = row["ms"] / baseline
    return rows


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def error_rows(device, dtype: torch.dtype, lengths: Sequence[int], heads: int = 12, head_dim: int = 64,
               batch: int = 2) -> List[Dict]:
    """Per T, the triton and explicit paths in ``dtype`` against the explicit path in float64: max relative
    error of out, dq, dk, dv, dbias (learned bias, the first sequence padded from 3/4 of T, no dropout)."""
    device = torch.device(device)
    scale = head_dim ** -0.5
    rows = []
    for T in lengths:
        q, k, v, bias, grad_out = inputs(batch, heads, T, head_dim, device, dtype, "learned", seed=1)
        padding = torch.zeros(batch, T, dtype=torch.bool, device=device)
        padding[0, 3 * T // 4:] = True
        leaves = (q, k, v, bias)
        ref_leaves = [x.detach().double().requires_grad_() for x in leaves]
        ref_out = explicit_attention(*ref_leaves, padding, scale, 0.0)
        ref_out.backward(grad_out.double())
        for path in ("triton", "explicit"):
            row = dict(path=path, T=T, B=batch, H=heads, D=head_dim, dtype=str(dtype).replace("torch.", ""), note="")
            rows.append(row)
            why = unavailable(path, device, 0.0)
            if why:
                row["note"] = why
                continue
            for x in leaves:
                x.grad = None
            out = attend(path, q, k, v, bias, padding, scale, 0.0)
            out.backward(grad_out)
            row["out"] = relative_error(out, ref_out.detach())
            for name, x, r in zip(("dq", "dk", "dv", "dbias"), leaves, ref_leaves):
                row[name] = relative_error(x.grad, r.grad)
    return rows


def print_table(rows: List[Dict], columns: Sequence[str]) -> None:
    def cell(value):
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1e-2 and value else f"{value:.3f}"
        return "" if value is None else str(value)

    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(cell(row.get(c)) for c in columns) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--tokens", type=int, default=16384, help="sequences per step = tokens // T")
    p.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    p.add_argument("--biases", nargs="+", default=list(BIASES), choices=BIASES)
    p.add_argument("--padding", nargs="+", type=int, default=[0, 1], choices=(0, 1),
                   help="without (0) and/or with (1) a quarter of the sequences padded (default: both)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--dry-run", action="store_true", help="CPU, fp32, tiny sizes (Triton's interpreter)")
    args = p.parse_args()
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
        device, dtype, heads, head_dim = torch.device("cpu"), torch.float32, 1, 16
        args.lengths, args.tokens, args.iters, args.warmup = [20], 20, 1, 0
    elif not torch.cuda.is_available():
        raise SystemExit("bench_attention.py needs CUDA (or --dry-run)")
    else:
        device, dtype, heads, head_dim = torch.device("cuda"), torch.bfloat16, 12, 64
    print(f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"{dtype}, H={heads}, D={head_dim}, {args.tokens} tokens per step\n")
    rows = attention_rows(device, dtype, args.lengths, heads, head_dim, args.tokens, args.paths, args.biases,
                          warmup=args.warmup, iters=args.iters, paddings=[bool(p) for p in args.padding])
    print_table(rows, ("T", "B", "dropout", "padding", "bias", "path", "ms", "ratio", "note"))
    print()
    print_table(error_rows(device, dtype, args.lengths, heads, head_dim),
                ("T", "path", "dtype", "out", "dq", "dk", "dv", "dbias", "note"))


if __name__ == "__main__":
    main()
