"""Train-step time and peak memory of every positional variant against fairseq's own ``roberta`` of the same size.

For every size, length T, attention path (``--attention``) and variant (default: the whole registry,
``tupe_core.registry.VARIANTS``), the variant's model (arch ``<variant>_<size>``) and fairseq's
``roberta_base`` at the same size are built in this process with the same seed and given the same batch:
``--tokens // T`` sequences of T tokens (equal tokens per step at every length), 15% of them masked. One step
is forward, masked-LM loss, backward and an Adam update, in training mode with RoBERTa's dropouts (attention
dropout 0.1). The two models step alternately (RoBERTa, variant, RoBERTa, ...), so both see the same machine
state; after ``--warmup`` steps each, ``--steps`` steps each are timed. The table gives the median with the
min-max spread, the ratio variant / RoBERTa, the interquartile range of the per-pair ratios (step i of the
variant / step i of RoBERTa: the noise of the ratio), the time per token, and the ratio of the matrix-product
FLOPs of one step (``torch.utils.flop_counter``: what a variant's math adds, free of timing noise).

On CPU the C library's allocator is told to keep the memory it frees (``keep_freed_memory``) unless
``--system-malloc`` is given: by default glibc hands large freed blocks back to the OS and every step faults them
in again, which measured 0.9 s of a 6.6 s RoBERTa step at base size, T=512, outside any operator, and more for a
model that allocates more, so the time ratio mixed the C allocator into the models' cost. GPUs (PyTorch's caching
allocator) and CPU runs with jemalloc or tcmalloc do not pay it.

Peak memory of a step = the model's resident bytes (parameters and Adam state) + the highest amount of
memory allocated during one step above what was allocated before it (activations, gradients, temporaries).
On CUDA the step part is ``torch.cuda.max_memory_allocated`` minus ``memory_allocated`` before the step. On
CPU it is computed from ``torch.profiler``'s allocation events (``profile_memory=True``): a running sum of
the allocations and frees of torch's CPU allocator in time order, whose maximum is the step's peak. Both
count torch's own allocations only and are deterministic; a process's RSS is not (it depends on the C
allocator's caching and on the interpreter). "KiB/token" is that step part divided by the tokens of the step.

    python bench/bench_train_step.py                          # every variant, tiny and base, T=128..1024
    python bench/bench_train_step.py --variants tupe_r alibi --sizes base --lengths 128 512 --json out.json
    python bench/bench_train_step.py --variants tupe_r --attention auto sdpa explicit   # compare the paths
    python bench/bench_train_step.py --variants tupe_r --lengths 512 --profile          # where the time goes
    python bench/bench_train_step.py --variants tupe_r --compile      # also torch.compile'd encoder layers
    python bench/bench_train_step.py --variants bert_a tupe_r --objective electra --sizes base --lengths 128 512

``--objective electra``: the variant's model is ELECTRA's generator + discriminator of that arch
(tupe_plugin/models/electra.py, generator at ELECTRA's default size) and its step is ELECTRA's (generator
MLM, sampling, discriminator, ``--criterion electra``'s loss), against the same RoBERTa MLM step.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import logging
import platform
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from tupe_tools.commands import at_least

VOCAB = 32000  # the size of the project's sentencepiece vocabulary


@dataclass
class Row:
    """One line of the table (and of ``--json``): a variant against RoBERTa at one size, length and path."""

    size: str
    length: int
    batch: int
    variant: str
    attention: str  # the --tupe-attention value, and for auto the path it takes in training
    compiled: bool = False
    objective: str = "mlm"  # the variant's step: mlm, or electra (generator + discriminator)
    roberta_s: List[float] = field(default_factory=list)  # seconds of each timed step
    variant_s: List[float] = field(default_factory=list)
    roberta_bytes: int = 0  # resident + step peak
    variant_bytes: int = 0
    roberta_step_bytes: int = 0  # step peak above what was allocated before the step
    variant_step_bytes: int = 0
    roberta_flops: int = 0  # matrix-product FLOPs of one step (forward + backward), torch's FlopCounterMode
    variant_flops: int = 0
    compile_max_diff: Optional[float] = None  # compiled vs eager encoder output (eval), same weights
    eager_s: List[float] = field(default_factory=list)  # compiled rows: the eager twin's steps, same alternation
    error: str = ""

    @property
    def tokens(self) -> int:
        return self.batch * self.length

    def summary(self) -> Dict[str, float]:
        r, v = statistics.median(self.roberta_s), statistics.median(self.variant_s)
        q1, q3 = pair_ratio_iqr(self.roberta_s, self.variant_s)
        return {"roberta_median_s": r, "variant_median_s": v, "time_ratio": v / r,
                "pair_ratio_q1": q1, "pair_ratio_q3": q3, "flop_ratio": self.variant_flops / self.roberta_flops,
                "mem_ratio": self.variant_bytes / self.roberta_bytes}


def pair_ratio_iqr(base: List[float], other: List[float]) -> Tuple[float, float]:
    """Interquartile range of the per-pair ratios ``other[i] / base[i]`` (steps taken in one alternation)."""
    pairs = [o / b for b, o in zip(base, other)]
    if len(pairs) < 2:
        return pairs[0], pairs[0]
    q1, _, q3 = statistics.quantiles(pairs, n=4)
    return q1, q3


def build(arch: str, size: str, length: int, device: str, **overrides):
    """A model of ``arch`` at ``size`` (tupe_plugin's SIZES, also for RoBERTa; ``overrides`` win) for inputs of
    ``length`` tokens."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from tupe_plugin.build_task import DictionaryTask, numbered_dictionary
    from tupe_core.facts import SIZES

    args = argparse.Namespace(arch=arch, max_positions=length, tokens_per_sample=length, **{**SIZES[size].args(), **overrides})
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    task = DictionaryTask(numbered_dictionary(VOCAB), length)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task).to(device).train()


def keep_freed_memory() -> str:
    """Make glibc keep freed memory for reuse (no trimming, no mmap for large blocks); returns what was done."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
        ok = libc.mallopt(M_TRIM_THRESHOLD, 2**30) == 1 and libc.mallopt(M_MMAP_THRESHOLD, 2**30) == 1
    except (OSError, AttributeError, TypeError):
        ok = False
    return "freed memory kept (glibc mallopt)" if ok else f"system malloc (mallopt unavailable in {name})"


def add_malloc_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--system-malloc", action="store_true",
                    help="CPU: leave glibc's allocator as it is (it returns freed memory to the OS; module docstring)")


def malloc_setting(args: argparse.Namespace) -> str:
    """Applies the allocator setting of ``--system-malloc`` / ``--device`` and says which one is in force."""
    return "system malloc" if args.system_malloc or args.device != "cpu" else keep_freed_memory()


def make_batch(tokens: int, length: int, device: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """``tokens // length`` (at least 1) sequences of ``length`` tokens starting with <s>, 15% masked."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, VOCAB, (max(1, tokens // length), length), generator=g)
    x[:, 0] = 0
    masked = torch.rand(x.shape, generator=g) < 0.15
    masked[:, 1] = True  # at least one masked token per sequence
    return x.to(device), masked.to(device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


_ELECTRA_INPUTS: Dict[Tuple[int, int], tuple] = {}  # (id(x), id(masked)) -> (criterion, sample): made once


def train_step(model, opt, x: torch.Tensor, masked: torch.Tensor) -> None:
    if hasattr(model, "generator"):  # --objective electra: the plugin's criterion, normalised as fairseq does
        key = (id(x), id(masked))
        if key not in _ELECTRA_INPUTS:  # the batch as the task's collater makes it, outside the timed steps
            _ELECTRA_INPUTS[key] = (electra_criterion(x.size(1)), electra_sample(x, masked))
        criterion, sample = _ELECTRA_INPUTS[key]
        loss, sample_size, _ = criterion(model, sample)
        (loss / sample_size).backward()
    else:
        logits, _ = model(x, masked_tokens=masked)
        F.cross_entropy(logits.float(), x[masked]).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def electra_criterion(length: int):
    from tupe_plugin.build_task import DictionaryTask, numbered_dictionary
    from tupe_plugin.criterions.electra import ElectraCriterion

    return ElectraCriterion(DictionaryTask(numbered_dictionary(VOCAB), length))


def electra_sample(x: torch.Tensor, masked: torch.Tensor) -> dict:
    """The electra task's batch: the masked positions' originals as targets (pad = 1 elsewhere)."""
    return {"net_input": {"src_tokens": x}, "target": torch.where(masked, x, torch.ones_like(x)), "ntokens": x.numel(),
            "masked_positions": masked.flatten().nonzero().squeeze(1)}  # as the electra task's collater: no wait


def timed_steps(pair: Dict[str, tuple], x, masked, warmup: int, steps: int, device: str) -> Dict[str, List[float]]:
    """Alternate one step of each model; the seconds of each step after ``warmup``."""
    times: Dict[str, List[float]] = {name: [] for name in pair}
    for i in range(warmup + steps):
        for name, (model, opt) in pair.items():
            sync(device)
            t0 = time.perf_counter()
            train_step(model, opt, x, masked)
            sync(device)
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times


def resident_bytes(model, opt) -> int:
    """Parameters and optimizer state (what stays allocated between steps; gradients are set to None)."""
    tensors = list(model.parameters()) + [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def step_peak_bytes(model, opt, x, masked, device: str) -> int:
    """The peak of one step above the memory allocated before it (module docstring)."""
    if device.startswith("cuda"):
        sync(device)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        train_step(model, opt, x, masked)
        sync(device)
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(model, opt, x, masked)
    # the raw event list: prof.events() folds the allocations made inside an operator into that operator
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    return peak


def step_flops(model, opt, x, masked) -> int:
    """Matrix-product FLOPs of one train step (mm, bmm, addmm, attention, ... forward and backward), counted by
    ``torch.utils.flop_counter.FlopCounterMode``: the work a variant adds, free of timing noise (elementwise
    ops, gathers and memory traffic are not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        train_step(model, opt, x, masked)
    return counter.get_total_flops()


def operator_times(model, opt, x, masked, steps: int, device: str) -> Dict[str, float]:
    """Self time per step of every operator (seconds), summed over ``steps`` profiled steps: CPU self time,
    or device self time on CUDA."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            train_step(model, opt, x, masked)
        sync(device)
    attr = "self_device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    return {e.key: getattr(e, attr) / 1e6 / steps for e in prof.key_averages() if getattr(e, attr) > 0}


def print_profile(row: Row, roberta: Dict[str, float], variant: Dict[str, float], top: int) -> None:
    """The top operators of both models side by side: ms per step and share of the step's total self time."""
    total_r, total_v = sum(roberta.values()), sum(variant.values())
    names = sorted(roberta, key=roberta.get, reverse=True)[:top] + sorted(variant, key=variant.get, reverse=True)[:top]
    names = sorted(set(names), key=lambda n: -max(roberta.get(n, 0) / total_r, variant.get(n, 0) / total_v))
    print(f"\nProfile, {row.size} T={row.length} {row.variant} ({row.attention}{', compiled' if row.compiled else ''}): "
          f"self time per step, RoBERTa {total_r * 1e3:.1f} ms, {row.variant} {total_v * 1e3:.1f} ms\n")
    print(f"| operator | RoBERTa ms | RoBERTa % | {row.variant} ms | {row.variant} % | difference ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in names:
        r, v = roberta.get(n, 0.0), variant.get(n, 0.0)
        print(f"| `{n}` | {r * 1e3:.2f} | {100 * r / total_r:.1f} | {v * 1e3:.2f} | {100 * v / total_v:.1f} | "
              f"{(v - r) * 1e3:+.2f} |")
    print(flush=True)


def compile_layers(model) -> None:
    """Every encoder layer ``torch.compile``'d in place, as ``--compile-layers`` does in training (an ELECTRA
    model's generator too)."""
    from tupe_plugin.modules.encoder import TupeTransformerEncoder

    for encoder in [m for m in model.modules() if isinstance(m, TupeTransformerEncoder)]:
        encoder.compile_layers()


@torch.no_grad()
def max_output_diff(a, b, x: torch.Tensor) -> float:
    """Largest difference of two models' encoder outputs on ``x`` in eval mode (dropout off)."""
    a.eval(), b.eval()
    try:
        return (a(x, features_only=True)[0] - b(x, features_only=True)[0]).abs().max().item()
    finally:
        a.train(), b.train()


TABLE_HEADER = (
    "| size | T | batch | variant | attention | RoBERTa ms/step (min-max) | variant ms/step (min-max) | time ratio "
    "| pair ratios (IQR) | FLOP ratio | RoBERTa µs/token | variant µs/token | RoBERTa MiB | variant MiB | memory ratio "
    "| RoBERTa KiB/token | variant KiB/token |\n|---|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def table_line(row: Row) -> str:
    attention = row.attention + (", compiled" if row.compiled else "")
    variant = row.variant + ("" if row.objective == "mlm" else f" ({row.objective})")
    if row.error:
        return f"| {row.size} | {row.length} | {row.batch} | {variant} | {attention} | failed: {row.error} |"
    s = row.summary()

    def ms(times: List[float]) -> str:
        return f"{statistics.median(times) * 1e3:.1f} ({min(times) * 1e3:.1f}-{max(times) * 1e3:.1f})"

    per_token = 1e6 / row.tokens
    return (
        f"| {row.size} | {row.length} | {row.batch} | {variant} | {attention} | {ms(row.roberta_s)} | "
        f"{ms(row.variant_s)} | {s['time_ratio']:.3f} | {s['pair_ratio_q1']:.2f}-{s['pair_ratio_q3']:.2f} | "
        f"{s['flop_ratio']:.3f} | {s['roberta_median_s'] * per_token:.1f} | "
        f"{s['variant_median_s'] * per_token:.1f} | {row.roberta_bytes / 2**20:.1f} | {row.variant_bytes / 2**20:.1f} | "
        f"{s['mem_ratio']:.3f} | {row.roberta_step_bytes / 1024 / row.tokens:.1f} | "
        f"{row.variant_step_bytes / 1024 / row.tokens:.1f} |"
    )


def with_objective(model, objective: str):
    """The model whose step ``objective`` takes: the MLM model itself, or ELECTRA around it as discriminator."""
    if objective == "mlm":
        return model
    from tupe_plugin.models.electra import ElectraModel

    device = next(model.parameters()).device
    torch.manual_seed(0)
    return ElectraModel.from_discriminator(model, 0).to(device).train()


def bench_variant(row: Row, roberta: tuple, x, masked, args, path: str) -> Tuple[Row, tuple]:
    """Time and measure one variant against the RoBERTa pair ``roberta`` (model, optimizer)."""
    arch = f"{row.variant}_{row.size}"
    model = with_objective(build(arch, row.size, row.length, args.device, tupe_attention=path), row.objective)
    pair = {"roberta": roberta, "variant": (model, torch.optim.Adam(model.parameters(), lr=1e-4))}
    if row.compiled:  # the eager twin (same weights) steps in the same alternation: compiled / eager directly
        eager = with_objective(build(arch, row.size, row.length, args.device, tupe_attention=path), row.objective)
        compile_layers(model)
        row.compile_max_diff = max_output_diff(model, eager, x)
        pair["eager"] = (eager, torch.optim.Adam(eager.parameters(), lr=1e-4))
    times = timed_steps(pair, x, masked, args.warmup, args.steps, args.device)
    if path == "auto":  # the path the first layer took in training on this device (a compiled layer records
        # none: its eager twin took the same)
        layer = (eager if row.compiled else model).encoder.sentence_encoder.layers[0]
        row.attention = "auto: " + layer.self_attn.last_path
    row.roberta_s, row.variant_s, row.eager_s = times["roberta"], times["variant"], times.get("eager", [])
    pair.pop("eager", None)
    model, opt = pair["variant"]
    row.variant_step_bytes = step_peak_bytes(model, opt, x, masked, args.device)
    row.variant_bytes = resident_bytes(model, opt) + row.variant_step_bytes
    row.variant_flops = step_flops(model, opt, x, masked)
    return row, (model, opt)


def bench_length(size: str, length: int, args, rows: List[Row], profiles: List[dict]) -> None:
    """Every variant, path (and compiled twin) at one size and length against one RoBERTa; appends to
    ``rows`` (printed as they come) and ``profiles``."""
    x, masked = make_batch(args.tokens, length, args.device)
    roberta_model = build("roberta_base", size, length, args.device)
    roberta = (roberta_model, torch.optim.Adam(roberta_model.parameters(), lr=1e-4))
    roberta_mem = None  # (total, step bytes, FLOPs): deterministic, measured once
    for variant in args.variants:
        for path in args.attention:
            for compiled in [False, True] if args.compile else [False]:
                row = Row(size, length, x.size(0), variant, path, compiled, args.objective)
                try:
                    row, pair = bench_variant(row, roberta, x, masked, args, path)
                except Exception as e:  # e.g. a compile failure: reported in its row, the others go on
                    row.error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
                    rows.append(row)
                    print(table_line(row), flush=True)
                    continue
                if roberta_mem is None:
                    step = step_peak_bytes(*roberta, x, masked, args.device)
                    roberta_mem = (resident_bytes(*roberta) + step, step, step_flops(*roberta, x, masked))
                row.roberta_bytes, row.roberta_step_bytes, row.roberta_flops = roberta_mem
                rows.append(row)
                print(table_line(row), flush=True)
                if args.profile:
                    profiles.append({"row": len(rows) - 1,
                                     "roberta_s": operator_times(*roberta, x, masked, args.profile_steps, args.device),
                                     "variant_s": operator_times(*pair, x, masked, args.profile_steps, args.device)})
                del pair


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    from tupe_core.facts import SIZES
    from tupe_core.registry import VARIANTS
    from tupe_core.attend import ATTENTION_PATHS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="VARIANT",
                    type=lambda name: name.replace("-", "_"),  # tupe-r, as pretrain.sh and the study write it, is tupe_r
                    help="registry names (default: all of them)")
    ap.add_argument("--sizes", nargs="+", default=["tiny", "base"], choices=list(SIZES))
    ap.add_argument("--lengths", nargs="+", type=at_least(1), default=[128, 256, 512, 1024])
    ap.add_argument("--tokens", type=at_least(1), default=2048, help="tokens per step: batch = tokens // T, at least 1")
    ap.add_argument("--steps", type=at_least(1), default=10, help="timed steps per model (after --warmup)")
    ap.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps per model first")
    ap.add_argument("--attention", nargs="+", default=["auto"], choices=list(ATTENTION_PATHS),
                    help="the variants' --tupe-attention values to run (RoBERTa is always fairseq's own)")
    ap.add_argument("--objective", choices=["mlm", "electra"], default="mlm",
                    help="the variants' step: mlm, or electra (generator + discriminator; the docstring); "
                         "RoBERTa always steps with MLM")
    ap.add_argument("--compile", action="store_true", help="also run every variant with torch.compile'd encoder layers")
    ap.add_argument("--profile", action="store_true", help="print the top operators of both models for every row")
    ap.add_argument("--top", type=int, default=15, help="operators per model in --profile")
    ap.add_argument("--profile-steps", type=int, default=3, help="profiled steps per model in --profile")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--json", metavar="PATH", help="write every row (with all step times) here")
    add_malloc_option(ap)
    args = ap.parse_args()
    for name in ("tupe_plugin", "filelock"):  # no "positional variant: ..." per model, no compile-cache locks
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    malloc = malloc_setting(args)

    meta = {"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]), "torch": torch.__version__,
            "device": args.device, "device_name": device_name(args.device), "threads": torch.get_num_threads(),
            "tokens_per_step": args.tokens, "objective": args.objective, "steps": args.steps, "warmup": args.warmup, "malloc": malloc}
    print(f"`{meta['command']}`\n\ntorch {meta['torch']}, device {args.device} ({meta['device_name']}), "
          f"{meta['threads']} threads, {malloc}, {args.tokens} tokens per step, median (min-max) of {args.steps} "
          f"alternating steps after {args.warmup} warm-up steps each\n", flush=True)
    print(TABLE_HEADER, flush=True)
    rows: List[Row] = []
    profiles: List[dict] = []
    for size in args.sizes:
        for length in args.lengths:
            bench_length(size, length, args, rows, profiles)

    for p in profiles:
        print_profile(rows[p["row"]], p["roberta_s"], p["variant_s"], args.top)
    for r in rows:
        if r.compiled and r.eager_s:
            q1, q3 = pair_ratio_iqr(r.eager_s, r.variant_s)
            print(f"\ncompiled / eager {r.variant} {r.size} T={r.length} (alternating with RoBERTa in one loop): "
                  f"median {statistics.median(r.variant_s) / statistics.median(r.eager_s):.3f}, pair ratios "
                  f"(IQR) {q1:.2f}-{q3:.2f}; encoder output (eval, same weights) largest difference "
                  f"{r.compile_max_diff:.2e}")
    if args.json:
        out = [dict(asdict(r), **(r.summary() if not r.error else {})) for r in rows]
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**meta, "rows": out, "profiles": profiles}, f, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
