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
- ``train``: a short real pre-training of ``tupe_r_base`` (``--user-dir tupe_plugin``) on generated data, in
  fp16 through ``fairseq-train --fp16`` and in bf16 through ``fairseq-hydra-train`` (``common.bf16=true``:
  fairseq 0.12's command line turns ``--bf16`` into ``--tpu``): the loss falls, overflow skips are counted.
- ``timing``: one train step of every variant against fairseq's ``roberta`` of the same size (base, T=128 and
  512, bf16 weights), in ``bench/bench_train_step.py``'s alternation, with the per-pair ratios, tokens/s, model
  FLOPs utilisation (matrix FLOPs per second over the card's peak dense bf16 rate) and peak memory. It stops
  at the time budget and reports the rows it did not reach.

On a machine without CUDA it says so in one line and exits 1. ``--dry-run`` runs the same sections on CPU at
tiny size (fairseq's fp16 and bf16 optimizers need CUDA, so the dry training runs are fp32); tests/test_gpu_check.py
runs it. Exit status: 0 when every section passed, 1 otherwise, 2 for usage errors.

    python bench/gpu_check.py --out $OUT                 # on the GPU machine (make gpu-check OUT=...)
    python bench/gpu_check.py --out /tmp/dry --dry-run   # the CPU rehearsal
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("environment", "cuda_tests", "sdpa", "train", "timing")
# Seconds each section may take at most on the GPU (the whole check stays under --budget-s).
SECTION_LIMIT_S = {"environment": 90, "cuda_tests": 120, "sdpa": 150, "train": 150, "timing": 420}
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
    timing_size: str
    lengths: Tuple[int, ...]
    tokens: int
    warmup: int
    steps: int


def settings(dry_run: bool) -> Settings:
    if dry_run:
        return Settings("cpu", "tiny", 21, 2, "tupe_r_tiny", (("fp32", "cli"), ("fp32", "hydra")), 16, 64, 10, "3e-3", 2,
                        "tiny", (16, 32), 256, 1, 2)
    return Settings("cuda", "base", 100, 2, "tupe_r_base", (("fp16", "cli"), ("bf16", "hydra")), 32, 128, 60, "3e-4", 10,
                    "base", (128, 512), 16384, 3, 10)


# --- the result of a section: markdown, CSV rows, status; saved after every change ----------------------


class Result:
    """What one section found, written to ``path`` as JSON after every change (a section killed at its time
    limit still leaves what it had measured)."""

    def __init__(self, path: Path, section: str):
        self.path, self.section = path, section
        self.status, self.lines, self.rows = "ok", [], []  # rows: (subject, setting, metric, value)

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
        tmp.write_text(json.dumps({"status": self.status, "lines": self.lines, "rows": self.rows}), encoding="utf-8")
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
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=SECTION_LIMIT_S["cuda_tests"] - 10)
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
                               timeout=SECTION_LIMIT_S["train"] // 2)
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


# --- timing against RoBERTa --------------------------------------------------------------------------------------


def section_timing(r: Result, s: Settings, args) -> None:
    from bench_train_step import (build, make_batch, pair_ratio_iqr, resident_bytes, step_flops, step_peak_bytes,
                                  timed_steps)

    name = card_name(s.device)
    peak = peak_tflops(name, args.peak_tflops)
    r.say(f"{s.timing_size} size, bf16 weights (as fairseq's bf16 training converts the model; Adam here keeps no fp32 master "
          f"copy), {s.tokens} tokens per step, training mode with RoBERTa's dropouts; {args.warmup or s.warmup} "
          f"warm-up and {args.steps or s.steps} timed steps per model, alternating RoBERTa / variant. MFU = matrix "
          f"FLOPs of a step (torch's FlopCounterMode, forward + backward) / median step time / peak "
          + (f"{peak:g} TFLOP/s dense bf16 ({name})" if peak else f"unknown for {name}: no MFU (give --peak-tflops)")
          + ".\n")
    r.say("| T | batch | variant | RoBERTa ms | variant ms | time ratio | pair ratios (IQR) | RoBERTa tokens/s | "
          "variant tokens/s | RoBERTa MFU | variant MFU | FLOP ratio | RoBERTa peak MiB | variant peak MiB |")
    r.say("|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    warmup, steps, dtype = args.warmup or s.warmup, args.steps or s.steps, torch.bfloat16

    def built(arch: str, length: int):
        model = build(arch, s.timing_size, length, s.device).to(dtype)
        return model, torch.optim.Adam(model.parameters(), lr=1e-4)

    def mfu(flops: int, seconds: float) -> str:
        return f"{flops / seconds / (peak * 1e12):.1%}" if peak else "n/a"

    skipped = []
    for length in s.lengths:
        x, masked = make_batch(s.tokens, length, s.device)
        roberta = built("roberta_base", length)
        roberta_step = step_peak_bytes(*roberta, x, masked, s.device)
        roberta_mib, roberta_flops = (resident_bytes(*roberta) + roberta_step) / 2**20, step_flops(*roberta, x, masked)
        for variant in args.variants:
            if time.time() > args.deadline:
                skipped.append(f"{variant} T={length}")
                continue
            try:
                pair = {"roberta": roberta, "variant": built(f"{variant}_{s.timing_size}", length)}
                times = timed_steps(pair, x, masked, warmup, steps, s.device)
                model, opt = pair.pop("variant")
                step = step_peak_bytes(model, opt, x, masked, s.device)
                variant_mib, variant_flops = (resident_bytes(model, opt) + step) / 2**20, step_flops(model, opt, x, masked)
                del model, opt
            except Exception as e:  # reported in its row, the others go on
                r.say(f"| {length} | {x.size(0)} | {variant} | failed: {type(e).__name__}: {str(e).splitlines()[0][:200]} |")
                r.row(variant, f"T={length}", "error", f"{type(e).__name__}: {e}"[:300])
                r.status = "failed"
                continue
            finally:
                if s.device == "cuda":
                    torch.cuda.empty_cache()
            rm, vm = statistics.median(times["roberta"]), statistics.median(times["variant"])
            q1, q3 = pair_ratio_iqr(times["roberta"], times["variant"])
            tokens = x.numel()
            r.say(f"| {length} | {x.size(0)} | {variant} | {rm * 1e3:.1f} | {vm * 1e3:.1f} | {vm / rm:.3f} | "
                  f"{q1:.2f}-{q3:.2f} | {tokens / rm:,.0f} | {tokens / vm:,.0f} | {mfu(roberta_flops, rm)} | "
                  f"{mfu(variant_flops, vm)} | {variant_flops / roberta_flops:.3f} | {roberta_mib:,.0f} | {variant_mib:,.0f} |")
            for metric, value in (("batch", x.size(0)), ("roberta_ms", rm * 1e3), ("variant_ms", vm * 1e3),
                                  ("time_ratio", vm / rm), ("pair_ratio_q1", q1), ("pair_ratio_q3", q3),
                                  ("roberta_tokens_per_s", tokens / rm), ("variant_tokens_per_s", tokens / vm),
                                  ("roberta_flops", roberta_flops), ("variant_flops", variant_flops),
                                  ("roberta_mfu", roberta_flops / rm / (peak * 1e12) if peak else ""),
                                  ("variant_mfu", variant_flops / vm / (peak * 1e12) if peak else ""),
                                  ("roberta_peak_mib", roberta_mib), ("variant_peak_mib", variant_mib)):
                r.row(variant, f"T={length}", metric, value)
            r.save()
        del roberta
    if skipped:
        r.fail(f"time budget reached; not run: {', '.join(skipped)}")


# --- the driver: sections in child processes, the report after each ---------------------------------------------


RUNNERS = {"environment": section_environment, "cuda_tests": section_cuda_tests, "sdpa": section_sdpa,
           "train": section_train, "timing": section_timing}


def run_section(args) -> None:
    """The child: one section, its result saved to ``--result`` as it goes."""
    import logging

    for name in ("tupe_plugin", "filelock", "fairseq"):
        logging.getLogger(name).setLevel(logging.WARNING)
    r = Result(Path(args.result), args.section)
    s = settings(args.dry_run)
    r.save()
    try:
        RUNNERS[args.section](r, s, args)
    except Exception:
        r.fail("\n\n```\n" + traceback.format_exc()[-3000:] + "\n```")
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
    deadline = start + args.budget_s
    header = [f"# GPU check{' (dry run on CPU)' if args.dry_run else ''}", "",
              f"`{' '.join(sys.argv)}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
              f"{card_name('cuda' if not args.dry_run else 'cpu')}"]
    done: Dict[str, dict] = {}
    seconds: Dict[str, float] = {}
    ok, said = install(args)
    log = out / "install.log"
    log.write_text(said + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(Path(args.site).resolve()), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    for name in args.sections:
        t0 = time.time()
        limit = min(SECTION_LIMIT_S[name], deadline - t0 - 15)
        result = out / f".{name}.json"
        if limit < 20:
            done[name] = {"status": "failed", "lines": ["**failed**: not run, the time budget was spent"], "rows": []}
            write_report(out, header, done, seconds)
            continue
        cmd = [sys.executable, str(Path(__file__).resolve()), "--section", name, "--result", str(result),
               "--out", str(out), "--deadline", str(t0 + limit - 20), "--install-log", str(log),
               *(["--variants", *args.variants] if args.variants else [])] + (["--dry-run"] if args.dry_run else [])
        cmd += [f"--{k}={v}" for k, v in (("peak-tflops", args.peak_tflops), ("steps", args.steps),
                                          ("warmup", args.warmup)) if v]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
            crash = f"exit status {p.returncode}: {p.stderr[-2500:]}" if p.returncode else ""
        except subprocess.TimeoutExpired as e:
            crash = f"stopped at its time limit ({limit:.0f} s): {(e.stderr or b'')[-1500:].decode(errors='replace')}"
        seconds[name] = time.time() - t0
        try:
            done[name] = json.loads(result.read_text(encoding="utf-8"))
            result.unlink()
        except (OSError, ValueError):
            done[name] = {"status": "failed", "lines": [], "rows": []}
        if crash:
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
    ap.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    ap.add_argument("--variants", nargs="+", default=[], metavar="VARIANT", help="registry names (default: all)")
    ap.add_argument("--budget-s", type=float, default=540, help="the whole check's time (default 540)")
    ap.add_argument("--peak-tflops", type=float, help="the card's peak dense bf16 TFLOP/s, if its name is not known")
    ap.add_argument("--steps", type=int, help="timed steps per model (default 10, dry run 2)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per model (default 3, dry run 1)")
    for hidden in ("--section", "--result", "--install-log"):  # the child's
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=float("inf"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
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
