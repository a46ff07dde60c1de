"""The attention section: one attention layer's core, forward + backward, on every path (``sdpa``, ``explicit``,
``triton``, ``flex``) x bias (none, fixed, learned in each layout the variants pass, per_sequence) x attention
dropout (0, 0.1; flex has none) x padding (none, training's), with the ratio to SDPA without a bias and the SDPA
kernel taken; first the Triton path's errors (output, dq, dk, dv, dbias) against the explicit path in float64
(``bench/bench_attention.py`` makes the inputs, times and measures)."""
from __future__ import annotations

import time
from typing import Dict, List, Optional

import torch

from .probes import sdpa_backends
from .report import Result
from .settings import Settings

# Largest error of the Triton path against float64: twice the explicit path's in the same dtype plus this floor.
ATTENTION_ERROR_FLOOR = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 3e-3}
ERROR_COLUMNS = ("out", "dq", "dk", "dv", "dbias")


def sdpa_backend(device, dtype, length: int, batch_size: int, heads: int, head_dim: int, bias_kind: str,
                 dropout_p: float, padded: bool) -> str:
    """The SDPA kernel one forward + backward of bench_attention's inputs dispatches to."""
    from bench_attention import attend, inputs, training_padding

    device = torch.device(device)
    q, k, v, bias, grad_out = inputs(batch_size, heads, length, head_dim, device, dtype, bias_kind)
    padding = training_padding(batch_size, length, device) if padded else None
    return sdpa_backends(lambda: attend("sdpa", q, k, v, bias, padding, head_dim ** -0.5, dropout_p).backward(grad_out))


def attention_failure(row: Dict, device: str) -> Optional[str]:
    """Why a row of ``attention_rows`` fails the section: a path that raised or could not run (FlexAttention off
    CUDA excepted: it has no backward for q, k, v on CPU)."""
    if row["ms"] is not None or (row["path"] == "flex" and device != "cuda"):
        return None
    return (f"{row['path']} bias={row['bias']} dropout={row['dropout']:g} T={row['T']}"
            f"{' padded' if row['padding'] else ''}: {row['note'] or 'no time'}")


def attention_errors(r: Result, s: Settings) -> List[str]:
    """The Triton path's errors against the float64 explicit path, beside the explicit path's own in the same
    dtype (bench_attention.error_rows), as a table; returns the failures."""
    from bench_attention import error_rows

    dtype, failures = s.attention_dtype, []
    r.say("Errors against the explicit path in float64 (learned bias, 2 sequences, the first padded from 3/4 of T, no "
          "dropout): max |x - ref| / max |ref| of the output and of the gradients of q, k, v and the bias; the "
          f"Triton path passes at most 2 x the explicit path's in the same dtype + {ATTENTION_ERROR_FLOOR[dtype]:g}.\n")
    r.say("| T | path | " + " | ".join(ERROR_COLUMNS) + " | result |\n|---:|---|" + "---:|" * len(ERROR_COLUMNS) + "---|")
    for length in s.attention_lengths:
        try:
            rows = {row["path"]: row for row in error_rows(torch.device(s.device), dtype, [length], s.attention_heads,
                                                           s.attention_head_dim)}
        except Exception as e:  # a kernel that does not compile or run: the timings below still run
            r.say(f"| {length} | | " + " | " * len(ERROR_COLUMNS) + f"failed: {type(e).__name__}: {str(e)[:300]} |")
            failures.append(f"errors T={length}: {type(e).__name__}")
            continue
        explicit, triton = rows["explicit"], rows["triton"]
        for row in (triton, explicit):
            if row["note"]:
                r.say(f"| {length} | {row['path']} | " + " | " * len(ERROR_COLUMNS) + f"{row['note']} |")
                failures.append(f"errors T={length} {row['path']}: {row['note']}")
                continue
            result = ""
            if row is triton and not explicit["note"]:
                bad = [c for c in ERROR_COLUMNS if not row[c] <= 2 * explicit[c] + ATTENTION_ERROR_FLOOR[dtype]]
                result = f"FAILED: {', '.join(bad)}" if bad else "ok"
                failures += [f"triton errors T={length}: {', '.join(bad)}"] if bad else []
                r.record("triton", f"T={length} errors", ok=not bad)
            r.say(f"| {length} | {row['path']} | " + " | ".join(f"{row[c]:.1e}" for c in ERROR_COLUMNS) + f" | {result} |")
            r.record(row["path"], f"T={length} errors", **{f"{c}_rel_error": row[c] for c in ERROR_COLUMNS})
    return failures


def run(r: Result, s: Settings, args) -> None:
    from bench_attention import BIASES, attention_rows

    from tupe_core.kernels.triton_attention import triton_available, tuned_choices

    dtype, device = s.attention_dtype, torch.device(s.device)
    r.say(f"Triton runs here: {triton_available(device)}.\n")
    failures = attention_errors(r, s)  # first: cheap, and what must hold before any timing matters
    padded = {(False,): "no padding", (True,): "training's padding (a quarter of the sequences right-padded from "
              "3/4 of T)", (False, True): "without padding and with training's (a quarter of the sequences "
              "right-padded from 3/4 of T)"}[tuple(s.attention_paddings)]
    r.say(f"\nOne attention layer's core (q, k, v and the bias given; no projections), forward + backward, "
          f"{str(dtype).replace('torch.', '')}, H={s.attention_heads}, D={s.attention_head_dim}, {s.attention_tokens} "
          f"tokens (B = {s.attention_tokens} // T), {padded}, median of {s.attention_iters} calls after "
          f"{s.attention_warmup} (CUDA events on a GPU; bench/bench_attention.py). Bias: none, fixed (an (H, T, T) "
          "bias without gradient: ALiBi, Gaussian prior), learned (with gradient: TUPE, T5, ...) in each layout a "
          "variant passes: contiguous (learned), permuted (T5's and BERT-R's bucket gather), offset (TUPE-A's [CLS] "
          "reset); per_sequence (a learned (B, H, T, T) bias: DeBERTa's c2p + p2c terms, without the gathers that "
          "make them). A bias the Triton kernel cannot read in place is copied on every call here (once per forward "
          "in a model). ratio = ms / ms of SDPA without bias and without padding at the same T and dropout; SDPA "
          "backend: the kernel each sdpa row took (without a bias in bf16 on an H100: cuDNN's). FlexAttention has "
          "no dropout: dropout 0 only.\n")
    r.say("| T | B | dropout | padded | bias | path | ms | ratio | SDPA backend | note |\n"
          "|---:|---:|---:|---|---|---|---:|---:|---|---|")
    for length in s.attention_lengths:
        for dropout_p in (0.0, 0.1):
            if time.time() > args.deadline:
                failures.append(f"time budget reached before T={length} dropout={dropout_p:g}")
                continue
            paths = [p for p in s.attention_paths if not (p == "flex" and dropout_p)]
            rows = attention_rows(device, dtype, [length], s.attention_heads, s.attention_head_dim, s.attention_tokens,
                                  paths, BIASES, (dropout_p,), s.attention_warmup, s.attention_iters,
                                  s.attention_paddings)
            for row in rows:
                backend = None
                if row["path"] == "sdpa" and row["ms"] is not None:
                    backend = sdpa_backend(device, dtype, length, row["B"], s.attention_heads, s.attention_head_dim,
                                           row["bias"], dropout_p, row["padding"])
                ms = "" if row["ms"] is None else f"{row['ms']:.3f}"
                ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
                r.say(f"| {length} | {row['B']} | {dropout_p:g} | {'yes' if row['padding'] else 'no'} | {row['bias']} | "
                      f"{row['path']} | {ms} | {ratio} | {backend or ''} | {row['note']} |")
                setting = f"T={length} dropout={dropout_p:g} bias={row['bias']}" + (" padded" if row["padding"] else "")
                r.record(row["path"], setting, ms=row["ms"], ratio_to_sdpa_no_bias=row["ratio"], sdpa_backend=backend,
                         note=row["note"] or None)
                why = attention_failure(row, s.device)
                failures += [why] if why else []
            r.save()
    tuned = tuned_choices()
    r.say("\nThe Triton kernels' tiles, chosen by timing each kernel's autotune list at its first call in this "
          "process (query rows x keys, warps): " + ("none tuned (only on CUDA in half precision)" if not tuned else ""))
    for (_, dtype_name, length, head_dim, dropout, kind, padding), blocks in tuned.items():
        setting = f"T={length} D={head_dim} {dtype_name} dropout={dropout} bias={kind} padding={padding}"
        tiles = (f"forward {blocks.forward_m}x{blocks.forward_n} w{blocks.forward_warps}, dq {blocks.dq_m}x{blocks.dq_n} "
                 f"w{blocks.dq_warps}, dkdv {blocks.dkdv_m}x{blocks.dkdv_n} w{blocks.dkdv_warps}")
        r.say(f"- {setting}: {tiles}")
        r.record("triton", setting, tiles=tiles)
    if failures:
        r.fail("; ".join(failures))
