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
4. pre-training: every model of this call's seeds at once on the one GPU, each its own ``python -m study --part
   pretrain I`` with data-loader workers sized to the machine's cores; their progress is printed with the time at
   which they would end;
5. the rest of the study: ``python -m study --lanes N --stages AFTER`` (``--after``: by default every stage after
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
from __future__ import annotations

import time

START = time.monotonic()  # the budget's clock: from here (Python has started) to the report

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
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
from typing import Dict, List, Optional, Sequence, Tuple  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from study.settings import StudyConfig, UsageError, changed_settings, read, recorded_text, refusal  # noqa: E402
from tupe_common.tunables import items  # noqa: E402
from tupe_common.jobs import cores  # noqa: E402
from tupe_common import fairseq_log, process  # noqa: E402
from tupe_common.errors import RESUME_RUNS, exit_main  # noqa: E402

DEFAULTS = {"VARIANTS": "bert-a tupe-r", "OBJECTIVES": "mlm", "GENERATOR_SIZE_DIVISOR": "4", "TASKS": "none"}
# TUPE's claim, declared for every study this command starts with both models: TUPE-R ends lower (final_loss) and
# gets there sooner (loss_auc) than BERT-A; the margin is the 6-seed cpu-small run's (docs/results/2026-11-28_*)
DECLARED = {"ENDPOINTS": "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a", "EQUIVALENCE_BITS": "0.05"}
SEEDS_PER_CALL = 3
PREP_SETTINGS = ("VOCAB_SIZE", "TOKENS_PER_SAMPLE", "MAX_SHARDS", "MAX_DOCS")  # bench/gpu_study_data.py's
AFTER_PRETRAINING = {"locality": "locality", "longer": "longer inputs",  # the study's stages after pre-training
                     "finetune": "fine-tuning with the dev predictions", "order": "word-order sets"}
DATA_PARTS = ("c4", "tasks-bin", "locality")  # the prep's outputs in the data folder, as in the study's OUT
REPORT_RESERVE_S = 25  # kept at the end of the budget for the report when a part runs over (--reserve-s)
POLL_S = 2.0
CALLS = "gpu_calls.tsv"  # one line per call of this command on the study folder


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


# ---- 1-3: the machine, the settings and seeds, the wheels, the data -------------------------------------------


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


def model_labels(env: Dict[str, str]) -> List[str]:
    """The study's models (study.plan.Entry.label: ``bert-a``, ``bert-a+electra``) from VARIANTS and OBJECTIVES. Read
    before the carried wheels are installed, so without the registry (which imports torch and its company) unless
    VARIANTS says ``all``; the names are checked by the study's plan after the install."""
    from study.plan import Entry

    if ":" in env["VARIANTS"]:
        raise UsageError(f"VARIANTS={env['VARIANTS']}: this command chooses the pre-training seeds (--seeds); name "
                         "the variants without seeds")
    names = [n.replace("_", "-") for n in items(env["VARIANTS"])]
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:  # refused before any work, as the study's plan would after the install
        raise UsageError(f"VARIANTS={env['VARIANTS']}: {twice[0]} is named twice; name each variant once")
    if "all" in names:
        from study.plan import parse_variants, registry

        names = [e.name for e in parse_variants(env["VARIANTS"], [1], registry())]
    return [Entry(n, (1,), o).label for o in items(env["OBJECTIVES"]) for n in names]


def finished_seeds(out: Path, labels: Sequence[str]) -> List[int]:
    """The seeds whose pre-training has finished for every model of ``labels`` in ``out`` (study.stages:
    ``pretrain/LABEL/seedS/pretrain.done``)."""
    found = [{int(p.parent.name[len("seed"):]) for p in (out / "pretrain" / label).glob("seed*/pretrain.done")
              if p.parent.name[len("seed"):].isdigit()} for label in labels]
    return sorted(set.intersection(*found)) if found else []


def call_seeds(finished: Sequence[int], n: int) -> List[int]:
    """This call's seeds: the first ``n`` seed numbers from 1 up that are not finished (a seed an earlier call
    started and the budget stopped is among them: it is redone, or resumed from its checkpoint where there is one)."""
    seeds, s = [], 1
    while len(seeds) < n:
        if s not in finished:
            seeds.append(s)
        s += 1
    return seeds


SEQUENTIAL = ("# PRETRAIN_SEEDS: the seeds so far of a sequential design: each call of bench/gpu_study.py adds its "
              "--seeds and rewrites the next line; every other line is declared once, and a call that changes one is "
              "refused\n")


def seeds_recorded(text: str, seeds: str) -> str:
    """The settings.env ``text`` with its PRETRAIN_SEEDS line set to ``seeds`` (the seeds so far: the finished ones
    and this call's), under the SEQUENTIAL comment; unchanged without such a line (a study recorded before
    PRETRAIN_SEEDS was: it is not compared)."""
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("PRETRAIN_SEEDS=")), None)
    if at is None:
        return text
    lines[at] = f"PRETRAIN_SEEDS={seeds}\n"
    if at == 0 or lines[at - 1] != SEQUENTIAL:
        lines.insert(at, SEQUENTIAL)
    return "".join(lines)


def record_seeds(path: Path, seeds: str) -> None:
    """``path`` (OUT/settings.env), where it exists, with this call's seeds so far (:func:`seeds_recorded`)."""
    from tupe_common.io import write_text

    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if seeds_recorded(text, seeds) != text:
            write_text(path, seeds_recorded(text, seeds))


def settings_env(manifest: dict, data: Path, out: Path, dry_run: bool, seeds_per_call: int
                 ) -> Tuple[Dict[str, str], List[int], List[int]]:
    """The study's settings (the environment's, the defaults above, the data's preset and tasks, the seeds so far and
    this call's), checked against the prep settings the data was made with and against the settings the study
    folder recorded (a changed ENDPOINTS is refused here, before anything is written). (settings, the seeds
    finished before, this call's seeds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PRETRAIN_SEEDS")}
    for name, value in DEFAULTS.items():
        env[name] = env.get(name) or value
    if env.get("PRESET") not in (None, "", manifest["preset"]):  # cpu-small's prep equals gpu-9min's: not refused
        say(f"PRESET={env['PRESET']} of the environment is ignored: the data was prepared for {manifest['preset']}")
    if os.environ.get("PRETRAIN_SEEDS"):
        say(f"PRETRAIN_SEEDS={os.environ['PRETRAIN_SEEDS']} of the environment is ignored: this command chooses the "
            "seeds (--seeds)")
    env.update(PRESET=manifest["preset"], OUT=str(out), TASKS_DIR=str(data / "tasks"), C4_DIR="")
    if env["TASKS"] == "auto":
        env["TASKS"] = ",".join(manifest["tasks"])
    labels = model_labels(env)
    if not env.get("ENDPOINTS"):  # TUPE's claim when both of its models are in the study; else nothing declared
        declared = {"bert-a", "tupe-r"} <= set(labels)
        env["ENDPOINTS"] = DECLARED["ENDPOINTS"] if declared else "none"
        env["EQUIVALENCE_BITS"] = env.get("EQUIVALENCE_BITS") or (DECLARED["EQUIVALENCE_BITS"] if declared else "none")
    if dry_run:
        env["GPUS"] = "0"
    finished = finished_seeds(out, labels)
    seeds = call_seeds(finished, seeds_per_call)
    env["PRETRAIN_SEEDS"] = " ".join(map(str, sorted(set(finished) | set(seeds))))
    config = read(env)
    differ = [f"{k}={config.text(k)} (the data: {manifest['prep'][k]})" for k in PREP_SETTINGS
              if config.text(k) != str(manifest["prep"][k])]
    if differ:
        raise UsageError(f"{data} was prepared with other settings than this run's: {', '.join(differ)}; run make "
                         "gpu-study-data with these settings, or leave them to the data's preset")
    recorded = out / "settings.env"
    if recorded.is_file():
        # the seeds so far are this call's to record (SEQUENTIAL); every other line is compared by its meaning
        diff = changed_settings(seeds_recorded(recorded.read_text(encoding="utf-8"), env["PRETRAIN_SEEDS"]),
                                recorded_text(config))
        if diff:
            raise refusal(str(recorded), diff, "this call's settings", "a call adds seeds to the study it was "
                          "started as: use another --out, or set these back")
    return env, finished, seeds


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
    """``python -m study ARGS`` in its own process group (stopped as a whole, also by a signal to this command:
    ``tupe_common.process``), its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        return process.start([sys.executable, "-m", "study", *args], cwd=ROOT, env=env, stdout=f,
                             stderr=subprocess.STDOUT)


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


def plan_parts(env: Dict[str, str], after: Sequence[str]) -> Tuple[List[str], List[Tuple[int, str]], Dict[str, int]]:
    """The study's plan from ``env``, in this process (what ``study.sh --list`` prints): every model's label and seed
    ("bert-a 1"), the pre-trainings still to do (index, label) and the number of parts still to do of each stage of
    ``after``. ``OUT/settings.env`` is written (or checked) here, as the study's first part would, its PRETRAIN_SEEDS
    line this call's seeds so far (:func:`record_seeds`): the design is recorded before the first pre-training
    starts, and the pre-trainings then start at once without two writers of it. A usage error exits 2."""
    from study.__main__ import check_settings, part_label
    from study.plan import Plan
    from study.stages import BY_NAME

    try:
        plan = Plan.from_environ(env)
        recorded = Path(plan.path("settings.env"))
        record_seeds(recorded, env["PRETRAIN_SEEDS"])  # a later call: its seeds so far, before the check
        check_settings(plan)
        record_seeds(recorded, env["PRETRAIN_SEEDS"])  # the first call: the line just written, under its comment
    except UsageError as e:
        print(f"gpu_study: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    stage = BY_NAME["pretrain"]
    parts = stage.parts(plan)
    todo = [(i, part_label(part)) for i, part in enumerate(parts) if not stage.done(plan, *part)]
    rest = {name: sum(not BY_NAME[name].done(plan, *part) for part in BY_NAME[name].parts(plan)) for name in after}
    return [part_label(part) for part in parts], todo, rest


def updates_so_far(log: Path) -> int:
    """The last update count a fairseq log's training lines have printed (0 before its first one)."""
    if not log.is_file():
        return 0
    found = [s.update for s in fairseq_log.statistics(log) if not s.validation and s.update is not None]
    return found[-1] if found else 0


def train_log(out: Path, label: str) -> Path:
    """The fairseq log of the pre-training ``label`` ("bert-a 4")."""
    name, seed = label.rsplit(" ", 1)
    return out / "pretrain" / name / f"seed{seed}" / "train.log"


def pretrain(env: Dict[str, str], out: Path, todo: List[Tuple[int, str]], total_updates: int, budget: Budget) -> int:
    """Every pre-training part at once; the progress every 15 s; the parts stopped at the deadline. Exit status:
    0 all ended well, 1 otherwise."""
    procs: Dict[str, subprocess.Popen] = {}
    for index, label in todo:
        log = out / "lanes" / f"pretrain-{label.replace(' ', '-seed')}.log"  # by model, not index: calls add parts
        procs[label] = study(["--part", "pretrain", str(index)], env, log)
        say(f"pre-training {label}: started (log {log})")
    started, shown = time.monotonic(), time.monotonic()
    logs = {label: train_log(out, label) for _, label in todo}
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


def run_rest(env: Dict[str, str], out: Path, lanes: int, after: Sequence[str], budget: Budget) -> Tuple[int, float]:
    """``python -m study --lanes N --stages AFTER`` (the chosen stages after pre-training, then the report; only the
    report when ``after`` is empty), its notes echoed; stopped at the deadline, then the report alone. (exit status,
    seconds of the report)."""
    log = out / "study.log"
    seen = log.stat().st_size if log.is_file() else 0
    p = study(["--lanes", str(lanes), "--stages", ",".join(after)] if after else ["--report"], env, log)
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
    from study.figure import _pyplot, variant_style
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
    from study.timings import part_times

    return {(t.stage, t.part): float(t.seconds) for t in part_times(str(out))}


def read_calls(out: Path) -> List[Dict[str, str]]:
    path = out / CALLS
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def record_call(out: Path, row: Dict[str, str]) -> None:
    """One line of ``OUT/gpu_calls.tsv`` for this call (the header first)."""
    path, new = out / CALLS, not (out / CALLS).is_file()
    with open(path, "a", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row), delimiter="\t")
        if new:
            w.writeheader()
        w.writerow(row)


def endpoints_text(out: Path) -> List[str]:
    """The declared comparisons over every seed so far, as the report tested them (``OUT/endpoints.csv``)."""
    path = out / "endpoints.csv"
    rows = list(csv.DictReader(open(path, encoding="utf-8"))) if path.is_file() else []
    if not rows:
        return ["No comparison declared (ENDPOINTS=none), or no report yet.", ""]
    L = [f"One Holm family of {rows[0]['family_size']}, over every seed whose pre-training finished so far (the "
         "report's \"Declared comparisons\"):", ""]
    for r in rows:
        if not r["mean"]:
            L.append(f"- `{r['measure']}: {r['a']} - {r['b']}`: {r['seeds']} seed(s), {r['verdict']}")
            continue
        seeds = " ".join(s.split(":")[0] for s in r["by_pretrain_seed"].split())
        L.append(f"- `{r['measure']}: {r['a']} - {r['b']}` over {r['seeds']} seeds ({seeds}): mean "
                 f"{float(r['mean']):+.4f} bits, 95% t-interval [{float(r['low']):+.4f}, {float(r['high']):+.4f}], "
                 f"p {float(r['p']):.3g}, Holm p {float(r['p_holm']):.3g}: **{r['verdict']}**; "
                 + needed_text(float(r["mean"]), float(r["sd"]), int(r["family_size"])))
    return L + ["", "Seeds for 80% power: of the two-sided paired t-test at Holm's first step (0.05 / the family's "
                "size), at the effect measured so far (`study/power.py`, as `study.sh --plan`); an effect measured on "
                "few seeds is itself uncertain, so this guides the next loan, it does not promise an answer.", ""]


def needed_text(mean: float, sd: float, family: int) -> str:
    """How many seeds the effect measured so far (d = |mean| / SD) needs for 80% power in the declared family."""
    from study.power import MAX_SEEDS, seeds_needed

    if sd <= 0:
        return "no spread measured"
    n = seeds_needed(abs(mean) / sd, 0.8, 0.05 / family)
    return f"d = {abs(mean) / sd:.2f}: " + (f"{n} seeds for 80% power" if n else f"more than {MAX_SEEDS} seeds for 80% power")


def budget_text(budget: Budget, out: Path, manifest: dict, config: StudyConfig, models: List[str], seeds: List[int],
                command: str, machine: str, rows: Sequence[Dict[str, object]]) -> str:
    used = sum(p.seconds for p in budget.parts)
    verdict = ("**parts stopped at the budget** (below)" if budget.stopped else "within the budget"
               if used <= budget.budget_s else "**over the budget**")
    calls = read_calls(out)
    lines = ["## GPU study: the declared comparisons, the time (bench/gpu_study.py)", "",
             f"`{command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}: call {len(calls)} on this "
             f"study folder, pre-training seed(s) {', '.join(map(str, seeds))}. **{used:.0f} s** of the "
             f"{budget.budget_s:.0f} s budget, {verdict}. Measured by the command's own clock, from Python's start; "
             "a machine's start and the copy of the files before it are not in it.", "",
             "### Declared comparisons so far", ""] + endpoints_text(out)
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
    for label in models:
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


def report_to(out: Path, dest: Path, data: Path) -> List[str]:
    """The study folder into ``dest`` without what a later call does not need: the checkpoints, the files of the
    carried data folder, the TensorBoard logs, and every pre-training the budget stopped (without its checkpoint it
    cannot resume; the next call redoes it). ``dest`` is then a study folder a later call adds seeds to. The
    pre-trainings left out."""
    left_out = sorted(str(p.parent.relative_to(out)) for p in (out / "pretrain").glob("*/seed*/train.log")
                      if not (p.parent / "pretrain.done").is_file())
    for src in sorted(out.rglob("*")):
        rel = src.relative_to(out)
        if (not src.is_file() or src.suffix == ".pt" or "tensorboard" in rel.parts or (data / rel).is_file()
                or any(str(rel).startswith(skip + os.sep) for skip in left_out)):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
    return left_out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--out", type=Path, required=True, help="the study's folder (created; holds the checkpoints; a "
                    "folder of an earlier call, or its --report-to copy, gets --seeds more seeds)")
    ap.add_argument("--data", type=Path, default=ROOT / ".gpu-study-data", help="the folder of make gpu-study-data")
    ap.add_argument("--seeds", type=int, default=SEEDS_PER_CALL, help="pre-training seeds this call adds, each for "
                    f"every model (default {SEEDS_PER_CALL}; the first call needs 2 or more for the declared tests)")
    ap.add_argument("--after", default=",".join(AFTER_PRETRAINING), help="the study's stages run after pre-training, "
                    f"comma-separated, or none (default {','.join(AFTER_PRETRAINING)}: fine-tuning has parts only "
                    "when TASKS names tasks)")
    ap.add_argument("--wheels", help="the wheel folder of make gpu-wheels (default .gpu-wheels; a dry run uses this "
                    "environment unless given)")
    ap.add_argument("--site", type=Path, default=ROOT / ".gpu-site", help="where its wheels are installed")
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
    args = ap.parse_args(argv)
    if args.wheels is None and not args.dry_run:
        args.wheels = str(ROOT / ".gpu-wheels")
    after = [] if args.after == "none" else args.after.split(",")
    try:  # the settings first: a usage error changes nothing
        if args.seeds < 1:
            raise UsageError(f"--seeds {args.seeds}: a whole number of seeds, 1 or more")
        bad = [s for s in after if s not in AFTER_PRETRAINING]
        if bad:
            raise UsageError(f"--after {args.after}: the stages after pre-training are {', '.join(AFTER_PRETRAINING)} "
                             f"(or none), not {bad[0]}")
        manifest = read_manifest(args.data)
        out = args.out.resolve()
        env, finished, seeds = settings_env(manifest, args.data.resolve(), out, args.dry_run, args.seeds)
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
    models, todo, rest = plan_parts(env, after)
    budget.done("study plan", "the settings checked and recorded (OUT/settings.env, ENDPOINTS with them), the parts "
                              "listed")
    n = max(1, len(todo))
    # each pre-training: its main process (one core: it waits on the GPU) and its share of the cores left
    workers = (args.pretrain_workers if args.pretrain_workers is not None
               else min(4, max(1, math.ceil((cores() - n) / n))))
    threads = str(max(1, min(4, cores() // n)))
    config = read(env)
    total_updates = config.TOTAL_UPDATES
    say(f"seeds finished before: {', '.join(map(str, finished)) or 'none'}; this call: {', '.join(map(str, seeds))}; "
        f"ENDPOINTS={config.ENDPOINTS}; {len(todo)} pre-training(s) to run at once (PRESET={config.PRESET}, "
        f"{total_updates} updates of {config.SENTENCES_PER_UPDATE} sequences), {workers} data-loader worker(s) each")
    rc = pretrain(child_env(env, None, NUM_WORKERS=str(workers), OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads),
                  out, todo, total_updates, budget) if todo else 0
    budget.done("pre-training", f"{len(todo)} model(s) at once on one {'CPU' if args.dry_run else 'GPU'}, "
                                f"{workers} data-loader worker(s) each" if todo else "done before")
    lanes = args.lanes or max(2, min(8, cores() // 2))
    rest_env = child_env(env, None, NUM_WORKERS="0")
    if time.monotonic() < budget.deadline:
        rest_rc, report_s = run_rest(rest_env, out, lanes, after, budget)
    else:  # the pre-training took the budget: the report of what there is
        rest_rc, report_s = 1, report_only(rest_env, out, budget)
    what = ", ".join(f"{AFTER_PRETRAINING[name]} {k}" for name, k in rest.items() if k)
    budget.done("after pre-training", f"{sum(rest.values())} part(s) ({what or 'none to do'}), {lanes} at once")
    budget.parts[-1].seconds -= report_s
    budget.parts.append(Part("report", report_s, "report.md, the CSV tables, overview.png"))
    rows = loss_seconds(out, models)
    write_loss_seconds(out, rows)
    exit_status = 1 if rc or rest_rc or budget.stopped else 0
    record_call(out, {"utc": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}", "machine": device,
                      "seeds": " ".join(map(str, seeds)), "at_once": str(len(todo)), "workers": str(workers),
                      "seconds": f"{sum(p.seconds for p in budget.parts):.0f}", "exit": str(exit_status)})
    command = "python3 bench/gpu_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = budget_text(budget, out, manifest, config, models, seeds, command, device, rows)
    (out / "budget.md").write_text(text, encoding="utf-8")
    if (out / "report.md").is_file():
        with open(out / "report.md", "a", encoding="utf-8") as f:
            f.write("\n" + text)
    if args.report_to and args.report_to.resolve() != out:
        left_out = report_to(out, args.report_to.resolve(), args.data.resolve())
        if left_out:
            say(f"not copied into {args.report_to} (stopped at the budget; the next call redoes them): "
                + ", ".join(left_out))
    print("\n" + text, flush=True)
    print(f"gpu_study: report {out / 'report.md'}" + (f", copied into {args.report_to}" if args.report_to else ""),
          flush=True)
    return exit_status


if __name__ == "__main__":
    exit_main(main, "gpu_study", RESUME_RUNS)
