"""The verdict section (``--quick`` too): the two configurations the Triton kernel exists for, one attention layer's
core forward + backward on it, measured against the target (``kernel_sass.TARGET_LAYER_MS``: SDPA's layer with a
bias that needs no gradient) and against ``bench/kernel_sass.py``'s realistic estimate for that configuration, so
that the estimate's factor can be recalibrated from the card; with what the verdict rests on: the kernel the SDPA
baseline really ran (the profiler's ATen op, and which of SDPA's fused kernels run it when asked alone), the
Triton version, the tiles the kernels chose and the kernel's first-use self-check. The other configurations are
the attention section's table (the full check's at two lengths)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from .attention import sdpa_backend
from .report import Result
from .settings import Settings

# name -> (bench_attention's bias kind, kernel_sass's bias kind); both with training's padding and dropout 0.1
CONFIGURATIONS = {"TUPE-R": ("learned", "shared"), "DeBERTa": ("per_sequence", "per_sequence")}
DROPOUT = 0.1
# SDPA's fused kernels tried alone on the baseline (no bias, no padding, dropout 0.1): which of them can run it
FUSED_BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")


@dataclass
class Estimate:
    """kernel_sass's layer row for a configuration (ms at an H100's figures)."""

    floor_ms: float
    realistic_ms: float

    @property
    def factor(self) -> float:  # realistic = floor x factor (kernel_sass.realistic_factor)
        return self.realistic_ms / self.floor_ms


@dataclass
class Findings:
    """What the section measured and read; ``lines`` makes the report of it."""

    device: str
    dtype: str
    shape: str  # "B32 H12 T512 D64"
    triton: str  # triton.__version__, or why none
    self_check: Optional[str]  # None: passed; else why it failed
    baseline_ms: Optional[float]  # SDPA, no bias, no padding, dropout 0.1
    baseline_backend: str  # the ATen op the profiler saw
    backends_alone: Dict[str, str]  # FUSED_BACKENDS -> "runs" or why not
    layer_ms: Dict[str, Optional[float]]  # configuration -> the Triton path's ms
    sdpa_ms: Dict[str, Optional[float]]  # configuration -> the SDPA path's ms (its memory-efficient kernel)
    tiles: Dict[str, str]  # configuration -> the tiles the kernels ran with
    estimates: Dict[str, Estimate] = field(default_factory=dict)  # configuration -> kernel_sass's layer row
    estimate_error: str = ""  # why there is no estimate
    estimate_shape: str = ""


def ms(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def against(value: Optional[float], reference: Optional[float]) -> str:
    """'0.955 ms: misses by 0.215 ms (+29%)' style: value against a reference it should not exceed."""
    if value is None or reference is None:
        return "n/a"
    word = "meets" if value <= reference else "misses"
    return f"{word} ({value - reference:+.3f} ms, {value / reference - 1:+.0%})"


def lines(f: Findings) -> Tuple[List[str], List[Tuple[str, str, Dict]], List[str]]:
    """The section's report lines, its CSV records (subject, setting, metrics) and its failures."""
    from kernel_sass import SDPA_LAYER_MS, TARGET_LAYER_MS

    out, records, failures = [], [], []
    out.append(f"One attention layer's core, forward + backward, {f.dtype}, {f.shape}, training's padding (a quarter "
               f"of the sequences right-padded from 3/4 of T), dropout {DROPOUT:g}, on our Triton kernel (`triton`), "
               f"against the target {TARGET_LAYER_MS} ms (SDPA's layer with a bias that needs no gradient, H100) and "
               f"against bench/kernel_sass.py's realistic estimate (floor x factor) at {f.estimate_shape or 'n/a'}"
               + (f" ({f.estimate_error})" if f.estimate_error else "") + ".\n")
    out.append("| configuration | Triton ms | vs target | realistic estimate ms | vs estimate | floor ms | measured / floor "
               "| SDPA ms (same bias) | tiles |\n|---|---:|---|---:|---|---:|---:|---:|---|")
    for name, (bias, _) in CONFIGURATIONS.items():
        measured, estimate = f.layer_ms.get(name), f.estimates.get(name)
        realistic = estimate.realistic_ms if estimate else None
        ratio = measured / estimate.floor_ms if measured is not None and estimate else None
        out.append(f"| {name} ({bias} bias) | {ms(measured)} | {against(measured, TARGET_LAYER_MS)} | {ms(realistic)} | "
                   f"{against(measured, realistic)} | {ms(estimate.floor_ms if estimate else None)} | "
                   f"{'n/a' if ratio is None else f'{ratio:.2f}'} | {ms(f.sdpa_ms.get(name))} | "
                   f"{f.tiles.get(name, 'n/a')} |")
        records.append((name, f"bias={bias} padded dropout={DROPOUT:g}", dict(
            triton_ms=measured, target_ms=TARGET_LAYER_MS, meets_target=None if measured is None else measured <= TARGET_LAYER_MS,
            realistic_ms=realistic, floor_ms=estimate.floor_ms if estimate else None, measured_over_floor=ratio,
            sdpa_ms=f.sdpa_ms.get(name), tiles=f.tiles.get(name))))
        if measured is None:
            failures.append(f"{name}: the Triton path gave no time")
    factor = next(iter(f.estimates.values())).factor if f.estimates else None
    if factor and f.baseline_ms is not None:
        calibration_floor = SDPA_LAYER_MS / factor  # kernel_sass's own no-bias floor (CALIBRATION)
        recalibrated = f.baseline_ms / calibration_floor
        out.append(f"\nRecalibration: the estimate's factor is {factor:.2f} = SDPA's {SDPA_LAYER_MS} ms (kernel_sass's "
                   f"SDPA_LAYER_MS) / our no-bias floor {calibration_floor:.3f} ms; SDPA's baseline here took "
                   f"{f.baseline_ms:.3f} ms, so this card's factor is {recalibrated:.2f} (set SDPA_LAYER_MS to "
                   f"{f.baseline_ms:.3f} where this is an H100 at the base shape); measured / floor above is the "
                   "factor our own kernels reach.")
        records.append(("recalibration", "", dict(factor=factor, calibration_floor_ms=calibration_floor,
                                                  sdpa_baseline_ms=f.baseline_ms, recalibrated_factor=recalibrated)))
    alone = ", ".join(f"{name}: {said}" for name, said in f.backends_alone.items()) or "not tried"
    out.append(f"\nSDPA baseline (no bias, no padding, dropout {DROPOUT:g}): {ms(f.baseline_ms)} ms on **"
               f"{f.baseline_backend}** (the ATen op the profiler saw); each fused kernel alone: {alone}.")
    out.append(f"\nTriton {f.triton}; the kernel's first-use check of both configurations (dropout on, this shape) "
               f"on {f.device} in {f.dtype}: " + ("**passed**." if f.self_check is None else f"**failed**: {f.self_check}"))
    records.append(("baseline", f"bias=none dropout={DROPOUT:g}", dict(
        sdpa_ms=f.baseline_ms, sdpa_backend=f.baseline_backend,
        **{f"alone_{name.lower()}": said for name, said in f.backends_alone.items()})))
    records.append(("triton", "", dict(version=f.triton, self_check="passed" if f.self_check is None else f.self_check)))
    if f.self_check is not None:
        failures.append(f"the Triton self-check failed: {f.self_check}")
    if f.estimate_error:
        failures.append(f"no realistic estimate: {f.estimate_error}")
    return out, records, failures


def self_check_result(device: torch.device, dtype: torch.dtype, batch: int, heads: int, length: int,
                      head_dim: int) -> Optional[str]:
    """The kernel's first-use check as ``auto`` runs it before training takes the kernel, for each configuration
    (its bias kind, dropout on, training's shape: the tiles tuned for it): None when every one passed, else why,
    per configuration."""
    from tupe_core.attend import triton_failure

    q = torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype)
    failures = []
    for name, (bias, _) in CONFIGURATIONS.items():
        per_sequence = bias == "per_sequence"
        like = torch.randn(*(batch,) * per_sequence, heads, length, length, device=device, dtype=dtype)
        failure = triton_failure(device, dtype, per_sequence=per_sequence, dropout=True, like=(q, like))
        if failure is not None:
            failures.append(f"{name}: {failure}")
    return "; ".join(failures) or None


def backends_alone(device, dtype, s: Settings, batch: int) -> Dict[str, str]:
    """FUSED_BACKENDS -> "runs", or why not, for the baseline's forward + backward with that kernel alone."""
    from bench_attention import attend, inputs
    from torch.nn.attention import SDPBackend, sdpa_kernel

    found = {}
    q, k, v, bias, grad_out = inputs(batch, s.attention_heads, s.attention_lengths[0], s.attention_head_dim, device,
                                     dtype, "none")
    for name in FUSED_BACKENDS:
        try:
            with sdpa_kernel([getattr(SDPBackend, name)]):
                attend("sdpa", q, k, v, bias, None, s.attention_head_dim ** -0.5, DROPOUT).backward(grad_out)
            found[name] = "runs"
        except RuntimeError as e:  # "No available kernel": SDPA says why in warnings, the error is one line
            found[name] = f"no ({str(e).splitlines()[0][:80]})"
    return found


def tiles_used(device, dtype, length: int, head_dim: int, bias: str) -> str:
    """The tiles the kernels ran this configuration with: tuned on CUDA in half precision, else ``blocks_for``'s."""
    from tupe_core.kernels.triton_attention import blocks_for, tuned_choices

    kind = "shared_grad" if bias == "learned" else "per_sequence_grad"
    key = (str(device), str(dtype).replace("torch.", ""), length, head_dim, True, kind, True)
    blocks = tuned_choices().get(key)
    how = "tuned" if blocks else "untuned"
    blocks = blocks or blocks_for(dtype)
    return (f"{how}: forward {blocks.forward_m}x{blocks.forward_n} w{blocks.forward_warps}, dq {blocks.dq_m}x"
            f"{blocks.dq_n} w{blocks.dq_warps}, dkdv {blocks.dkdv_m}x{blocks.dkdv_n} w{blocks.dkdv_warps}")


def run(r: Result, s: Settings, args) -> None:
    import kernel_sass
    from bench_attention import attention_rows

    device, dtype, length = torch.device(s.device), s.attention_dtype, s.attention_lengths[0]
    # the estimate compiles for sm_90 in its own process (never in Triton's interpreter), while the GPU measures
    shape = kernel_sass.BASE
    estimate = kernel_sass.start_csv(["--shape", *(str(shape[k]) for k in "BHTD"), "--bias", "shared", "per_sequence",
                                      "--padding", "1", "--dropout", str(DROPOUT), "--toolchain", "this"])
    try:
        import triton

        version = triton.__version__
    except ImportError:
        version = "not installed"
    batch = max(1, s.attention_tokens // length)
    check = self_check_result(device, dtype, batch, s.attention_heads, length, s.attention_head_dim)
    rows = attention_rows(device, dtype, [length], s.attention_heads, s.attention_head_dim, s.attention_tokens,
                          ("sdpa", "triton"), [bias for bias, _ in CONFIGURATIONS.values()], (DROPOUT,),
                          s.attention_warmup, s.attention_iters, (True,))
    by = {(row["path"], row["bias"], row["padding"]): row["ms"] for row in rows}
    findings = Findings(
        device=str(device), dtype=str(dtype).replace("torch.", ""),
        shape=f"B{batch} H{s.attention_heads} T{length} D{s.attention_head_dim}", triton=version, self_check=check,
        baseline_ms=by.get(("sdpa", "none", False)),
        baseline_backend=sdpa_backend(device, dtype, length, batch, s.attention_heads, s.attention_head_dim, "none",
                                      DROPOUT, False),
        backends_alone=backends_alone(device, dtype, s, batch) if device.type == "cuda" else {},
        layer_ms={name: by.get(("triton", bias, True)) for name, (bias, _) in CONFIGURATIONS.items()},
        sdpa_ms={name: by.get(("sdpa", bias, True)) for name, (bias, _) in CONFIGURATIONS.items()},
        tiles={name: tiles_used(device, dtype, length, s.attention_head_dim, bias)
               for name, (bias, _) in CONFIGURATIONS.items()},
        estimate_shape=f"B{shape['B']} H{shape['H']} T{shape['T']} D{shape['D']}")
    try:
        layers = {row.bias: row for row in kernel_sass.csv_rows(estimate, timeout=min(900, max(30, args.deadline - time.time())))
                  if row.kernel == "layer"}
        findings.estimates = {name: Estimate(layers[kind].floor_ms, layers[kind].realistic_ms)
                              for name, (_, kind) in CONFIGURATIONS.items()}
    except Exception as e:  # a compile that failed or ran out of time: the measurements still stand
        estimate.kill()
        findings.estimate_error = f"{type(e).__name__}: {str(e)[:300]}"
    said, records, failures = lines(findings)
    for line in said:
        r.say(line)
    for subject, setting, metrics in records:
        r.record(subject, setting, **metrics)
    if failures:
        r.fail("; ".join(failures))
