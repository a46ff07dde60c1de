"""The command: the carried wheels installed, then the sections of ``sections.SECTIONS`` in child processes (this
same command with ``--section``), each with its own time limit, and the report rewritten after each."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from .environment import card_name
from .report import Result, result_path, write_report
from .sections import BY_NAME, NAMES, QUICK_SECTIONS, SECTION_RESERVE_S
from .settings import ROOT, settings
from tupe_common.errors import message  # noqa: E402  (the checkout is on sys.path once .settings is imported)
from tupe_common.io import need  # noqa: E402
from tupe_common.tunables import arg_type  # noqa: E402

PACKAGE = Path(__file__).resolve().parent  # run as `python bench/gpu_check` (__main__.py), by the driver too
BUDGET_S = 540  # inside a borrowed GPU machine's 10-minute command limit (docs/gpu.md: each section's share)
QUICK_BUDGET_S = 240  # --quick leaves a short loan the time for the GPU study
# The dry run's: a shared CPU is slow, and there the point is that every section runs, not its time.
DRY_RUN_LIMIT_S, DRY_RUN_BUDGET_S = 900, 3600


def run_sections(args) -> None:
    """The child: its sections (``--section a,b``) one after another, each result saved as it goes."""
    import logging

    for name in ("tupe_plugin", "filelock", "fairseq"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import bench_train_step

    s = settings(args.dry_run, args.quick)
    # bench_train_step builds its models and batches with its module's VOCAB words: this process's sections all
    # take the settings' (the dry run's tiny models a small vocabulary, whose output layer does not dwarf them)
    bench_train_step.VOCAB = s.step_vocab
    for section in args.section.split(","):
        r = Result(result_path(Path(args.out), section))
        r.save()
        try:
            BY_NAME[section].run(r, s, args)
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


def child_command(args, group: List[str], deadline: float, log: Path) -> List[str]:
    """This command again, for the sections of ``group`` until ``deadline``, with the options they read."""
    cmd = [sys.executable, str(PACKAGE), "--section", ",".join(group), "--out", str(args.out),
           "--deadline", str(deadline), "--install-log", str(log),
           *(["--variants", *args.variants] if args.variants else [])]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--quick"] if args.quick else []
    cmd += [f"--{k}={v}" for k, v in (("peak-tflops", args.peak_tflops), ("steps", args.steps),
                                      ("warmup", args.warmup)) if v is not None]
    return cmd


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + (args.budget_s or (DRY_RUN_BUDGET_S if args.dry_run else QUICK_BUDGET_S if args.quick else BUDGET_S))
    header = [f"# GPU check{' (quick)' if args.quick else ''}{' (dry run on CPU)' if args.dry_run else ''}", "",
              f"`{' '.join(sys.argv)}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
              f"{card_name('cpu' if args.dry_run else 'cuda')}"]
    done: Dict[str, dict] = {}
    seconds: Dict[str, float] = {}
    ok, said = install(args)
    log = out / "install.log"
    log.write_text(said + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(Path(args.site).resolve()), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    if args.dry_run:  # one thread per process: on a shared CPU, idle OpenMP threads spin and take the others' time
        env.setdefault("OMP_NUM_THREADS", "1")
    # A section per child process, with its own time limit; a dry run (the test of this driver on CPU) runs them
    # all in one child: the same code per section, seven process starts (torch, fairseq) fewer.
    groups = [list(args.sections)] if args.dry_run and not args.process_per_section else [[n] for n in args.sections]
    for group in groups:
        t0 = time.time()
        per_section = DRY_RUN_LIMIT_S if args.dry_run else max(BY_NAME[n].limit_s for n in group)
        limit = min(per_section * len(group), deadline - t0 - SECTION_RESERVE_S)
        if limit < 20:
            for name in group:
                done[name] = {"status": "failed", "lines": ["**failed**: not run, the time budget was spent"], "rows": []}
            write_report(out, header, NAMES, done, seconds)
            continue
        for name in group:
            result_path(out, name).unlink(missing_ok=True)
        cmd = child_command(args, group, t0 + limit - 20, log)
        try:
            # Triton's interpreter on CPU for the sections that run the kernel, set before triton loads
            interpreted = args.dry_run and bool({"attention", "verdict"} & set(group))
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
            write_report(out, header, NAMES, done, seconds)
            print(f"gpu-check: {name}: {done[name]['status']} ({seconds[name]:.0f} s)", flush=True)
    failed = [n for n in args.sections if done.get(n, {}).get("status") != "ok"]
    print("\n" + (out / "report.md").read_text(encoding="utf-8"), flush=True)  # also in the command's output
    print(f"gpu-check: report in {out / 'report.md'}, CSV in {out / 'gpu_check.csv'}; "
          + (f"failed: {', '.join(failed)}" if failed else "every section passed"), flush=True)
    return 1 if failed else 0


def main(argv: Optional[List[str]] = None) -> int:
    overview = sys.modules[__package__].__doc__  # the package's docstring: what each section does
    ap = argparse.ArgumentParser(prog="python bench/gpu_check", description=overview.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=overview.split("\n\n", 1)[1])
    ap.add_argument("--out", required=True, help="folder for report.md and gpu_check.csv (created)")
    ap.add_argument("--dry-run", action="store_true", help="the same sections on CPU at tiny size")
    ap.add_argument("--wheels", help="the wheel folder of make gpu-wheels (default .gpu-wheels; a dry run uses "
                    "this environment unless given)")
    ap.add_argument("--site", default=str(ROOT / ".gpu-site"), help="where its wheels are installed")
    ap.add_argument("--no-install", action="store_true",
                    help="use this environment as it is (a GPU machine where the project is installed)")
    ap.add_argument("--quick", action="store_true",
                    help=f"the short check (make gpu-check QUICK=1): sections {' '.join(QUICK_SECTIONS)}, T=512 with "
                    f"training's padding, {QUICK_BUDGET_S} s")
    ap.add_argument("--sections", nargs="+", choices=NAMES, help="default: all (--quick: its five)")
    ap.add_argument("--variants", nargs="+", default=[], metavar="VARIANT", help="registry names (default: all)")
    ap.add_argument("--budget-s", type=arg_type("num+"),
                    help=f"the whole check's time (default {BUDGET_S}; --quick {QUICK_BUDGET_S}; dry run {DRY_RUN_BUDGET_S})")
    ap.add_argument("--peak-tflops", type=arg_type("num+"), help="the card's peak dense bf16 TFLOP/s, if its name is not known")
    ap.add_argument("--steps", type=arg_type("int1"), help="timed steps per model (default 8, dry run 2)")
    ap.add_argument("--warmup", type=arg_type("int0"), help="warm-up steps per model (default 2, dry run 1)")
    ap.add_argument("--process-per-section", action="store_true",
                    help="a dry run's sections each in its own process, as on a GPU (default: one process for all)")
    for hidden in ("--section", "--install-log"):  # the child's
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=float("inf"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:  # a file where the report's folder (or one above it) would be: argparse's one line, before any work
        need(args.out, "out")
    except OSError as e:
        ap.error(f"--out: {message(e)}")
    args.sections = args.sections or list(QUICK_SECTIONS if args.quick else NAMES)
    if args.wheels is None and not args.dry_run:
        args.wheels = str(ROOT / ".gpu-wheels")
    if args.section:  # the child, where fairseq and the plugin can be imported
        from tupe_core.registry import VARIANTS

        unknown = sorted(set(args.variants) - set(VARIANTS))
        if unknown:
            ap.error(f"--variants: unknown {unknown}; registered: {' '.join(VARIANTS)}")
        args.variants = args.variants or list(VARIANTS)
        run_sections(args)
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__} sees none); run it on a GPU machine, or "
              "add --dry-run for the CPU rehearsal", file=sys.stderr)
        return 1
    return drive(args)
