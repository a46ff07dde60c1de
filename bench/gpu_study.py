"""``make gpu-study``: BERT-A against TUPE-R on one GPU machine without network, pre-training only, in one command
within ``--budget-s`` (540 s) from the start of Python to the report; a later call in the same study folder adds
seeds to it (docs/study.md, "The study on one GPU").

1. start-up: Python, torch and a CUDA device (without one it says so in one line and exits 1); the settings and the
   seeds of this call: the first ``--seeds`` (3) seed numbers from 1 up that the study folder has not finished for
   every model (a second call after seeds 1-3: seeds 4-6);
2. install: the carried wheels of ``make gpu-wheels`` into ``--site`` with this machine's python, offline, as
   ``make gpu-check`` does (bench/gpu_wheels.py): fairseq comes from there, torch stays the machine's;
3. data: the carried folder of ``make gpu-study-data`` (``--data``; bench/gpu_study_data.py): its manifest must hold
   the preset's prep settings; the prep's outputs are copied into OUT, so the study's prep stage is done;
4. pre-training: every model of this call's seeds at once on the one GPU, each its own ``python -m tupe_study --part
   pretrain I`` with data-loader workers sized to the machine's cores; their progress is printed with the time at
   which they would end;
5. the rest of the study: ``python -m tupe_study --lanes N --stages AFTER`` (``--after``: by default every stage after
   pre-training: locality, longer inputs, and fine-tuning only when TASKS names tasks), then the report over every
   seed so far, whose "Declared comparisons" test ``ENDPOINTS``;
6. the budget and the time: ``OUT/budget.md``, also appended to ``OUT/report.md``: the declared comparisons over all
   seeds so far, the seconds of each part, every call so far (``OUT/gpu_calls.tsv``), every pre-training's updates
   and tokens, and each model's validation loss against updates and GPU seconds (``OUT/loss_seconds.csv``,
   ``OUT/loss_seconds.png``).

The settings are the study's, from the environment as for ``study.sh``, with these defaults: ``VARIANTS=bert-a
tupe-r``, ``OBJECTIVES=mlm``, ``TASKS=none`` (no fine-tuning; ``TASKS=auto`` fine-tunes on the data's tasks),
``ENDPOINTS="final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"`` and ``EQUIVALENCE_BITS=0.05`` when both models are
in the study (``none`` otherwise), ``GENERATOR_SIZE_DIVISOR=4`` (for ``OBJECTIVES="mlm electra"``). The design
(VARIANTS, ENDPOINTS and the rest of the study's recorded settings) is recorded in ``OUT/settings.env`` by the first
call, before its first pre-training starts, and a later call that changes it is refused. The design is sequential
in its seeds: ``PRETRAIN_SEEDS`` of the environment is ignored (``--seeds``), and each call rewrites the recorded
``PRETRAIN_SEEDS`` line itself to the seeds so far (the finished ones and its own), under a comment line saying so;
every other recorded line stays as declared. The preset is the one the data was prepared for (gpu-9min; ``PRESET``
of the environment is ignored). A part still running when the budget
less ``--reserve-s`` (25 s) is spent is stopped, and the report is written from what finished (its "Missing parts"
name the rest; the next call redoes a stopped seed). ``--dry-run`` runs the same on CPU (``GPUS=0``) at the size
of the data's preset (the tests: ``tiny``). ``--report-to DIR`` copies the study folder into DIR without its
checkpoints, the carried data and any pre-training the budget stopped: the report, its tables and figures, the
budget, the logs, and what a later call needs to add seeds (``make gpu-study OUT=DIR`` on the next machine).
Exit status: 0 done; 1 a part failed or was stopped at the budget; 2 a usage error (nothing changed).

    python3 bench/gpu_study.py --out runs/gpu-study --report-to /back        # make gpu-study OUT=runs/gpu-study
    python3 bench/gpu_study.py --out /back                                    # a later loan: 3 more seeds
    python bench/gpu_study.py --out /tmp/dry --data /tmp/data --dry-run --seeds 2 --after none  # the CPU rehearsal
"""
# The schedule (which parts run in which order within the budget, the calls record, the copy sent back) is the
# study's: tupe_study/gpu_schedule.py. This file is the command and what it measures: each pre-training's tokens, the
# validation loss against GPU seconds, OUT/budget.md.
from __future__ import annotations

import os
import sys

# the GPU kit: the checkout is not installed there; on the path of this process (here) and of the study's processes
# (main(), not at import: a test that imports this module must not hand it on to its own children)
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, ROOT)
from tupe_study import gpu_schedule  # noqa: E402  # the first import: it starts the budget's clock (gpu_schedule.START)

import argparse  # noqa: E402
import csv  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Optional, Sequence, Tuple  # noqa: E402

from tupe_study.gpu_schedule import (AFTER_PRETRAINING, REPORT_RESERVE_S, SEEDS_PER_CALL, Call,  # noqa: E402
                                read_calls, train_log)
from tupe_study.settings import UsageError  # noqa: E402
from tupe_study.endpoint_report import endpoints_so_far  # noqa: E402
from tupe_common import fairseq_log  # noqa: E402
from tupe_common.errors import RESUME_RUNS, exit_main  # noqa: E402
from tupe_common.lock import folder_lock, hold  # noqa: E402


# ---- 6: the time: loss against updates and GPU seconds ---------------------------------------------------------


def log_times(log: Path) -> Tuple[Optional[float], Optional[float], Dict[int, Tuple[float, float]]]:
    """From a pre-training's fairseq log (its own clock, in seconds since the epoch): the start of its last
    fairseq-train (the configuration line), its last logged line, and {update: (validation loss, time)} of the
    validations that run logged. (None, None, {}) before fairseq has started."""
    start = last = None
    valid: Dict[int, Tuple[float, float]] = {}
    for line in fairseq_log.lines(log) if log.is_file() else ():
        t = fairseq_log.stamp(line)
        if t is None:
            continue
        last = t
        if fairseq_log.START in line:
            start, valid = t, {}  # a resumed run: its own validations from here
            continue
        stats = fairseq_log.stats_of(line)
        if stats is not None and stats.kind == "valid" and stats.update is not None and "loss" in stats.values:
            valid[stats.update] = (float(stats.values["loss"]), t)  # type: ignore[arg-type]
    return start, last, valid


def shared_seconds(spans: Sequence[Tuple[float, float]], own: Tuple[float, float], until: float) -> float:
    """GPU seconds of one process from its start to ``until``, on a GPU it shared with the processes of ``spans``
    (every process's (start, end), its own among them): each moment counts 1/n of a second, n the processes running
    then. A process alone on the GPU gets its wall seconds; k processes that run side by side from start to end get a
    k-th each. That is the share equal time-slicing gives, an estimate: it does not see which process's kernels
    took longer."""
    start, end = own
    until = min(max(until, start), end)
    cuts = sorted({start, until} | {x for span in spans for x in span if start < x < until})
    total = 0.0
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        total += (b - a) / max(1, sum(s <= mid < e for s, e in spans))
    return total


def loss_seconds(out: Path, models: Sequence[str]) -> List[Dict[str, object]]:
    """Every validation of every pre-training of ``models`` ("bert-a 1"): its update, loss, wall seconds since its
    fairseq-train started and GPU seconds (``shared_seconds`` over every pre-training of the study folder, so the
    ones that ran beside it in the same call count)."""
    found = {label: log_times(train_log(out, label)) for label in models}
    spans = [(s, e) for s, e, _ in (log_times(p) for p in sorted((out / "pretrain").glob("*/seed*/train.log")))
             if s is not None]
    rows = []
    for label, (start, end, valid) in found.items():
        if start is None:
            continue
        name, seed = label.rsplit(" ", 1)
        for update, (loss, t) in sorted(valid.items()):
            rows.append({"model": name, "seed": int(seed), "update": update, "valid_loss": loss,
                         "wall_s": t - start, "gpu_s": round(shared_seconds(spans, (start, end), t), 1)})
    return rows


def loss_seconds_text(rows: Sequence[Dict[str, object]]) -> List[str]:
    """The table of each model's mean validation loss over its seeds at each validation, beside the updates and the
    mean wall and GPU seconds it took."""
    if not rows:
        return ["No validation logged yet.", ""]
    models = list(dict.fromkeys(r["model"] for r in rows))
    updates = sorted({r["update"] for r in rows})
    L = ["| update | " + " | ".join(f"{m}: loss (bits) | {m}: GPU s (wall s) | {m}: seeds" for m in models) + " |",
         "|---:|" + "---:|---:|---:|" * len(models)]
    for u in updates:
        cells = []
        for m in models:
            here = [r for r in rows if r["model"] == m and r["update"] == u]
            if not here:
                cells.append("— | — | 0")
                continue
            cells.append(f"{statistics.mean(r['valid_loss'] for r in here):.4f} | "
                         f"{statistics.mean(r['gpu_s'] for r in here):.0f} "
                         f"({statistics.mean(r['wall_s'] for r in here):.0f}) | {len(here)}")
        L.append(f"| {u:,} | " + " | ".join(cells) + " |")
    return L + ["", "Means over the seeds that reached the update. Wall s: from the start of the pre-training's "
                "fairseq-train (its log's clock) to the validation's line; GPU s: the same time, each second divided by "
                "the number of pre-trainings running then (they shared one GPU; equal time-slicing assumed: an "
                "estimate, which does not see whose kernels took longer). Per seed: `loss_seconds.csv`; figure: "
                "`loss_seconds.png`.", ""]


def loss_seconds_figure(path: Path, rows: Sequence[Dict[str, object]]) -> None:
    """Validation loss against updates (left) and against GPU seconds (right): each seed a thin line, the model's
    mean over seeds a thick one; each model its own line style and marker (a grey print keeps them apart)."""
    from tupe_study.figure import _pyplot, variant_style
    from tupe_common.io import atomic_path

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11.7, 4.6), sharey=True)
    for i, m in enumerate(dict.fromkeys(r["model"] for r in rows)):
        style, marker = variant_style(i)
        mine = [r for r in rows if r["model"] == m]
        for ax, x in zip(axes, ("update", "gpu_s")):
            for seed in sorted({r["seed"] for r in mine}):
                pts = sorted((r[x], r["valid_loss"]) for r in mine if r["seed"] == seed)
                ax.plot(*zip(*pts), linestyle=style, color="0.55", linewidth=0.8)
            updates = sorted({r["update"] for r in mine})
            mean = [(statistics.mean(r[x] for r in mine if r["update"] == u),
                     statistics.mean(r["valid_loss"] for r in mine if r["update"] == u)) for u in updates]
            ax.plot(*zip(*mean), linestyle=style, marker=marker, color="black", linewidth=2,
                    label=f"{m} (mean of {len({r['seed'] for r in mine})} seeds)")
    axes[0].set_xlabel("updates")
    axes[1].set_xlabel("GPU seconds (estimate: each second / the pre-trainings running then)")
    axes[0].set_ylabel("validation MLM loss (bits)")
    axes[0].legend()
    for ax in axes:
        ax.grid(True, color="0.85")
    fig.suptitle("Validation loss against updates and against GPU seconds; thin lines: one pre-training seed each")
    fig.tight_layout()
    with atomic_path(str(path)) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def write_loss_seconds(out: Path, rows: Sequence[Dict[str, object]]) -> None:
    with open(out / "loss_seconds.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["model", "seed", "update", "valid_loss", "wall_s", "gpu_s"])
        w.writeheader()
        w.writerows(rows)
    if rows:
        loss_seconds_figure(out / "loss_seconds.png", rows)


# ---- 6: the budget ------------------------------------------------------------------------------------------------


def pretrain_facts(log: Path) -> Dict[str, float]:
    """From a pre-training's fairseq json log: updates, tokens (each epoch's mean tokens per update, fairseq's
    ``wpb``, times its updates) and the median of fairseq's own tokens per second over the logged intervals."""
    updates, tokens, wps = 0, 0.0, []
    for stats in fairseq_log.statistics(log) if log.is_file() else ():
        if stats.kind == "train_inner" and "wps" in stats.values:
            wps.append(float(stats.values["wps"]))  # type: ignore[arg-type]
        elif stats.kind == "train" and stats.update is not None:
            tokens += float(stats.values["wpb"]) * (stats.update - updates)  # type: ignore[arg-type]  # a resumed run starts from its checkpoint's count
            updates = stats.update
    return {"updates": updates, "tokens": tokens, "wps": statistics.median(wps) if wps else 0.0}


def timings(out: Path) -> Dict[Tuple[str, str], float]:
    """(stage, arguments) -> seconds, from OUT/timings.tsv (the last line of a part wins)."""
    from tupe_study.timings import part_times

    return {(t.stage, t.part): float(t.seconds) for t in part_times(str(out))}


def budget_text(call: Call, command: str, rows: Sequence[Dict[str, object]]) -> str:
    """``OUT/budget.md``: the declared comparisons so far, the call's time by part, every call on the study folder,
    every pre-training's updates and tokens, and ``rows`` (:func:`loss_seconds`) as a table."""
    budget, out, manifest, config, seeds, machine = (call.budget, call.out, call.manifest, call.config, call.seeds,
                                                      call.device)
    used = sum(p.seconds for p in budget.parts)
    verdict = ("**parts stopped at the budget** (below)" if budget.stopped else "within the budget"
               if used <= budget.budget_s else "**over the budget**")
    calls = read_calls(out)
    lines = ["## GPU study: the declared comparisons, the time (bench/gpu_study.py)", "",
             f"`{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}: call {len(calls)} on this "
             f"study folder, pre-training seed(s) {', '.join(map(str, seeds))}. **{used:.0f} s** of the "
             f"{budget.budget_s:.0f} s budget, {verdict}. Measured by the command's own clock, from Python's start; "
             "a machine's start and the copy of the files before it are not in it.", "",
             "### Declared comparisons so far", ""] + endpoints_so_far(str(out / "endpoints.csv"))
    lines += ["### This call's time", "", "| part | seconds | what |", "|---|---:|---|"]
    lines += [f"| {p.name} | {p.seconds:.0f} | {p.what} |" for p in budget.parts]
    lines += [f"| **total** | **{used:.0f}** | of {budget.budget_s:.0f} |", ""]
    for what in budget.stopped:
        lines.append(f"Stopped at the budget: {what}.")
    lines += ["", "### Every call on this study folder", "", "| call | UTC | machine | seeds | pre-trainings at once | "
              "data-loader workers each | seconds | exit |", "|---:|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {i} | {c['utc']} | {c['machine']} | {c['seeds']} | {c['at_once']} | {c['workers']} | {c['seconds']} | "
              f"{c['exit']} |" for i, c in enumerate(calls, 1)]
    mean_block = manifest.get("corpus", {}).get("mean_block_tokens") or 0
    planned = config.TOTAL_UPDATES * config.SENTENCES_PER_UPDATE * mean_block
    lines += ["", "### Pre-trainings", "", "| model | updates | tokens | passes over the corpus | part seconds | "
              "tokens/s over the part | fairseq's tokens/s (median) |", "|---|---:|---:|---:|---:|---:|---:|"]
    seconds = timings(out)
    corpus = manifest.get("corpus", {}).get("train_tokens") or 0
    for label in call.models:
        name, seed = label.rsplit(" ", 1)
        f = pretrain_facts(train_log(out, label))
        s = seconds.get(("pretrain", label), 0.0)
        lines.append(f"| {name} seed {seed} | {f['updates']:,} | {f['tokens']:,.0f} | "
                     f"{f['tokens'] / corpus if corpus else 0:.1f} | {s:.0f} | {f['tokens'] / s if s else 0:,.0f} | "
                     f"{f['wps']:,.0f} |")
    lines += ["", f"Tokens: fairseq's `wpb` (tokens of the update, padding excluded) summed over the updates; the "
              f"preset ({config.PRESET}: {config.TOTAL_UPDATES} updates x {config.SENTENCES_PER_UPDATE} blocks of "
              f"{mean_block} tokens on average) plans about {planned / 1e6:.1f}M per model.", "",
              "### Validation loss against updates and GPU seconds", ""] + loss_seconds_text(rows)
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", type=Path, required=True, help="the study's folder (created; holds the checkpoints; a "
                    "folder of an earlier call, or its --report-to copy, gets --seeds more seeds)")
    ap.add_argument("--data", type=Path, default=Path(ROOT) / ".gpu-study-data", help="the folder of make gpu-study-data")
    ap.add_argument("--seeds", type=int, default=SEEDS_PER_CALL, help="pre-training seeds this call adds, each for "
                    f"every model (default {SEEDS_PER_CALL}; the first call needs 2 or more for the declared tests)")
    ap.add_argument("--after", default=",".join(AFTER_PRETRAINING), help="the study's stages run after pre-training, "
                    f"comma-separated, or none (default {','.join(AFTER_PRETRAINING)}: fine-tuning has parts only "
                    "when TASKS names tasks)")
    ap.add_argument("--wheels", help="the wheel folder of make gpu-wheels (default .gpu-wheels; a dry run uses this "
                    "environment unless given)")
    ap.add_argument("--site", type=Path, default=Path(ROOT) / ".gpu-site", help="where its wheels are installed")
    ap.add_argument("--no-install", action="store_true", help="use this environment as it is (the project installed)")
    ap.add_argument("--budget-s", type=float, default=540, help="the whole command's seconds (default 540)")
    ap.add_argument("--reserve-s", type=float, default=REPORT_RESERVE_S, help="seconds kept at the end for the "
                    f"report when a part runs over: it is stopped then (default {REPORT_RESERVE_S})")
    ap.add_argument("--lanes", type=int, help="parts at once after pre-training (default: cores / 2, 2 to 8)")
    ap.add_argument("--pretrain-workers", type=int, help="data-loader workers of each pre-training (default: the "
                    "cores left beside the pre-trainings' main processes, shared among them, 1 to 4)")
    ap.add_argument("--report-to", type=Path, help="copy the study folder here without checkpoints and data (what "
                    "comes back from a borrowed machine, and what a later call continues)")
    ap.add_argument("--dry-run", action="store_true", help="the same on CPU, at the size of the data's preset")
    return ap.parse_args(argv)


def write_budget(call: Call, command: str) -> str:
    """What the call measured: ``OUT/loss_seconds.csv`` and ``.png``, then ``OUT/budget.md``, also appended to
    ``OUT/report.md``; its text."""
    rows = loss_seconds(call.out, call.models)
    write_loss_seconds(call.out, rows)
    text = budget_text(call, command, rows)
    (call.out / "budget.md").write_text(text, encoding="utf-8")
    if (call.out / "report.md").is_file():
        with open(call.out / "report.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return text


def install(args, out: Path) -> str:
    """The carried wheels into ``--site`` (bench/gpu_wheels.py install, as make gpu-check); what it said."""
    failed = 0
    if args.no_install or args.wheels is None:
        said = "nothing installed: this environment is used as it is (" + (
            "--no-install)" if args.no_install else "a dry run without --wheels)")
    else:
        wheels = Path(args.wheels).resolve()  # the install runs in the repository; relative paths are the caller's
        if not wheels.is_dir():
            raise SystemExit(f"gpu_study: error: no wheel folder {wheels}: run `make gpu-wheels` where there is "
                             "network, and carry it over")
        p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_wheels.py"), "install", "--dir", str(wheels),
                            "--target", str(args.site.resolve())], capture_output=True, text=True, cwd=ROOT)
        said, failed = (p.stdout + p.stderr).strip(), p.returncode
    (out / "install.log").write_text(said + "\n", encoding="utf-8")
    if failed:
        raise SystemExit(f"gpu_study: error: installing the wheels of {Path(args.wheels).resolve()} failed "
                         f"(install.log):\n{said[-2000:]}")
    return said.splitlines()[0] if said else ""


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                                        else []))  # the study's processes import the checkout too
    try:  # one call per OUT (its study and pre-trainings, children of it, are let through); the settings next: a usage
        with hold(folder_lock(str(args.out)), "gpu_study", "--out"):  # error changes nothing (the lock goes with it)
            return called(args, argv)
    except UsageError as e:  # LockHeld among them: a live call holds OUT
        print(f"gpu_study: error: {e}", file=sys.stderr)
        return 2


def called(args: argparse.Namespace, argv: Optional[List[str]]) -> int:
    """The call of ``args``, holding OUT's lock."""
    if args.wheels is None and not args.dry_run:
        args.wheels = os.path.join(ROOT, ".gpu-wheels")
    call = gpu_schedule.settings(args)
    gpu_schedule.prepare(call, install)
    gpu_schedule.run(call)
    command = "python3 bench/gpu_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = write_budget(call, command)
    gpu_schedule.send_back(call)
    print("\n" + text, flush=True)
    print(f"gpu_study: report {call.out / 'report.md'}" + (f", copied into {args.report_to}" if args.report_to else ""),
          flush=True)
    if call.exit_status:
        why = [f"{part} failed" for part in call.failed] + [f"{part} stopped at the budget" for part in call.budget.stopped]
        print(f"gpu_study: error: {'; '.join(why)}; {RESUME_RUNS}", file=sys.stderr, flush=True)
    return call.exit_status


if __name__ == "__main__":
    exit_main(main, "gpu_study", RESUME_RUNS)
