"""``make gpu-check``: everything that needs CUDA, checked and measured in one command, with one markdown report
and one CSV written into ``--out`` even when a step fails (the failure is in the report).

Sections, each in its own process with a time limit (a crash or a hang of one is reported, the others run):

- ``environment``: the wheels of ``--wheels`` installed offline into ``--site`` (``bench/gpu_wheels.py``; the
  machine's torch is never touched), then versions (Python, torch, CUDA, cuDNN, fairseq) and the card.
- ``cuda_tests``: the tests of ``tests/`` that need CUDA (``-k cuda`` in the files that ask for it); on a GPU
  none may be skipped.
- ``sdpa``: every registered variant in fp32, bf16 and fp16, with right padding and an unaligned length: the
  SDPA path's output and gradients against the explicit path's, both measured against a float64 reference;
  which SDPA backend each call took (flash, memory-efficient, cuDNN, math), with and without padding; and the
  GPU pitfalls: every mask handed to SDPA in q's dtype with aligned strides (also under autocast), and a
  sequence without real tokens giving finite outputs and gradients on both paths.
- ``attention``: one attention layer's core, forward + backward, on every path (``sdpa``, ``explicit``,
  ``triton``, ``flex``) x bias (none, fixed, learned in each layout the variants pass, per_sequence) x attention
  dropout (0, 0.1; flex has none) x padding (none, training's) at T=512 and 1024, bf16, with the ratio to SDPA without a bias (cuDNN's kernel) and the SDPA kernel taken; then the Triton
  path's errors (output, dq, dk, dv, dbias) against the explicit path in float64 (``bench/bench_attention.py``).
- ``train``: a short real pre-training of ``tupe_r_base`` (``--user-dir tupe_plugin``) on generated data, in
  fp16 through ``fairseq-train --fp16`` and in bf16 through ``fairseq-hydra-train`` (``common.bf16=true``:
  fairseq 0.12's command line turns ``--bf16`` into ``--tpu``): the loss falls, overflow skips are counted.
- ``throughput``: ``train_scripts/pretrain.sh`` itself on one GPU (its command line, the recipe's per-GPU batch
  of 16 x 512 tokens and update-freq 16) for fairseq's ``roberta_base``, ``bert_a_base`` and ``tupe_r_base``,
  12 updates in bf16 on generated data: fairseq's own ``wps`` from its log, and MFU = matrix FLOPs per token x
  wps / peak. bf16: pretrain.sh's ``BF16=1``, fairseq-train's own parser without the ``--tpu`` that fairseq
  0.12 adds for ``--bf16`` (``train_scripts/fairseq_train.py``).
- ``sync``: the device-to-host synchronisations of one MLM step (RoBERTa, BERT-A, TUPE-R) and one ELECTRA step
  (BERT-A, TUPE-R), counted by ``bench/sync_count.py`` (CUDA's sync debug mode), with their sites.
- ``timing``: one train step of a variant against fairseq's ``roberta`` of the same size (base, bf16 weights,
  16,384 tokens per step), in ``bench/bench_train_step.py``'s alternation: every variant at T=512, a variant
  of each kind at T=1024 (``SOME_VARIANTS``), a few at T=128 (``T128_VARIANTS``), ELECTRA's step of BERT-A
  and TUPE-R at T=512; the ratio to RoBERTa and to ``bert_a`` on the same ``--tupe-attention``, ELECTRA / MLM,
  the per-pair ratios, tokens/s, model FLOPs utilisation (matrix FLOPs per second over the card's peak dense
  bf16 rate) and peak memory. It stops at the time budget and reports the rows it did not reach.

Budget (``--budget-s 540``, inside a 10-minute command limit; the machine's start is outside the command):
seconds on an H100, measured on 2026-11-26 where the section existed, else estimated from those measurements:

    environment    7  measured
    cuda_tests    55  16 measured with tests/test_precision.py alone; + the Triton kernels' and FlexAttention's
                      CUDA tests (kernel compilation: about 10 s for Triton, 15-30 s for FlexAttention's two)
    sdpa          41  measured
    attention     90  42 timed rows of 13 calls (< 10 ms each: 3 s) + 12 profiled SDPA calls; the rest is
                      compilation: Triton's kernels for 3 biases x 2 dropouts (~20 s; its disk cache is warm
                      from cuda_tests), torch.compile of FlexAttention for 3 biases x 2 lengths (~60 s)
    train         47  measured
    throughput    70  3 runs of ~18 s (pretrain.sh's checks 2 s, fairseq's start 6 s, 12 updates of 16 x 16 x
                      512 tokens at ~330k tokens/s: 6-8 s) + 3 base models built for the FLOP count (9 s)
    sync          20  5 base models built, 2 steps each
    timing       125  28 MLM rows at ~3.6 s (2 + 8 steps of each model at ~50 ms, the build, the peak-memory and the
                      FLOP-count steps; the last run's 34 rows of 3 + 10 steps took 132 s) + 2 ELECTRA rows at
                      ~7 s + RoBERTa's build and counts per group (4 x 3 s). Trimmed from every variant at T=128
                      and 512 with 13 steps: all 17 only at T=512, the rest a few per length
    total        455  (85 s left for the slower compilations, a slower card, process starts)

``--quick`` (``make gpu-check QUICK=1``): environment, attention (T=512 with training's padding, no
FlexAttention: about 40 s), throughput (RoBERTa and TUPE-R: about 45 s) and timing (bert_a, tupe_r, t5_rel, rope,
deberta_rel at T=512, tupe_r at 1024: about 35 s) within ``QUICK_BUDGET_S`` (240 s), so that one short GPU loan
also holds the GPU study; estimated from the measurements above, not yet run on a GPU.

Each section gets at most ``SECTION_LIMIT_S`` and what is left of the budget; timing comes last and takes
what is left. On a machine without CUDA it says so in one line and exits 1. ``--dry-run`` runs the same
sections on CPU at tiny size (one thread per process; the Triton kernels in Triton's interpreter; fairseq's fp16
and bf16 optimizers need CUDA, so the dry training runs are fp32; the sync count is of the ops that would sync);
tests/test_gpu_check.py runs it. Exit status: 0 when every section passed, 1 otherwise, 2 for usage errors.

    python bench/gpu_check.py --out $OUT                 # on the GPU machine (make gpu-check OUT=...)
    python bench/gpu_check.py --out /tmp/dry --dry-run   # the CPU rehearsal
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import csv
import functools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from bench_attention import PATHS

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("environment", "cuda_tests", "sdpa", "attention", "train", "throughput", "sync", "timing")
# Seconds each section may take at most on the GPU; the whole check stays under --budget-s (540: the module
# docstring's budget), timing taking what is left.
SECTION_LIMIT_S = {"environment": 60, "cuda_tests": 120, "sdpa": 120, "attention": 150, "train": 120,
                   "throughput": 150, "sync": 60, "timing": 420}
# The dry run's: a shared CPU is slow, and there the point is that every section runs, not its time.
DRY_RUN_LIMIT_S, DRY_RUN_BUDGET_S = 900, 3600
# Peak dense bf16 tensor-core rate (TFLOP/s, no sparsity) by the name torch reports; NVIDIA's data sheets.
PEAK_BF16_TFLOPS = (
    ("H200", 989.4), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.4),  # H100 SXM5 / "H100 80GB HBM3"
    ("A100", 312.0),
)
# ``F.scaled_dot_product_attention`` dispatches to one of these ATen ops; the profiler names the one taken.
SDPA_BACKENDS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash (CPU)"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_scaled_dot_product_efficient_attention", "memory-efficient"),
    ("_scaled_dot_product_cudnn_attention", "cuDNN"),
    ("_scaled_dot_product_attention_math", "math"),
    ("_scaled_dot_product_fused_attention_overrideable", "fused (other)"),
)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Largest relative error of the SDPA path: twice the explicit path's (both against float64) plus this floor.
ERROR_FLOOR = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 3e-3}


@dataclass(frozen=True)
class TimingGroup:
    """Rows of the timing section: every variant of ``variants`` (None: the whole registry) at length T with one
    objective, each against RoBERTa's MLM step; ``bert_a`` always comes first (the other reference)."""

    length: int
    objective: str  # "mlm" or "electra" (generator + discriminator, --task electra --criterion electra)
    variants: Optional[Tuple[str, ...]] = None


# A variant of each kind (no bias, learned bias, fixed bias, rotation, own block, PAM): the rows at T=1024.
SOME_VARIANTS = ("bert_a", "tupe_r", "t5_rel", "alibi", "rope", "deberta_rel", "pam_window")
T128_VARIANTS = ("bert_a", "tupe_r", "rope", "deberta_rel")  # at T=128 the differences are small (2026-11-26)
ELECTRA_VARIANTS = ("bert_a", "tupe_r")
# --quick (make gpu-check QUICK=1): what a short GPU loan must measure first, within QUICK_BUDGET_S, so that the
# loan keeps time for the GPU study: the Triton kernel's errors and the attention table at T=512 with training's
# padding (no FlexAttention, whose compilation takes a minute), pretrain.sh's wps of RoBERTa and TUPE-R, and the
# step ratios to RoBERTa of these variants at T=512 and of TUPE-R at 1024.
QUICK_SECTIONS = ("environment", "attention", "throughput", "timing")
QUICK_VARIANTS = ("bert_a", "tupe_r", "t5_rel", "rope", "deberta_rel")
QUICK_ATTENTION_PATHS = ("sdpa", "explicit", "triton")
QUICK_BUDGET_S = 240
# The steps whose syncs are counted: (arch family, objective); RoBERTa is fairseq's own.
SYNC_STEPS = (("roberta", "mlm"), ("bert_a", "mlm"), ("tupe_r", "mlm"), ("bert_a", "electra"), ("tupe_r", "electra"))


@dataclass
class Settings:
    """What the sections run on: the GPU values, or the dry run's tiny ones (``settings``)."""

    device: str
    sdpa_size: str
    sdpa_length: int  # not a multiple of 8: the masks need the alignment
    sdpa_layers: int  # the size's width and heads (what picks the kernels), fewer layers
    train_arch: str
    train_runs: Tuple[Tuple[str, str], ...]  # (precision, launcher: "cli" fairseq-train or "hydra" fairseq-hydra-train)
    train_batch: int
    train_length: int
    train_updates: int
    train_lr: str
    train_warmup: int
    step_vocab: int  # bench_train_step.VOCAB: the words of the models the sdpa, sync and timing sections build
    timing_size: str
    timing: Tuple[TimingGroup, ...]
    tokens: int
    warmup: int
    steps: int
    # attention: one layer's core, (B, H, T, D) with B = tokens // T
    attention_dtype: torch.dtype
    attention_lengths: Tuple[int, ...]
    attention_tokens: int
    attention_heads: int
    attention_head_dim: int
    attention_warmup: int
    attention_iters: int
    attention_paddings: Tuple[bool, ...]  # without and/or with a quarter of the sequences padded (training's batches)
    attention_paths: Tuple[str, ...]
    # throughput: train_scripts/pretrain.sh on one device
    throughput_archs: Tuple[str, ...]
    throughput_size: str
    throughput_length: int  # TOKENS_PER_SAMPLE
    throughput_batch: int  # MAX_SENTENCES, the recipe's per-GPU batch
    throughput_sentences: int  # SENTENCES_PER_UPDATE: update-freq = this / batch on one device
    throughput_updates: int
    throughput_log_interval: int
    throughput_vocab: int
    # sync: the steps of SYNC_STEPS at this length and tokens per step
    sync_length: int
    sync_tokens: int


def settings(dry_run: bool, quick: bool = False) -> Settings:
    full = _settings(dry_run)
    if not quick:
        return full
    T = full.attention_lengths[0]  # 512 (the dry run's 16)
    length = full.timing[0].length  # 512 (32)
    return replace(full, attention_lengths=(T,), attention_paddings=(True,), attention_paths=QUICK_ATTENTION_PATHS,
                   throughput_archs=(full.throughput_archs[0], full.throughput_archs[-1]),
                   timing=(TimingGroup(length, "mlm", QUICK_VARIANTS), TimingGroup(2 * length, "mlm", ("tupe_r",))))


def _settings(dry_run: bool) -> Settings:
    if dry_run:
        return Settings("cpu", "tiny", 21, 2, "tupe_r_tiny", (("fp32", "cli"), ("fp32", "hydra")), 16, 64, 10, "3e-3", 2,
                        1000, "tiny", (TimingGroup(32, "mlm"), TimingGroup(32, "electra", ELECTRA_VARIANTS),
                                 TimingGroup(64, "mlm", SOME_VARIANTS)),
                        256, 1, 2,
                        torch.float32, (16,), 16, 1, 8, 0, 1, (False, True), PATHS,
                        ("roberta_base", "bert_a_tiny", "tupe_r_tiny"), "tiny", 64, 4, 8, 4, 2, 500,
                        32, 128)
    return Settings("cuda", "base", 100, 2, "tupe_r_base", (("fp16", "cli"), ("bf16", "hydra")), 32, 128, 60, "3e-4", 10,
                    32000, "base", (TimingGroup(512, "mlm"), TimingGroup(512, "electra", ELECTRA_VARIANTS),
                             TimingGroup(1024, "mlm", SOME_VARIANTS), TimingGroup(128, "mlm", T128_VARIANTS)),
                    16384, 2, 8,
                    torch.bfloat16, (512, 1024), 16384, 12, 64, 3, 10, (False, True), PATHS,
                    ("roberta_base", "bert_a_base", "tupe_r_base"), "base", 512, 16, 256, 12, 4, 32000,
                    512, 4096)


# --- the result of a section: markdown, CSV rows, status; saved after every change ----------------------


class Result:
    """What one section found, written to ``path`` as JSON after every change (a section killed at its time
    limit still leaves what it had measured)."""

    def __init__(self, path: Path, section: str):
        self.path, self.section = path, section
        self.status, self.lines, self.rows = "ok", [], []  # rows: (subject, setting, metric, value)
        self.start, self.ended = time.monotonic(), False  # ended: the section returned (its process did not die in it)

    def say(self, line: str = "") -> None:
        self.lines.append(line)
        self.save()

    def row(self, subject: str, setting: str, metric: str, value) -> None:
        self.rows.append((subject, setting, metric, value))

    def fail(self, why: str) -> None:
        self.status = "failed"
        self.say(f"**failed**: {why}")

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"status": self.status, "lines": self.lines, "rows": self.rows, "ended": self.ended,
                                   "seconds": time.monotonic() - self.start}), encoding="utf-8")
        tmp.replace(self.path)


# --- environment ---------------------------------------------------------------------------------------------


def card_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()


def peak_tflops(name: str, override: Optional[float]) -> Optional[float]:
    """The card's peak dense bf16 TFLOP/s: ``override``, else by name (``PEAK_BF16_TFLOPS``), else None."""
    if override:
        return override
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def section_environment(r: Result, s: Settings, args) -> None:
    import fairseq

    import tupe_plugin
    from tupe_plugin.positional.registry import VARIANTS

    name = card_name(s.device)
    peak = peak_tflops(name, args.peak_tflops)
    facts = {
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda or "none",
        "cudnn": str(torch.backends.cudnn.version()) if s.device == "cuda" else "none", "device": name,
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if s.device == "cuda" else "none",
        "fairseq": fairseq.__version__, "fairseq_from": str(Path(fairseq.__file__).parent.parent),
        "tupe_plugin_from": str(Path(tupe_plugin.__file__).parent.parent), "variants": str(len(VARIANTS)),
        "peak_bf16_tflops": f"{peak:g}" if peak else "unknown (give --peak-tflops)",
    }
    for key, value in facts.items():
        r.row("machine", "", key, value)
    r.say("| what | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in facts.items()))
    if args.install_log:
        r.say("\nInstall from the wheel folder:\n\n```\n" + Path(args.install_log).read_text(encoding="utf-8").strip()
              + "\n```")


# --- CUDA tests ------------------------------------------------------------------------------------------------


def cuda_test_files() -> List[str]:
    """The test files that ask for CUDA (``torch.cuda.is_available()`` in a skip condition)."""
    asks = re.compile(r"skipif\(\s*not torch\.cuda\.is_available\(\)")
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if asks.search(p.read_text(encoding="utf-8")))


def pytest_counts(output: str) -> Dict[str, int]:
    """{"passed": n, "failed": n, "skipped": n, ...} from pytest's last summary line."""
    last = next((line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed|skipped|error)", line)), "")
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


def section_cuda_tests(r: Result, s: Settings, args) -> None:
    files = cuda_test_files()
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "cuda", *files]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, args.deadline - time.time()))
    counts = pytest_counts(p.stdout)
    for key, n in counts.items():
        r.row("cuda tests", " ".join(files), key, n)
    r.say(f"`pytest -k cuda {' '.join(files)}`: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "no summary"))
    if p.returncode != 0:
        r.fail(f"pytest exit status {p.returncode}")
        r.say("\n```\n" + (p.stdout + p.stderr)[-3000:] + "\n```")
    elif counts.get("skipped") and s.device == "cuda":
        r.fail("tests were skipped on a CUDA machine")
        r.say("\n```\n" + p.stdout[-2000:] + "\n```")
    elif not counts.get("passed") and s.device == "cuda":
        r.fail("no CUDA test ran")
    elif s.device != "cuda":
        r.say("(dry run: without CUDA these tests skip)")


# --- SDPA against the explicit path, backends, pitfalls ------------------------------------------------------


@contextlib.contextmanager
def sdpa_calls():
    """Every call of ``F.scaled_dot_product_attention`` while open, as (q dtype, mask or None)."""
    import torch.nn.functional as F

    seen: List[Tuple[torch.dtype, Optional[torch.Tensor]]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        seen.append((q.dtype, attn_mask))
        return real(q, k, v, attn_mask=attn_mask, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        yield seen
    finally:
        F.scaled_dot_product_attention = real


def masks_ok(seen) -> Tuple[bool, bool]:
    """(every mask in q's dtype, every mask with all strides but the last a multiple of 8 and the last 1)."""
    masks = [(q_dtype, m) for q_dtype, m in seen if m is not None]
    return (all(m.dtype == q for q, m in masks),
            all(m.stride(-1) == 1 and all(st % 8 == 0 for st in m.stride()[:-1]) for _, m in masks))


def backends_taken(model, x, keep, weight) -> str:
    """The SDPA backends one forward and backward dispatched to, by the ATen ops the profiler saw."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        forward_backward(model, x, keep, weight)
    names = {e.key for e in prof.key_averages()}
    found = [label for op, label in SDPA_BACKENDS if f"aten::{op}" in names]
    return ", ".join(dict.fromkeys(found)) or "none"


def set_path(model, path: str) -> None:
    for layer in model.encoder.sentence_encoder.layers:
        layer.self_attn.attention_path = path


def batch(s: Settings, with_empty: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, T) tokens, <s> first, the second sequence right-padded; ``with_empty`` adds one of padding only."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 1000, (3, s.sdpa_length), generator=g)
    x[:, 0] = 0
    x[1, s.sdpa_length * 2 // 3:] = 1
    if with_empty:
        x = torch.cat([x, torch.ones(1, s.sdpa_length, dtype=x.dtype)])
    return x.to(s.device), x.ne(1).to(s.device)


def forward_backward(model, x, keep, weight) -> Tuple[torch.Tensor, torch.Tensor]:
    """(features of the real tokens, all gradients flattened), in float64, of ``sum(features * weight)``."""
    model.zero_grad(set_to_none=True)
    features = model(x, features_only=True)[0][keep]
    (features.float() * weight.to(features.device, torch.float32)).sum().backward()
    grads = torch.cat([p.grad.reshape(-1).double() for p in model.parameters() if p.grad is not None])
    return features.detach().double(), grads


def relative(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_dtype(model, fp32_model, reference, s: Settings, name: str, weight) -> Dict[str, object]:
    """``model`` (a copy in dtype ``name``) on both paths against the float64 ``reference`` (features, gradients);
    the backends, the masks SDPA gets (also from ``fp32_model`` under autocast) and the all-padding row."""
    x, keep = batch(s)
    errors = {}
    for path in ("sdpa", "explicit"):
        set_path(model, path)
        out, grad = forward_backward(model, x, keep, weight)
        errors[path] = (relative(out, reference[0]), relative(grad, reference[1]))
    set_path(model, "sdpa")
    with sdpa_calls() as seen:
        padded = backends_taken(model, x, keep, weight)
    dtype = DTYPES[name]
    with sdpa_calls() as seen_autocast, torch.autocast(s.device, dtype=dtype, enabled=dtype != torch.float32):
        forward_backward(fp32_model, x, keep, weight)  # float32 weights under autocast (fairseq --amp)
    same_dtype, aligned = masks_ok(seen + seen_autocast)
    unpadded = x[[0, 2]]  # no padding: no mask for the variants without a positional bias
    plain = backends_taken(model, unpadded, unpadded.ne(1), torch.ones(int(unpadded.ne(1).sum()), weight.size(1)))
    x_empty, _ = batch(s, with_empty=True)
    finite = True
    for path in ("sdpa", "explicit"):
        set_path(model, path)
        model.zero_grad(set_to_none=True)
        out = model(x_empty, features_only=True)[0]
        out.float().sum().backward()
        finite &= bool(torch.isfinite(out).all()) and all(
            bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    floor = ERROR_FLOOR[name]
    accurate = all(errors["sdpa"][i] <= 2 * errors["explicit"][i] + floor for i in (0, 1))
    return {"errors": errors, "backend_padded": padded, "backend_no_padding": plain, "mask_in_q_dtype": same_dtype,
            "mask_aligned": aligned, "all_padding_row_finite": finite,
            "ok": accurate and same_dtype and aligned and finite}


def section_sdpa(r: Result, s: Settings, args) -> None:
    from bench_train_step import build

    from tupe_plugin.positional import masks

    if s.device == "cpu":  # the dry run: the alignment CUDA gets, forced on CPU (as tests/test_attention_paths.py does)
        masks.ALIGNED_DEVICES.add("cpu")
    no_dropout = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    x, keep = batch(s)
    r.say(f"{s.sdpa_size} size with {s.sdpa_layers} layers, {x.size(0)} sequences of T={s.sdpa_length} (one right-padded); relative error "
          "= ||a - ref|| / ||ref|| against the explicit path in float64, of the real tokens' features and of all "
          "gradients; pass: SDPA's error <= 2 x the explicit path's + a floor (fp32 1e-5, bf16 2e-2, fp16 3e-3).\n")
    r.say("| variant | dtype | features: SDPA / explicit | gradients: SDPA / explicit | backend, padded | "
          "backend, no padding | mask in q's dtype | mask aligned | all-padding row finite | result |")
    r.say("|---|---|---|---|---|---|---|---|---|---|")
    failures = []
    for variant in args.variants:
        ref_model = build(f"{variant}_{s.sdpa_size}", s.sdpa_size, s.sdpa_length, s.device,
                          encoder_layers=s.sdpa_layers, **no_dropout)
        weight = torch.randn(int(keep.sum()), ref_model.encoder.sentence_encoder.embed_tokens.embedding_dim,
                             generator=torch.Generator().manual_seed(1))
        fp64 = copy.deepcopy(ref_model).double()
        set_path(fp64, "explicit")
        ref_out, ref_grad = forward_backward(fp64, x, keep, weight)
        del fp64
        for name, dtype in DTYPES.items():
            found = check_dtype(copy.deepcopy(ref_model).to(dtype), ref_model, (ref_out, ref_grad), s, name, weight)
            failures += [] if found["ok"] else [f"{variant} {name}"]
            e = found["errors"]
            r.say(f"| {variant} | {name} | {e['sdpa'][0]:.1e} / {e['explicit'][0]:.1e} | {e['sdpa'][1]:.1e} / "
                  f"{e['explicit'][1]:.1e} | {found['backend_padded']} | {found['backend_no_padding']} | "
                  f"{found['mask_in_q_dtype']} | {found['mask_aligned']} | {found['all_padding_row_finite']} | "
                  f"{'ok' if found['ok'] else 'FAILED'} |")
            for path in ("sdpa", "explicit"):
                r.row(variant, name, f"features_rel_error_{path}", e[path][0])
                r.row(variant, name, f"grads_rel_error_{path}", e[path][1])
            for metric in ("backend_padded", "backend_no_padding", "mask_in_q_dtype", "mask_aligned",
                           "all_padding_row_finite", "ok"):
                r.row(variant, name, metric, found[metric])
        del ref_model
        if s.device == "cuda":
            torch.cuda.empty_cache()
    if failures:
        r.fail(", ".join(failures))


# --- one attention layer on every path ----------------------------------------------------------------------


# Largest error of the Triton path against float64: twice the explicit path's in the same dtype plus this floor.
ATTENTION_ERROR_FLOOR = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 3e-3}
ERROR_COLUMNS = ("out", "dq", "dk", "dv", "dbias")


def sdpa_backend(device, dtype, length: int, batch_size: int, heads: int, head_dim: int, bias_kind: str,
                 dropout_p: float, padded: bool) -> str:
    """The SDPA kernel one forward + backward of bench_attention's inputs dispatches to (the profiler's ATen ops)."""
    from bench_attention import attend, inputs, training_padding
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    q, k, v, bias, grad_out = inputs(batch_size, heads, length, head_dim, device, dtype, bias_kind)
    padding = training_padding(batch_size, length, device) if padded else None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        attend("sdpa", q, k, v, bias, padding, head_dim ** -0.5, dropout_p).backward(grad_out)
    names = {e.key for e in prof.key_averages()}
    return ", ".join(dict.fromkeys(label for op, label in SDPA_BACKENDS if f"aten::{op}" in names)) or "none"


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
                r.row("triton", f"T={length} errors", "ok", not bad)
            r.say(f"| {length} | {row['path']} | " + " | ".join(f"{row[c]:.1e}" for c in ERROR_COLUMNS) + f" | {result} |")
            for c in ERROR_COLUMNS:
                r.row(row["path"], f"T={length} errors", f"{c}_rel_error", row[c])
    return failures


def section_attention(r: Result, s: Settings, args) -> None:
    from bench_attention import BIASES, attention_rows

    from tupe_plugin.kernels.triton_attention import triton_available

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
                backend = ""
                if row["path"] == "sdpa" and row["ms"] is not None:
                    backend = sdpa_backend(device, dtype, length, row["B"], s.attention_heads, s.attention_head_dim,
                                           row["bias"], dropout_p, row["padding"])
                ms = "" if row["ms"] is None else f"{row['ms']:.3f}"
                ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}"
                r.say(f"| {length} | {row['B']} | {dropout_p:g} | {'yes' if row['padding'] else 'no'} | {row['bias']} | "
                      f"{row['path']} | {ms} | {ratio} | {backend} | {row['note']} |")
                setting = f"T={length} dropout={dropout_p:g} bias={row['bias']}" + (" padded" if row["padding"] else "")
                for metric, value in (("ms", row["ms"]), ("ratio_to_sdpa_no_bias", row["ratio"]),
                                      ("sdpa_backend", backend), ("note", row["note"])):
                    if value not in (None, ""):
                        r.row(row["path"], setting, metric, value)
                why = attention_failure(row, s.device)
                failures += [why] if why else []
            r.save()
    from tupe_plugin.kernels.triton_attention import tuned_choices

    tuned = tuned_choices()
    r.say("\nThe Triton kernels' tiles, chosen by timing each kernel's autotune list at its first call in this "
          "process (query rows x keys, warps): " + ("none tuned (only on CUDA in half precision)" if not tuned else ""))
    for (_, dtype_name, length, head_dim, dropout, kind, padding), blocks in tuned.items():
        setting = f"T={length} D={head_dim} {dtype_name} dropout={dropout} bias={kind} padding={padding}"
        tiles = (f"forward {blocks.forward_m}x{blocks.forward_n} w{blocks.forward_warps}, dq {blocks.dq_m}x{blocks.dq_n} "
                 f"w{blocks.dq_warps}, dkdv {blocks.dkdv_m}x{blocks.dkdv_n} w{blocks.dkdv_warps}")
        r.say(f"- {setting}: {tiles}")
        r.row("triton", setting, "tiles", tiles)
    if failures:
        r.fail("; ".join(failures))


# --- fairseq-train fp16 / bf16 -------------------------------------------------------------------------------


def write_corpus(folder: Path, lines: int, seed: int = 0) -> None:
    """train.txt / valid.txt of 20 to 60 words each, drawn from 500 words with Zipf frequencies (the k-th word in
    proportion to 1/k): a model's loss falls within a few updates, from log2 of the vocabulary (9 bits) towards
    the frequencies' entropy (6.9 bits)."""
    import random

    rng = random.Random(seed)
    words, weights = [f"w{k}" for k in range(500)], [1 / (k + 1) for k in range(500)]
    for split, n in (("train", lines), ("valid", max(1, lines // 20))):
        with open(folder / f"{split}.txt", "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(" ".join(rng.choices(words, weights, k=rng.randrange(20, 60))) + "\n")


def train_log_facts(log: str) -> Dict[str, object]:
    """Losses of the ``train_inner`` lines, overflow skips (fairseq's "gradient overflow detected" notes) and the
    last loss scale logged."""
    losses = [float(v) for v in re.findall(r"train_inner\W.*?\bloss=([0-9.]+)", log)]
    scales = re.findall(r"\bloss_scale=([0-9.e+-]+)", log)
    return {"losses": losses, "overflows": len(re.findall(r"gradient overflow detected", log)),
            "loss_scale": scales[-1] if scales else "none"}


def train_command(s: Settings, precision: str, launcher: str, data: Path, run_dir: Path) -> List[str]:
    """One short masked-LM pre-training of ``s.train_arch``: through ``fairseq-train`` (the legacy command line,
    as train_scripts/pretrain.sh) or ``fairseq-hydra-train`` with the shipped config. fairseq 0.12's command line
    turns ``--bf16`` into ``--tpu`` (``fairseq/options.py``), so bf16 on a GPU goes through hydra."""
    plugin, cpu = str(ROOT / "tupe_plugin"), s.device == "cpu"
    if launcher == "cli":
        if precision == "bf16":
            raise ValueError("fairseq-train --bf16 sets --tpu in fairseq 0.12; use the hydra launcher")
        return [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", plugin, "--task", "masked_lm",
                "--criterion", "masked_lm", "--arch", s.train_arch, "--sample-break-mode", "complete",
                "--tokens-per-sample", str(s.train_length), "--batch-size", str(s.train_batch), "--optimizer", "adam",
                "--lr", s.train_lr, "--lr-scheduler", "polynomial_decay", "--warmup-updates", str(s.train_warmup),
                "--total-num-update", str(s.train_updates), "--max-update", str(s.train_updates),
                "--log-format", "simple", "--log-interval", "5", "--seed", "1", "--num-workers", "0", "--no-save",
                "--disable-validation", "--no-progress-bar", *(["--cpu"] if cpu else []),
                *([f"--{precision}"] if precision != "fp32" else [])]
    return [sys.executable, "-m", "fairseq_cli.hydra_train", "--config-dir", str(ROOT / "train_scripts/config/pretrain"),
            "--config-name", "tupe_base", f"task.data={data}", f"common.user_dir={plugin}",
            f"model._name={s.train_arch}", f"common.fp16={str(precision == 'fp16').lower()}",
            f"common.bf16={str(precision == 'bf16').lower()}", f"common.cpu={str(cpu).lower()}",
            "common.log_interval=5", "common.tensorboard_logdir=null", "model.target_batch_size=null",
            f"dataset.batch_size={s.train_batch}", f"task.tokens_per_sample={s.train_length}",
            f"optimization.max_update={s.train_updates}", f"optimization.lr=[{s.train_lr}]",
            f"lr_scheduler.warmup_updates={s.train_warmup}", "dataset.num_workers=0", "checkpoint.no_save=true",
            "dataset.disable_validation=true", f"hydra.run.dir={run_dir}"]


def section_train(r: Result, s: Settings, args) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        write_corpus(data, 4000 if s.device == "cuda" else 600)
        p = subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--only-source", "--trainpref",
                            str(data / "train.txt"), "--validpref", str(data / "valid.txt"), "--destdir",
                            str(data / "bin"), "--workers", "1"], capture_output=True, text=True, env=env)
        if p.returncode != 0:
            r.fail("fairseq-preprocess: " + p.stderr[-2000:])
            return
        r.say(f"`{s.train_arch}`, {s.train_updates} updates of {s.train_batch} sequences of at most {s.train_length} "
              f"tokens, on generated text (500 words with Zipf frequencies), Adam, lr "
              f"{s.train_lr}, {s.train_warmup} warm-up updates; losses as fairseq logs them (base 2), every 5 updates. fp16 through "
              "`fairseq-train --user-dir tupe_plugin --fp16`; bf16 through `fairseq-hydra-train` with "
              "train_scripts/config/pretrain/tupe_base.yaml and `common.bf16=true` (fairseq 0.12's command line "
              "turns `--bf16` into `--tpu`).\n")
        r.say("Loss falls, overflow skips counted: the loss of the first and the last logged interval, and the "
              "updates fairseq skipped on a gradient overflow (fp16's loss scaling; bf16 has none).\n")
        r.say("| precision | launcher | updates | loss, first logged -> last | loss falls | overflow skips | "
              "last loss scale | seconds |\n|---|---|---:|---|---|---:|---|---:|")
        for precision, launcher in s.train_runs:
            cmd = train_command(s, precision, launcher, data / "bin", data / f"hydra-{precision}")
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp,
                               timeout=max(10.0, args.deadline - time.time()))
            seconds = time.monotonic() - t0
            facts = train_log_facts(p.stdout + p.stderr)
            losses = facts["losses"]
            falls = len(losses) >= 2 and losses[-1] < losses[0]
            label = precision + (" (dry run: fairseq's fp16/bf16 need CUDA)" if s.device != "cuda" else "")
            shown = f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "none logged"
            r.say(f"| {label} | {launcher} | {5 * len(losses)} | {shown} | {falls} | {facts['overflows']} | "
                  f"{facts['loss_scale']} | {seconds:.0f} |")
            setting = f"{precision} {launcher}"
            for metric, value in (("first_loss", losses[0] if losses else ""), ("last_loss", losses[-1] if losses else ""),
                                  ("loss_falls", falls), ("overflow_skips", facts["overflows"]),
                                  ("last_loss_scale", facts["loss_scale"]), ("seconds", round(seconds, 1))):
                r.row(s.train_arch, setting, metric, value)
            if p.returncode != 0:
                r.fail(f"{setting}: exit status {p.returncode}\n\n```\n{p.stderr[-2500:]}\n```")
            elif not falls:
                r.fail(f"{setting}: the loss did not fall ({shown})")


# --- fairseq-train throughput: train_scripts/pretrain.sh as users run it -------------------------------------


def write_token_data(folder: Path, vocab: int, tokens: int, min_len: int, max_len: int, seed: int = 0) -> None:
    """A fairseq data folder (dict.txt, train/valid .bin/.idx, as fairseq-preprocess writes them) of about
    ``tokens`` tokens: lines of ``min_len`` to ``max_len`` words drawn from ``vocab`` words with Zipf frequencies,
    each ending with </s>. Written by fairseq's own dataset builder, without a text round trip."""
    import numpy as np
    from fairseq.data import Dictionary, indexed_dataset

    rng = np.random.default_rng(seed)
    d = Dictionary()
    for k in range(vocab):
        d.add_symbol(f"w{k}", n=vocab - k)
    d.save(str(folder / "dict.txt"))
    zipf = 1.0 / np.arange(1, vocab + 1)
    for split, n_tokens in (("train", tokens), ("valid", max(min_len, tokens // 100))):
        builder = indexed_dataset.make_builder(str(folder / f"{split}.bin"), "mmap", vocab_size=len(d))
        lengths = rng.integers(min_len, max_len + 1, size=max(1, 2 * n_tokens // (min_len + max_len)))
        ids = rng.choice(vocab, size=int(lengths.sum()), p=zipf / zipf.sum()) + d.nspecial
        for line in np.split(ids, np.cumsum(lengths)[:-1]):
            builder.add_item(torch.from_numpy(np.append(line, d.eos())))
        builder.finalize(str(folder / f"{split}.idx"))


def pretrain_command(s: Settings, arch: str, data: Path, save_dir: Path) -> Tuple[List[str], Dict[str, str]]:
    """train_scripts/pretrain.sh for a short run of ``arch`` on one device: its environment and its arguments
    (appended to its fairseq-train command line). Everything else is the recipe's: Adam, lr, dropouts, clipping,
    the per-GPU batch and the update frequency of one GPU."""
    gpu = s.device == "cuda"
    env = {"DATA": str(data), "ARCH": arch, "GPUS": "1" if gpu else "0", "FP16": "0", "BF16": "1" if gpu else "0",
           "PYTHON": sys.executable,
           "TOKENS_PER_SAMPLE": str(s.throughput_length), "MAX_SENTENCES": str(s.throughput_batch),
           "SENTENCES_PER_UPDATE": str(s.throughput_sentences), "TOTAL_UPDATES": str(s.throughput_updates),
           "LOG_INTERVAL": str(s.throughput_log_interval), "SAVE_DIR": str(save_dir), "TENSORBOARD_DIR": "none"}
    extra = ["--no-save", "--disable-validation"]
    if arch.startswith("roberta_") and s.throughput_size != "base":  # fairseq's roberta has no tiny arch
        from tupe_plugin.models.architectures import SIZES

        extra += [f"--{k.replace('_', '-')}={v}" for k, v in SIZES[s.throughput_size].items()]
    return ["bash", str(ROOT / "train_scripts/pretrain.sh"), *extra], env


def throughput_log_facts(log: str) -> Dict[str, object]:
    """fairseq's ``train_inner`` words per second (one per logged interval), and the precision the run trained in
    (its logged config: ``'bf16': True`` and ``'tpu': False`` on a GPU in bf16)."""
    wps = [float(v) for v in re.findall(r"train_inner\W.*?\bwps=([0-9.]+)", log)]
    flags = {k: v == "True" for k, v in re.findall(r"'(bf16|fp16|tpu|cpu)': (True|False)", log)}
    return {"wps": wps, **{k: flags.get(k) for k in ("bf16", "fp16", "tpu", "cpu")}}


def section_throughput(r: Result, s: Settings, args) -> None:
    import bench_train_step
    from bench_train_step import build, make_batch, step_flops
    from fairseq.data import Dictionary

    peak = peak_tflops(card_name(s.device), args.peak_tflops)
    gpu = s.device == "cuda"
    update_freq = s.throughput_sentences // s.throughput_batch
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        data.mkdir()
        tokens = int(1.3 * s.throughput_updates * s.throughput_sentences * s.throughput_length)
        write_token_data(data, s.throughput_vocab, tokens, *((20, 60) if gpu else (10, 30)))
        # the FLOP count's models get the trained ones' vocabulary: the data's and the <mask> masked_lm adds
        bench_train_step.VOCAB = len(Dictionary.load(str(data / "dict.txt"))) + 1
        precision = "bf16 (BF16=1)" if gpu else "fp32 (dry run: fairseq's bf16 needs CUDA)"
        r.say(f"`train_scripts/pretrain.sh` as it runs on one GPU (GPUS=1: MAX_SENTENCES={s.throughput_batch} per "
              f"forward, update-freq {update_freq} for SENTENCES_PER_UPDATE={s.throughput_sentences}; "
              f"TOKENS_PER_SAMPLE={s.throughput_length}, the recipe's Adam, dropouts and clipping), {precision}, "
              f"{s.throughput_updates} updates on generated data ({s.throughput_vocab} words with Zipf frequencies, "
              f"lines of {'20-60' if gpu else '10-30'} words packed by --sample-break-mode complete), logged every "
              f"{s.throughput_log_interval}. wps: fairseq's own words (tokens) per second of its train_inner lines; "
              "the first interval (start-up, kernel compilation) is left out, the median of the others is the "
              "row's. bf16: pretrain.sh's BF16=1 (fairseq-train's own parser, without the `--tpu` fairseq 0.12 "
              "sets for `--bf16`: train_scripts/fairseq_train.py). MFU = matrix "
              "FLOPs per token (one step of "
              f"{s.throughput_batch} x {s.throughput_length} tokens counted as in the timing section) x wps / peak"
              + (f" {peak:g} TFLOP/s." if peak else ": no peak rate known (give --peak-tflops).") + "\n")
        r.say("| arch | wps (median) | wps per interval | MFU | FLOPs/token | trained in | seconds |\n"
              "|---|---:|---|---:|---:|---|---:|")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        x, masked = make_batch(s.throughput_batch * s.throughput_length, s.throughput_length, s.device)
        for arch in s.throughput_archs:
            if time.time() > args.deadline:
                r.fail(f"time budget reached before {arch}")
                continue
            cmd, extra_env = pretrain_command(s, arch, data, tmp / f"save-{arch}")
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env={**env, **extra_env}, cwd=tmp,
                                   timeout=max(10.0, args.deadline - time.time()))
                log, rc = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                log, rc = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"), "timeout"
            seconds = time.monotonic() - t0
            facts = throughput_log_facts(log)
            measured = facts["wps"][1:]
            wps = statistics.median(measured) if measured else None
            model = build(arch if not arch.startswith("roberta_") else "roberta_base", s.throughput_size,
                          s.throughput_length, s.device).to(torch.bfloat16 if gpu else torch.float32)
            with forced_path(model, "sdpa"):  # FlopCounterMode counts SDPA, not a Triton kernel: same math
                flops_per_token = step_flops(model, torch.optim.Adam(model.parameters(), lr=1e-4), x, masked) / x.numel()
            del model
            mfu = flops_per_token * wps / (peak * 1e12) if wps and peak else None
            trained = ", ".join(k for k in ("bf16", "fp16", "tpu", "cpu") if facts[k]) or "fp32"
            r.say(f"| {arch} | {f'{wps:,.0f}' if wps else 'none'} | {', '.join(f'{w:,.0f}' for w in facts['wps'])} | "
                  f"{f'{mfu:.1%}' if mfu else 'n/a'} | {flops_per_token:.3g} | {trained} | {seconds:.0f} |")
            for metric, value in (("wps", wps), ("wps_intervals", " ".join(f"{w:g}" for w in facts["wps"])),
                                  ("flops_per_token", flops_per_token), ("mfu", mfu), ("bf16", facts["bf16"]),
                                  ("tpu", facts["tpu"]), ("update_freq", update_freq), ("seconds", round(seconds, 1))):
                r.row(arch, f"T={s.throughput_length} batch={s.throughput_batch}", metric, "" if value is None else value)
            if rc != 0:
                r.fail(f"{arch}: pretrain.sh exit status {rc}\n\n```\n{log[-2500:]}\n```")
            elif wps is None:
                r.fail(f"{arch}: fewer than two train_inner intervals logged\n\n```\n{log[-1500:]}\n```")
            elif gpu and not (facts["bf16"] and facts["tpu"] is False):
                r.fail(f"{arch}: did not train in bf16 on the GPU (bf16 {facts['bf16']}, tpu {facts['tpu']})")
            if s.device == "cuda":
                torch.cuda.empty_cache()


# --- sync count of the train steps -----------------------------------------------------------------------------


@contextlib.contextmanager
def forced_path(model, path: str):
    """Every attention block of ``model`` (an ELECTRA's generator and discriminator too) on ``path`` while open."""
    blocks = [m for m in model.modules() if hasattr(m, "attention_path")]
    before = [m.attention_path for m in blocks]
    for m in blocks:
        m.attention_path = path
    try:
        yield
    finally:
        for m, old in zip(blocks, before):
            m.attention_path = old


@contextlib.contextmanager
def attention_paths_taken():
    """The attention paths (``attend``'s ``attention_path``) of the plugin's blocks while open; fairseq's own
    RoBERTa takes none of them."""
    from tupe_plugin.positional import attention

    seen: List[str] = []
    real = attention.attend

    def spy(q, k, v, mask, scaling, dropout, attention_path):
        seen.append(attention_path)
        return real(q, k, v, mask, scaling, dropout, attention_path)

    attention.attend = spy
    try:
        yield seen
    finally:
        attention.attend = real


def step_model(family: str, objective: str, size: str, length: int, device: str):
    """(model, Adam) for one train step of bench_train_step: fairseq's ``roberta`` or ``<family>_<size>``, wrapped
    as ELECTRA's generator + discriminator for ``objective`` electra; bf16 weights as fairseq's --bf16."""
    from bench_train_step import build, with_objective

    arch = "roberta_base" if family == "roberta" else f"{family}_{size}"
    model = with_objective(build(arch, size, length, device), objective).to(torch.bfloat16)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def section_sync(r: Result, s: Settings, args) -> None:
    from bench_train_step import make_batch, train_step
    from sync_count import sync_count

    x, masked = make_batch(s.sync_tokens, s.sync_length, s.device)
    r.say(f"Device-to-host synchronisations of one train step (bench/bench_train_step.py's: forward, loss, backward, "
          f"Adam; MLM or ELECTRA's generator + sampling + discriminator with --criterion electra's loss), "
          f"{s.timing_size} size, bf16 weights, {x.size(0)} x {s.sync_length} tokens, the attention path `auto` "
          "takes (on a GPU after one step that is not counted: first calls set up kernels). Counted by "
          "bench/sync_count.py: "
          "CUDA's sync debug mode on a GPU (each sync one warning), the sync-forcing ops without one (dry run). "
          "Each sync stalls the host until the GPU has run every queued kernel. Sites: where they come from, most "
          "frequent first. Without CUDA the count is of ops that would sync if their tensors were on a GPU: Adam's "
          "reads of its step counter count there, though on a GPU that counter stays a CPU tensor (no sync).\n")
    r.say("| arch | objective | syncs | counted by | attention path | sites |\n|---|---|---:|---|---|---|")
    for family, objective in SYNC_STEPS:
        if time.time() > args.deadline:
            r.fail(f"time budget reached before {family} {objective}")
            continue
        model, opt = step_model(family, objective, s.timing_size, s.sync_length, s.device)
        if s.device == "cuda":  # first calls sync while they set up (cuBLAS, cuDNN, Triton): not the step's own
            train_step(model, opt, x, masked)
        with attention_paths_taken() as paths:
            found = sync_count(functools.partial(train_step, model, opt, x, masked))
        sites = collections.Counter(found.sites).most_common()
        shown = "; ".join(f"{site} x{n}" if n > 1 else site for site, n in sites[:6]) + (" ..." if len(sites) > 6 else "")
        taken = ", ".join(sorted(set(paths))) or "fairseq's"
        r.say(f"| {family} | {objective} | {found.count} | {found.how} | {taken} | {shown} |")
        for metric, value in (("syncs", found.count), ("counted_by", found.how), ("attention_path", taken),
                              ("sites", " | ".join(f"{site} x{n}" for site, n in sites))):
            r.row(family, f"{objective} T={s.sync_length}", metric, value)
        del model, opt
        if s.device == "cuda":
            torch.cuda.empty_cache()


# --- timing against RoBERTa --------------------------------------------------------------------------------------


def timing_variants(group: TimingGroup, requested: List[str]) -> List[str]:
    """The variants of one timing group: bert_a first (the plugin's reference on the same path), then those of the
    group (all: None) that were requested (default: the whole registry)."""
    from tupe_plugin.positional.registry import VARIANTS

    wanted = [v for v in (group.variants or VARIANTS) if v in requested and v != "bert_a"]
    return ["bert_a"] + wanted


def section_timing(r: Result, s: Settings, args) -> None:
    from bench_train_step import make_batch, pair_ratio_iqr, resident_bytes, step_flops, step_peak_bytes, timed_steps

    name = card_name(s.device)
    peak = peak_tflops(name, args.peak_tflops)
    warmup, steps = args.warmup or s.warmup, args.steps or s.steps
    r.say(f"{s.timing_size} size, bf16 weights (as fairseq's bf16 training converts the model; Adam here keeps no fp32 master "
          f"copy), {s.tokens} tokens per step, training mode with RoBERTa's dropouts, `--tupe-attention auto` (the "
          f"path column: what it took); {warmup} warm-up and {steps} timed steps per model, alternating RoBERTa / "
          "variant. Every row steps against RoBERTa's MLM step; an ELECTRA row's variant steps ELECTRA's generator + "
          "discriminator (--task electra --criterion electra). / RoBERTa: the variant's median / RoBERTa's; pair "
          "ratios: IQR of step i / step i. / bert_a: the row's / RoBERTa ratio over bert_a's at the same T, objective "
          "and `--tupe-attention` (each against the RoBERTa it alternated with): the variant's own cost, which a "
          "plugin faster than fairseq in its common parts would hide from / RoBERTa. ELECTRA / MLM: an ELECTRA row's "
          "/ RoBERTa ratio over the same variant's MLM row at that T. MFU = matrix FLOPs of a step (torch's "
          "FlopCounterMode, forward + backward, counted with the blocks on SDPA: the same math, and FlopCounterMode "
          "does not see a Triton kernel) / median step time / peak "
          + (f"{peak:g} TFLOP/s dense bf16 ({name})" if peak else f"unknown for {name}: no MFU (give --peak-tflops)")
          + ".\n")
    r.say("| T | objective | batch | variant | path | RoBERTa ms | variant ms | / RoBERTa | pair ratios (IQR) | / bert_a | "
          "ELECTRA / MLM | variant tokens/s | RoBERTa MFU | variant MFU | FLOP ratio | RoBERTa peak MiB | variant peak MiB |")
    r.say("|---:|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def mfu(flops: int, seconds: float) -> str:
        return f"{flops / seconds / (peak * 1e12):.1%}" if peak else "n/a"

    skipped = []
    ratios: Dict[Tuple[int, str, str], float] = {}  # (T, objective, variant) -> variant / RoBERTa
    for group in s.timing:
        length, objective = group.length, group.objective
        variants = timing_variants(group, args.variants)
        if time.time() > args.deadline:
            skipped += [f"{v} T={length} {objective}" for v in variants]
            continue
        x, masked = make_batch(s.tokens, length, s.device)
        roberta = step_model("roberta", "mlm", s.timing_size, length, s.device)
        roberta_step = step_peak_bytes(*roberta, x, masked, s.device)
        roberta_mib, roberta_flops = (resident_bytes(*roberta) + roberta_step) / 2**20, step_flops(*roberta, x, masked)
        for variant in variants:
            if time.time() > args.deadline:
                skipped.append(f"{variant} T={length} {objective}")
                continue
            setting = f"T={length} {objective}"
            try:
                pair = {"roberta": roberta, "variant": step_model(variant, objective, s.timing_size, length, s.device)}
                times = timed_steps(pair, x, masked, warmup, steps, s.device)
                model, opt = pair.pop("variant")
                with attention_paths_taken() as paths:
                    step = step_peak_bytes(model, opt, x, masked, s.device)
                with forced_path(model, "sdpa"):
                    variant_flops = step_flops(model, opt, x, masked)
                variant_mib = (resident_bytes(model, opt) + step) / 2**20
                del model, opt
            except Exception as e:  # reported in its row, the others go on
                r.say(f"| {length} | {objective} | {x.size(0)} | {variant} | failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:200]} |")
                r.row(variant, setting, "error", f"{type(e).__name__}: {e}"[:300])
                r.status = "failed"
                continue
            finally:
                if s.device == "cuda":
                    torch.cuda.empty_cache()
            rm, vm = statistics.median(times["roberta"]), statistics.median(times["variant"])
            q1, q3 = pair_ratio_iqr(times["roberta"], times["variant"])
            ratio = ratios[(length, objective, variant)] = vm / rm
            bert_a = ratios.get((length, objective, "bert_a"))
            to_bert_a = ratio / bert_a if bert_a else None
            mlm = ratios.get((length, "mlm", variant)) if objective != "mlm" else None
            electra_to_mlm = ratio / mlm if mlm else None
            path = ", ".join(sorted(set(paths)))
            tokens = x.numel()
            r.say(f"| {length} | {objective} | {x.size(0)} | {variant} | {path} | {rm * 1e3:.1f} | {vm * 1e3:.1f} | "
                  f"{ratio:.3f} | {q1:.2f}-{q3:.2f} | {f'{to_bert_a:.3f}' if to_bert_a else 'n/a'} | "
                  f"{f'{electra_to_mlm:.3f}' if electra_to_mlm else ''} | {tokens / vm:,.0f} | {mfu(roberta_flops, rm)} | "
                  f"{mfu(variant_flops, vm)} | {variant_flops / roberta_flops:.3f} | {roberta_mib:,.0f} | {variant_mib:,.0f} |")
            for metric, value in (("batch", x.size(0)), ("attention_path", path), ("roberta_ms", rm * 1e3),
                                  ("variant_ms", vm * 1e3), ("time_ratio", ratio), ("pair_ratio_q1", q1),
                                  ("pair_ratio_q3", q3), ("ratio_to_bert_a", to_bert_a),
                                  ("electra_to_mlm", electra_to_mlm),
                                  ("roberta_tokens_per_s", tokens / rm), ("variant_tokens_per_s", tokens / vm),
                                  ("roberta_flops", roberta_flops), ("variant_flops", variant_flops),
                                  ("roberta_mfu", roberta_flops / rm / (peak * 1e12) if peak else None),
                                  ("variant_mfu", variant_flops / vm / (peak * 1e12) if peak else None),
                                  ("roberta_peak_mib", roberta_mib), ("variant_peak_mib", variant_mib)):
                if value is not None:
                    r.row(variant, setting, metric, value)
            r.save()
        del roberta
        if s.device == "cuda":
            torch.cuda.empty_cache()
    if skipped:
        r.fail(f"time budget reached; not run: {', '.join(skipped)}")


# --- the driver: sections in child processes, the report after each ---------------------------------------------


RUNNERS = {"environment": section_environment, "cuda_tests": section_cuda_tests, "sdpa": section_sdpa,
           "attention": section_attention, "train": section_train, "throughput": section_throughput,
           "sync": section_sync, "timing": section_timing}


def result_path(out: Path, section: str) -> Path:
    """Where a section's child saves its result as it goes (the driver reads it, then removes it)."""
    return out / f".{section}.json"


def run_section(args) -> None:
    """The child: its sections (``--section a,b``) one after another, each result saved as it goes."""
    import logging

    for name in ("tupe_plugin", "filelock", "fairseq"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import bench_train_step

    s = settings(args.dry_run, args.quick)
    bench_train_step.VOCAB = s.step_vocab  # the project's 32,000 words; the dry run's tiny models 1,000 (5x faster)
    for section in args.section.split(","):
        r = Result(result_path(Path(args.out), section), section)
        r.save()
        try:
            RUNNERS[section](r, s, args)
        except Exception:
            r.fail("\n\n```\n" + traceback.format_exc()[-3000:] + "\n```")
        r.ended = True
        r.save()


def install(args) -> Tuple[bool, str]:
    """The wheels of ``--wheels`` into ``--site`` (bench/gpu_wheels.py install); (ok, what it said)."""
    if args.no_install or args.wheels is None:
        return True, "nothing installed: this environment is used as it is (" + (
            "--no-install)" if args.no_install else "a dry run without --wheels)")
    wheels = Path(args.wheels)
    if not wheels.is_dir():
        return False, f"no wheel folder {wheels}: run `make gpu-wheels` where there is network, carry it over"
    p = subprocess.run([sys.executable, str(ROOT / "bench/gpu_wheels.py"), "install", "--dir", str(wheels),
                        "--target", str(args.site)], capture_output=True, text=True, cwd=ROOT)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def write_report(out: Path, header: List[str], done: Dict[str, dict], seconds: Dict[str, float]) -> None:
    """report.md and gpu_check.csv in ``out``, each written to a temp name and renamed."""
    lines = header + ["", "| section | status | seconds |", "|---|---|---:|"]
    lines += [f"| {name} | {done[name]['status'] if name in done else 'not run'} | {seconds.get(name, 0):.0f} |"
              for name in SECTIONS]
    for name in SECTIONS:
        if name in done:
            lines += ["", f"## {name}", "", *done[name]["lines"]]
    tmp = out / ".report.md.tmp"
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out / "report.md")
    tmp = out / ".gpu_check.csv.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["section", "subject", "setting", "metric", "value"])
        for name in SECTIONS:
            for row in done.get(name, {}).get("rows", []):
                w.writerow([name, *row])
    tmp.replace(out / "gpu_check.csv")


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + (args.budget_s or (DRY_RUN_BUDGET_S if args.dry_run else QUICK_BUDGET_S if args.quick else 540))
    header = [f"# GPU check{' (quick)' if args.quick else ''}{' (dry run on CPU)' if args.dry_run else ''}", "",
              f"`{' '.join(sys.argv)}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
              f"{card_name('cuda' if not args.dry_run else 'cpu')}"]
    done: Dict[str, dict] = {}
    seconds: Dict[str, float] = {}
    ok, said = install(args)
    log = out / "install.log"
    log.write_text(said + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(Path(args.site).resolve()), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    if args.dry_run:  # one thread per process: on a shared CPU, idle OpenMP threads spin and cost 3-4x the CPU time
        env.setdefault("OMP_NUM_THREADS", "1")
    # A section per child process, with its own time limit; a dry run (the test of this driver on CPU) runs them
    # all in one child: the same code per section, seven process starts (torch, fairseq) fewer.
    groups = [list(args.sections)] if args.dry_run and not args.process_per_section else [[n] for n in args.sections]
    for group in groups:
        t0 = time.time()
        per_section = DRY_RUN_LIMIT_S if args.dry_run else max(SECTION_LIMIT_S[n] for n in group)
        limit = min(per_section * len(group), deadline - t0 - 15)
        if limit < 20:
            for name in group:
                done[name] = {"status": "failed", "lines": ["**failed**: not run, the time budget was spent"], "rows": []}
            write_report(out, header, done, seconds)
            continue
        for name in group:
            result_path(out, name).unlink(missing_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--section", ",".join(group), "--out", str(out),
               "--deadline", str(t0 + limit - 20), "--install-log", str(log),
               *(["--variants", *args.variants] if args.variants else [])] + (["--dry-run"] if args.dry_run else [])
        cmd += ["--quick"] if args.quick else []
        cmd += [f"--{k}={v}" for k, v in (("peak-tflops", args.peak_tflops), ("steps", args.steps),
                                          ("warmup", args.warmup)) if v]
        try:
            interpreted = args.dry_run and "attention" in group  # Triton's interpreter on CPU, set before triton loads
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit,
                               env=dict(env, TRITON_INTERPRET="1") if interpreted else env)
            crash = f"exit status {p.returncode}: {p.stderr[-2500:]}" if p.returncode else ""
        except subprocess.TimeoutExpired as e:
            crash = f"stopped at its time limit ({limit:.0f} s): {(e.stderr or b'')[-1500:].decode(errors='replace')}"
        for name in group:
            try:
                done[name] = json.loads(result_path(out, name).read_text(encoding="utf-8"))
                result_path(out, name).unlink()
            except (OSError, ValueError):
                done[name] = {"status": "failed", "lines": [], "rows": [], "ended": False}
            seconds[name] = done[name].get("seconds", time.time() - t0) if len(group) > 1 else time.time() - t0
            if crash and not done[name].get("ended"):  # the section the process died in, and those it never began
                done[name]["status"] = "failed"
                done[name]["lines"].append(f"\n**failed**: the section's process {crash.strip()}")
            if name == "environment" and not ok:
                done[name]["status"] = "failed"
                done[name]["lines"].insert(0, "**failed**: the install from the wheel folder (install.log)\n")
            write_report(out, header, done, seconds)
            print(f"gpu-check: {name}: {done[name]['status']} ({seconds[name]:.0f} s)", flush=True)
    failed = [n for n in args.sections if done.get(n, {}).get("status") != "ok"]
    print("\n" + (out / "report.md").read_text(encoding="utf-8"), flush=True)  # also in the command's output
    print(f"gpu-check: report in {out / 'report.md'}, CSV in {out / 'gpu_check.csv'}; "
          + (f"failed: {', '.join(failed)}" if failed else "every section passed"), flush=True)
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", required=True, help="folder for report.md and gpu_check.csv (created)")
    ap.add_argument("--dry-run", action="store_true", help="the same sections on CPU at tiny size")
    ap.add_argument("--wheels", help="the wheel folder of make gpu-wheels (default .gpu-wheels; a dry run uses "
                    "this environment unless given)")
    ap.add_argument("--site", default=str(ROOT / ".gpu-site"), help="where its wheels are installed")
    ap.add_argument("--no-install", action="store_true",
                    help="use this environment as it is (a GPU machine where the project is installed)")
    ap.add_argument("--quick", action="store_true",
                    help=f"the short check (make gpu-check QUICK=1): sections {' '.join(QUICK_SECTIONS)}, T=512 with "
                    f"training's padding, {QUICK_BUDGET_S} s (the module docstring)")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS, help="default: all (--quick: its four)")
    ap.add_argument("--variants", nargs="+", default=[], metavar="VARIANT", help="registry names (default: all)")
    ap.add_argument("--budget-s", type=float, help=f"the whole check's time (default 540; dry run {DRY_RUN_BUDGET_S})")
    ap.add_argument("--peak-tflops", type=float, help="the card's peak dense bf16 TFLOP/s, if its name is not known")
    ap.add_argument("--steps", type=int, help="timed steps per model (default 10, dry run 2)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per model (default 3, dry run 1)")
    ap.add_argument("--process-per-section", action="store_true",
                    help="a dry run's sections each in its own process, as on a GPU (default: one process for all)")
    for hidden in ("--section", "--install-log"):  # the child's
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=float("inf"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sections = args.sections or list(QUICK_SECTIONS if args.quick else SECTIONS)
    if args.wheels is None and not args.dry_run:
        args.wheels = str(ROOT / ".gpu-wheels")
    if args.section:  # the child, where fairseq and the plugin can be imported
        from tupe_plugin.positional.registry import VARIANTS

        unknown = sorted(set(args.variants) - set(VARIANTS))
        if unknown:
            ap.error(f"--variants: unknown {unknown}; registered: {' '.join(VARIANTS)}")
        args.variants = args.variants or list(VARIANTS)
        run_section(args)
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__} sees none); run it on a GPU machine, or "
              "add --dry-run for the CPU rehearsal", file=sys.stderr)
        return 1
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
