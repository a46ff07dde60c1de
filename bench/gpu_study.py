"""``make gpu-study``: the study on one GPU machine without network, in one command within ``--budget-s`` (540 s)
from the start of Python to the report (docs/study.md, "The study on one GPU").

1. start-up: Python, torch and a CUDA device (without one it says so in one line and exits 1);
2. install: the carried wheels of ``make gpu-wheels`` into ``--site`` with this machine's python, offline, as
   ``make gpu-check`` does (bench/gpu_wheels.py): fairseq comes from there, torch stays the machine's;
3. data: the carried folder of ``make gpu-study-data`` (``--data``; bench/gpu_study_data.py): its manifest must hold
   the preset's prep settings; the prep's outputs are copied into OUT, so the study's prep stage is done;
4. pre-training: every model at once on the one GPU, each its own ``python -m study --part pretrain I`` with
   data-loader workers; their progress is printed with the time at which they would end;
5. the rest of the study: ``python -m study --lanes N`` (locality, longer inputs, fine-tuning with the dev
   predictions and word-order sets, N parts at once sharing the GPU; then the report);
6. the budget: ``OUT/budget.md``, also appended to ``OUT/report.md``: the seconds of each part, and every
   pre-training's updates, tokens and tokens per second from its log.

The models are the study's settings, from the environment as for ``study.sh``: ``VARIANTS`` (default ``bert-a
tupe-r``), ``OBJECTIVES`` (default ``mlm``; ``"mlm electra"`` with ``VARIANTS=bert-a`` is the ELECTRA setting),
``GENERATOR_SIZE_DIVISOR`` (default 4: a quarter of the 512-wide encoder, ELECTRA-Small's); the preset is the one
the data was prepared for (gpu-9min; ``PRESET`` of the environment is ignored). A part still running when the
budget less ``--reserve-s`` (25 s) is spent is stopped, and the report is written from what finished (its "Missing
parts" section names the rest). ``--dry-run`` runs the same on CPU (``GPUS=0``) at the size of the data's preset
(the tests: ``tiny``). ``--report-to DIR`` copies the report, its tables and figure, the budget and the logs into
DIR (what comes back from a borrowed machine; the checkpoints stay in OUT). Exit status: 0 done; 1 a part failed
or was stopped at the budget; 2 a usage error.

    python3 bench/gpu_study.py --out runs/gpu-study                     # make gpu-study OUT=runs/gpu-study
    VARIANTS=bert-a OBJECTIVES="mlm electra" python3 bench/gpu_study.py --out runs/gpu-electra
    python bench/gpu_study.py --out /tmp/dry --data /tmp/data --dry-run  # the CPU rehearsal
"""
from __future__ import annotations

import time

START = time.monotonic()  # the budget's clock: from here (Python has started) to the report

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Optional, Tuple  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from study.settings import UsageError, resolve  # noqa: E402
from tupe_common.jobs import cores  # noqa: E402

DEFAULTS = {"VARIANTS": "bert-a tupe-r", "OBJECTIVES": "mlm", "GENERATOR_SIZE_DIVISOR": "4"}
PREP_SETTINGS = ("VOCAB_SIZE", "TOKENS_PER_SAMPLE", "MAX_SHARDS", "MAX_DOCS")  # bench/gpu_study_data.py's
AFTER_PRETRAINING = {"locality": "locality", "longer": "longer inputs",  # the study's stages run by run_rest
                     "finetune": "fine-tuning with the dev predictions and word-order sets"}
DATA_PARTS = ("c4", "tasks-bin", "locality")  # the prep's outputs in the data folder, as in the study's OUT
REPORT_RESERVE_S = 25  # kept at the end of the budget for the report when a part runs over (--reserve-s)
POLL_S = 2.0
REPORTED = ("report.md", "budget.md", "study.csv", "differences.csv", "order.csv", "correlation.csv", "overview.png",
            "settings.env", "timings.tsv", "install.log", "study.log")


def say(msg: str) -> None:
    print(f"gpu_study: [{time.monotonic() - START:4.0f} s] {msg}", flush=True)


@dataclass
class Part:
    """One timed part of the command, for the budget table."""
    name: str
    seconds: float
    what: str


@dataclass
class Budget:
    budget_s: float
    reserve_s: float = REPORT_RESERVE_S
    parts: List[Part] = field(default_factory=list)
    stopped: List[str] = field(default_factory=list)  # what the budget stopped
    mark: float = START

    def done(self, name: str, what: str) -> None:
        now = time.monotonic()
        self.parts.append(Part(name, now - self.mark, what))
        self.mark = now

    @property
    def deadline(self) -> float:
        return START + self.budget_s - self.reserve_s


# ---- 1-3: the machine, the wheels, the data -------------------------------------------------------------------


def card(dry_run: bool) -> Tuple[str, str]:
    """(torch's version, the card's name); exits 1 in one line when there is no CUDA device and this is no dry run."""
    import torch

    if dry_run:
        return torch.__version__, "CPU (dry run)"
    if not torch.cuda.is_available():
        print(f"gpu_study: no CUDA device here (torch {torch.__version__} sees none); run it on a GPU machine, or add "
              "--dry-run for the CPU rehearsal", file=sys.stderr)
        raise SystemExit(1)
    return torch.__version__, torch.cuda.get_device_name(0)


def install(args, out: Path) -> str:
    """The carried wheels into ``--site`` (bench/gpu_wheels.py install, as make gpu-check); what it said."""
    if args.no_install or args.wheels is None:
        said = "nothing installed: this environment is used as it is (" + (
            "--no-install)" if args.no_install else "a dry run without --wheels)")
    else:
        wheels = Path(args.wheels).resolve()  # the install runs in the repository; relative paths are the caller's
        if not wheels.is_dir():
            raise SystemExit(f"gpu_study: error: no wheel folder {wheels}: run `make gpu-wheels` where there is "
                             "network, and carry it over")
        p = subprocess.run([sys.executable, str(ROOT / "bench/gpu_wheels.py"), "install", "--dir", str(wheels),
                            "--target", str(args.site.resolve())], capture_output=True, text=True, cwd=ROOT)
        said = (p.stdout + p.stderr).strip()
        if p.returncode:
            (out / "install.log").write_text(said + "\n", encoding="utf-8")
            raise SystemExit(f"gpu_study: error: installing the wheels of {wheels} failed (install.log):\n{said[-2000:]}")
    (out / "install.log").write_text(said + "\n", encoding="utf-8")
    return said.splitlines()[0] if said else ""


def read_manifest(data: Path) -> dict:
    path = data / "manifest.json"
    if not path.is_file():
        raise UsageError(f"no {path}: run `make gpu-study-data` where there is network (bench/gpu_study_data.py), "
                         "and carry the folder over")
    return json.loads(path.read_text(encoding="utf-8"))


def settings_env(manifest: dict, data: Path, out: Path, dry_run: bool) -> Dict[str, str]:
    """The study's settings: the environment's, the defaults above, the data's preset and tasks; checked against
    the prep settings the data was made with."""
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    for name, value in DEFAULTS.items():
        env[name] = env.get(name) or value
    if env.get("PRESET") not in (None, "", manifest["preset"]):  # cpu-small's prep equals gpu-9min's: not refused
        say(f"PRESET={env['PRESET']} of the environment is ignored: the data was prepared for {manifest['preset']}")
    env.update(PRESET=manifest["preset"], OUT=str(out), TASKS_DIR=str(data / "tasks"),
               TASKS=env.get("TASKS") or ",".join(manifest["tasks"]), C4_DIR="")
    if dry_run:
        env["GPUS"] = "0"
    values = resolve(env)
    differ = [f"{k}={values[k]} (the data: {manifest['prep'][k]})" for k in PREP_SETTINGS
              if str(values[k]) != str(manifest["prep"][k])]
    if differ:
        raise UsageError(f"{data} was prepared with other settings than this run's: {', '.join(differ)}; run make "
                         "gpu-study-data with these settings, or leave them to the data's preset")
    return env


def copy_data(data: Path, out: Path) -> int:
    """The prep's outputs of ``data`` into ``out`` (a file already there with the same size is kept); bytes copied."""
    copied = 0
    for part in DATA_PARTS:
        for src in sorted((data / part).rglob("*")):
            dest = out / src.relative_to(data)
            if src.is_file() and not (dest.is_file() and dest.stat().st_size == src.stat().st_size):
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
                copied += src.stat().st_size
    return copied


# ---- 4-5: the study's processes --------------------------------------------------------------------------------


def child_env(env: Dict[str, str], site: Optional[Path], **more: str) -> Dict[str, str]:
    """The study's processes: the installed wheels and the repository first on PYTHONPATH, the wheels' commands
    (fairseq-train) first on PATH, this Python for every script (train_scripts/lib.sh's PYTHON)."""
    paths = [str(site)] if site else []
    env = dict(env, PYTHONUNBUFFERED="1", PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(paths + [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
               PATH=os.pathsep.join(([str(site / "bin")] if site else []) + [env.get("PATH", "")]))
    env.update(more)
    return env


def study(args: List[str], env: Dict[str, str], log: Path) -> subprocess.Popen:
    """``python -m study ARGS`` in its own process group (stopped as a whole), its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        return subprocess.Popen([sys.executable, "-m", "study", *args], cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop(p: subprocess.Popen) -> None:
    """End ``p`` and everything it started (its process group): TERM, then KILL after 10 s."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def plan_parts(env: Dict[str, str]) -> Tuple[List[str], List[Tuple[int, str]], Dict[str, int]]:
    """The study's plan from ``env``, in this process (what ``study.sh --list`` prints): every model's label ("bert-a
    1"), the pre-trainings still to do (index, label) and the number of parts of each stage after pre-training.
    ``OUT/settings.env`` is written (or checked) here, as the study's first part would: the pre-trainings then start
    at once without two writers of it. A usage error exits 2."""
    from study.__main__ import check_settings, part_label
    from study.plan import Plan
    from study.stages import BY_NAME

    try:
        plan = Plan.from_environ(env)
        check_settings(plan)
    except UsageError as e:
        print(f"gpu_study: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    stage = BY_NAME["pretrain"]
    parts = stage.parts(plan)
    todo = [(i, part_label(part)) for i, part in enumerate(parts) if not stage.done(plan, *part)]
    rest = {name: len(BY_NAME[name].parts(plan)) for name in AFTER_PRETRAINING}
    return [part_label(part) for part in parts], todo, rest


_UPDATES = re.compile(r'"(?:train_)?num_updates": "?(\d+)')


def updates_so_far(log: Path) -> int:
    """The last update count a fairseq json log has printed (0 before its first line)."""
    if not log.is_file():
        return 0
    found = _UPDATES.findall(log.read_text(encoding="utf-8", errors="replace"))
    return int(found[-1]) if found else 0


def pretrain(env: Dict[str, str], out: Path, todo: List[Tuple[int, str]], total_updates: int, budget: Budget) -> int:
    """Every pre-training part at once; the progress every 15 s; the parts stopped at the deadline. Exit status:
    0 all ended well, 1 otherwise."""
    procs: Dict[str, subprocess.Popen] = {}
    for index, label in todo:
        procs[label] = study(["--part", "pretrain", str(index)], env, out / "lanes" / f"pretrain-{index}.log")
        say(f"pre-training {label}: started (log {out / 'lanes' / f'pretrain-{index}.log'})")
    started, shown = time.monotonic(), time.monotonic()
    logs = {label: out / "pretrain" / label.rsplit(" ", 1)[0] / f"seed{label.rsplit(' ', 1)[1]}" / "train.log"
            for _, label in todo}
    while any(p.poll() is None for p in procs.values()):
        time.sleep(POLL_S)
        if time.monotonic() > budget.deadline:
            for label, p in procs.items():
                if p.poll() is None:
                    stop(p)
                    budget.stopped.append(f"pre-training {label} (at update {updates_so_far(logs[label])})")
            say("the budget is spent: pre-training stopped")
            break
        if time.monotonic() - shown >= 15:
            shown = time.monotonic()
            done = {label: updates_so_far(log) for label, log in logs.items()}
            slowest = min(done.values())
            pace = slowest / (shown - started)  # updates per second, start-up included
            end = (f", at this pace they end at about {shown - START + (total_updates - slowest) / pace:.0f} s of "
                   f"{budget.budget_s:.0f}") if pace > 0 else ""
            say("pre-training: " + ", ".join(f"{k} {v}/{total_updates}" for k, v in done.items()) + end)
    failed = [label for label, p in procs.items() if p.returncode]
    for label in failed:
        say(f"pre-training {label} ended with exit status {procs[label].returncode}")
    return 1 if failed else 0


def run_rest(env: Dict[str, str], out: Path, lanes: int, budget: Budget) -> Tuple[int, float]:
    """``python -m study --lanes N`` (the stages after pre-training, then the report), its notes echoed; stopped at the
    deadline, then the report alone. (exit status, seconds of the report)."""
    log = out / "study.log"
    seen = log.stat().st_size if log.is_file() else 0
    p = study(["--lanes", str(lanes)], env, log)
    stopped = False
    while p.poll() is None:
        time.sleep(POLL_S)
        seen = echo(log, seen)
        if time.monotonic() > budget.deadline:
            stop(p)
            stopped = True
            budget.stopped.append("the stages after pre-training (the report names the parts that did not finish)")
            say("the budget is spent: the study stopped; writing the report from what has finished")
    seen = echo(log, seen)
    if not stopped:
        return p.returncode, report_seconds(log.read_text(encoding="utf-8", errors="replace"))
    return 1, report_only(env, out, budget)


def report_only(env: Dict[str, str], out: Path, budget: Budget) -> float:
    """``python -m study --report`` in what is left of the budget (what finished; the rest named missing); its
    seconds."""
    log = out / "study.log"
    seen = log.stat().st_size if log.is_file() else 0
    start = time.monotonic()
    q = study(["--report"], env, log)
    try:
        q.wait(timeout=max(5.0, START + budget.budget_s - time.monotonic() - 2))
    except subprocess.TimeoutExpired:
        stop(q)
    echo(log, seen)
    return time.monotonic() - start


def echo(log: Path, seen: int) -> int:
    """The study's notes written to ``log`` since byte ``seen``; the new position."""
    with open(log, "rb") as f:
        f.seek(seen)
        text = f.read().decode("utf-8", errors="replace")
    for line in text.splitlines():
        if line.startswith("study.sh:") and not line.startswith("study.sh: settings"):
            print(f"  {line}", flush=True)
    return seen + len(text.encode("utf-8"))


def report_seconds(log_text: str) -> float:
    """The report stage's seconds, as the study's last "report all: finished in N s" note says."""
    found = re.findall(r"report all: finished in (\d+) s", log_text)
    return float(found[-1]) if found else 0.0


# ---- 6: the budget ------------------------------------------------------------------------------------------------


_JSON = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")


def pretrain_facts(log: Path) -> Dict[str, float]:
    """From a pre-training's fairseq json log: updates, tokens (each epoch's mean tokens per update, fairseq's
    ``wpb``, times its updates) and the median of fairseq's own tokens per second over the logged intervals."""
    updates, tokens, wps = 0, 0.0, []
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    for line in text.splitlines():
        m = _JSON.search(line)
        if not m:
            continue
        stats = json.loads(m.group(2))
        if m.group(1) == "train_inner" and "wps" in stats:
            wps.append(float(stats["wps"]))
        elif m.group(1) == "train" and "train_num_updates" in stats:
            now = int(float(stats["train_num_updates"]))
            tokens += float(stats["train_wpb"]) * (now - updates)  # a resumed run starts from its checkpoint's count
            updates = now
    return {"updates": updates, "tokens": tokens, "wps": statistics.median(wps) if wps else 0.0}


def timings(out: Path) -> Dict[Tuple[str, str], float]:
    """(stage, arguments) -> seconds, from OUT/timings.tsv (the last line of a part wins)."""
    path, found = out / "timings.tsv", {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            cols = line.split("\t")
            if len(cols) >= 3:
                found[(cols[0], cols[1])] = float(cols[2])
    return found


def budget_text(budget: Budget, out: Path, manifest: dict, models: List[str], command: str, machine: str) -> str:
    used = sum(p.seconds for p in budget.parts)
    verdict = ("**parts stopped at the budget** (below)" if budget.stopped else "within the budget"
               if used <= budget.budget_s else "**over the budget**")
    lines = ["## Time budget (bench/gpu_study.py)", "",
             f"`{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}: **{used:.0f} s** of the "
             f"{budget.budget_s:.0f} s budget, {verdict}. Measured by the command's own clock, from Python's start; "
             "a machine's start and the copy of the files before it are not in it.", "",
             "| part | seconds | what |", "|---|---:|---|"]
    lines += [f"| {p.name} | {p.seconds:.0f} | {p.what} |" for p in budget.parts]
    lines += [f"| **total** | **{used:.0f}** | of {budget.budget_s:.0f} |", ""]
    for what in budget.stopped:
        lines.append(f"Stopped at the budget: {what}.")
    lines += ["", "| model | updates | tokens | passes over the corpus | part seconds | tokens/s over the part | "
              "fairseq's tokens/s (median) |", "|---|---:|---:|---:|---:|---:|---:|"]
    seconds = timings(out)
    corpus = manifest.get("corpus", {}).get("train_tokens") or 0
    for label in models:
        name, seed = label.rsplit(" ", 1)
        f = pretrain_facts(out / "pretrain" / name / f"seed{seed}" / "train.log")
        s = seconds.get(("pretrain", label), 0.0)
        lines.append(f"| {name} seed {seed} | {f['updates']:,} | {f['tokens']:,.0f} | "
                     f"{f['tokens'] / corpus if corpus else 0:.1f} | {s:.0f} | {f['tokens'] / s if s else 0:,.0f} | "
                     f"{f['wps']:,.0f} |")
    lines += ["", f"Tokens: fairseq's `wpb` (tokens of the update, padding excluded) summed over the updates; the data "
              f"({manifest.get('preset')}, made {manifest.get('made')}) planned about "
              f"{manifest.get('tokens_per_model', 0) / 1e6:.1f}M per model."]
    return "\n".join(lines) + "\n"


def report_to(out: Path, dest: Path, models: List[str]) -> None:
    """The report and what explains it, without the checkpoints, into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in REPORTED:
        if (out / name).is_file():
            shutil.copyfile(out / name, dest / name)
    for log in sorted((out / "lanes").glob("*.log")):
        (dest / "lanes").mkdir(exist_ok=True)
        shutil.copyfile(log, dest / "lanes" / log.name)
    for label in models:
        name, seed = label.rsplit(" ", 1)
        log = out / "pretrain" / name / f"seed{seed}" / "train.log"
        if log.is_file():
            shutil.copyfile(log, dest / f"pretrain_{name}_seed{seed}.log")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", type=Path, required=True, help="the study's folder (created; holds the checkpoints)")
    ap.add_argument("--data", type=Path, default=ROOT / ".gpu-study-data", help="the folder of make gpu-study-data")
    ap.add_argument("--wheels", help="the wheel folder of make gpu-wheels (default .gpu-wheels; a dry run uses this "
                    "environment unless given)")
    ap.add_argument("--site", type=Path, default=ROOT / ".gpu-site", help="where its wheels are installed")
    ap.add_argument("--no-install", action="store_true", help="use this environment as it is (the project installed)")
    ap.add_argument("--budget-s", type=float, default=540, help="the whole command's seconds (default 540)")
    ap.add_argument("--reserve-s", type=float, default=REPORT_RESERVE_S, help="seconds kept at the end for the "
                    f"report when a part runs over: it is stopped then (default {REPORT_RESERVE_S})")
    ap.add_argument("--lanes", type=int, help="parts at once after pre-training (default: cores / 2, 2 to 8)")
    ap.add_argument("--pretrain-workers", type=int, help="data-loader workers of each pre-training (default: the "
                    "cores per pre-training less one, at most 4)")
    ap.add_argument("--report-to", type=Path, help="copy the report, the budget and the logs here")
    ap.add_argument("--dry-run", action="store_true", help="the same on CPU, at the size of the data's preset")
    args = ap.parse_args(argv)
    if args.wheels is None and not args.dry_run:
        args.wheels = str(ROOT / ".gpu-wheels")
    try:  # the settings first: a usage error changes nothing
        manifest = read_manifest(args.data)
        out = args.out.resolve()
        env = settings_env(manifest, args.data.resolve(), out, args.dry_run)
    except UsageError as e:
        print(f"gpu_study: error: {e}", file=sys.stderr)
        return 2
    torch_version, device = card(args.dry_run)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s, args.reserve_s)
    budget.done("start-up", f"Python {sys.version.split()[0]}, torch {torch_version}, {device}; the settings read")
    said = install(args, out)
    site = args.site.resolve() if args.wheels is not None and not args.no_install else None
    budget.done("install", said or "the carried wheels")
    copied = copy_data(args.data, out)
    budget.done("data", f"{args.data.name} (PRESET={env['PRESET']}, {manifest['bytes'] / 2**20:.1f} MiB; "
                        f"{copied / 2**20:.1f} MiB copied into OUT)")

    env = child_env(env, site)
    if site:
        sys.path.insert(0, str(site))  # the plan imports the registry, hence fairseq: the carried one
    models, todo, rest = plan_parts(env)
    budget.done("study plan", "the settings checked and recorded (OUT/settings.env), the parts listed")
    per_model = cores() // max(1, len(todo))  # the cores of each pre-training: its main process and its workers
    workers = args.pretrain_workers if args.pretrain_workers is not None else min(4, max(0, per_model - 1))
    threads = str(max(1, min(4, per_model)))
    total_updates = int(resolve(env)["TOTAL_UPDATES"])
    say(f"{len(models)} model(s): {', '.join(models)}; PRESET={env['PRESET']}, {total_updates} updates each; "
        f"{len(todo)} pre-training(s) to run at once, {workers} data-loader worker(s) each")
    rc = pretrain(child_env(env, None, NUM_WORKERS=str(workers), OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads),
                  out, todo, total_updates, budget) if todo else 0
    budget.done("pre-training", f"{len(todo)} model(s) at once on one {'CPU' if args.dry_run else 'GPU'}, "
                                f"{workers} data-loader worker(s) each" if todo else "done before")
    lanes = args.lanes or max(2, min(8, cores() // 2))
    rest_env = child_env(env, None, NUM_WORKERS="0")
    if time.monotonic() < budget.deadline:
        rest_rc, report_s = run_rest(rest_env, out, lanes, budget)
    else:  # the pre-training took the budget: the report of what there is
        rest_rc, report_s = 1, report_only(rest_env, out, budget)
    what = ", ".join(f"{AFTER_PRETRAINING[name]} {n}" for name, n in rest.items() if n)
    budget.done("after pre-training", f"{sum(rest.values())} part(s) ({what}), {lanes} at once")
    budget.parts[-1].seconds -= report_s
    budget.parts.append(Part("report", report_s, "report.md, the CSV tables, overview.png"))
    command = "python3 bench/gpu_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = budget_text(budget, out, manifest, models, command, device)
    (out / "budget.md").write_text(text, encoding="utf-8")
    if (out / "report.md").is_file():
        with open(out / "report.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)
    if args.report_to:
        report_to(out, args.report_to, models)
    print("\n" + text, flush=True)
    print(f"gpu_study: report {out / 'report.md'}" + (f", copied into {args.report_to}" if args.report_to else ""),
          flush=True)
    return 1 if rc or rest_rc or budget.stopped else 0


if __name__ == "__main__":
    sys.exit(main())
