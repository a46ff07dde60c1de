"""The study on one GPU within a time budget (``make gpu-study``, whose command is ``bench/gpu_study.py``; docs/study.md,
"The study on one GPU"): which parts of the study run, in which order, how many at once, and what the budget stops.

A call on a study folder (:class:`Call`): :func:`settings` reads its settings and chooses its seeds (the first
``--seeds`` not finished for every model), refusing, before anything is written, data prepared with other settings
and a design other than the one the folder recorded; :func:`prepare` checks the device, installs the carried wheels,
copies the carried data into OUT (the study's prep is then done) and lists the study's parts, recording the design
in ``OUT/settings.env`` before the first pre-training starts; :func:`run` starts every pre-training of the call at
once, then the stages after pre-training in lanes and the report (``python -m tupe_study``), stops what still runs when
the budget less its reserve is spent, and records the call in ``OUT/gpu_calls.tsv``; :func:`send_back` copies the
study folder without what a later call does not need. Every step is a :class:`Part` of the :class:`Budget`.

What a call measured (each pre-training's tokens, the validation loss against GPU seconds, ``OUT/budget.md``) is
bench/gpu_study.py's. Plain Python at import (no numpy, no torch): it runs before the carried wheels are installed.
"""
from __future__ import annotations

import time

START = time.monotonic()  # the budget's clock: from this import (bench/gpu_study.py's first) to the report

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Dict, List, Optional, Sequence, Tuple  # noqa: E402

from tupe_study.runs import pretrain_finished  # noqa: E402
from tupe_study.settings import StudyConfig, UsageError, changed_settings, read, recorded_text, refusal  # noqa: E402
from tupe_common import fairseq_log, process  # noqa: E402
from tupe_common.io import text_from  # noqa: E402
from tupe_common.lock import LOCK_NAME  # noqa: E402
from tupe_common.jobs import cores  # noqa: E402
from tupe_common.tunables import items  # noqa: E402

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
PART_PROG = "study.sh:"  # how the lines of a part start: python -m tupe_study names itself so (settings.PROG)
PART_ERROR = f"{PART_PROG} error: "


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


# ---- 1-3 (the steps of bench/gpu_study.py's help): the machine, the settings and seeds, the wheels, the data -----


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


def read_manifest(data: Path) -> dict:
    path = data / "manifest.json"
    if not path.is_file():
        raise UsageError(f"no {path}: run `make gpu-study-data` where there is network (bench/gpu_study_data.py), "
                         "and carry the folder over")
    return json.loads(path.read_text(encoding="utf-8"))


def model_labels(env: Dict[str, str]) -> List[str]:
    """The study's models (tupe_study.plan.Entry.label: ``bert-a``, ``bert-a+electra``) from VARIANTS and OBJECTIVES. Read
    before the carried wheels are installed, so without the registry (which imports torch and its company) unless
    VARIANTS says ``all``; the names are checked by the study's plan after the install."""
    from tupe_study.plan import Entry

    if ":" in env["VARIANTS"]:
        raise UsageError(f"VARIANTS={env['VARIANTS']}: this command chooses the pre-training seeds (--seeds); name "
                         "the variants without seeds")
    names = [n.replace("_", "-") for n in items(env["VARIANTS"])]
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:  # refused before any work, as the study's plan would after the install
        raise UsageError(f"VARIANTS={env['VARIANTS']}: {twice[0]} is named twice; name each variant once")
    if "all" in names:
        from tupe_study.plan import parse_variants, registry

        names = [e.name for e in parse_variants(env["VARIANTS"], [1], registry())]
    return [Entry(n, (1,), o).label for o in items(env["OBJECTIVES"]) for n in names]


def finished_seeds(out: Path, labels: Sequence[str]) -> List[int]:
    """The seeds whose pre-training has finished for every model of ``labels`` in ``out`` (tupe_study.stages:
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
    """The study's processes: the installed wheels first on PYTHONPATH (the caller's PYTHONPATH after them: the GPU
    kit's checkout), the wheels' commands (fairseq-train) first on PATH, this Python for every script."""
    paths = [str(site)] if site else []
    env = dict(env, PYTHONUNBUFFERED="1", PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
               PATH=os.pathsep.join(([str(site / "bin")] if site else []) + [env.get("PATH", "")]))
    env.update(more)
    return env


def study(args: List[str], env: Dict[str, str], log: Path) -> subprocess.Popen:
    """``python -m tupe_study ARGS`` in its own process group (stopped as a whole, also by a signal to this command:
    ``tupe_common.process``), its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        return process.start([sys.executable, "-m", "tupe_study", *args], env=env, stdout=f,
                             stderr=subprocess.STDOUT)


def stop(*procs: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End each of ``procs`` (parts started by :func:`study`) and every process it started: SIGTERM to each part's
    process group at once, then, after ``grace_s``, SIGKILL to what is left of each part's tree, a fairseq-train in a
    group of its own included (``tupe_common.process``). All at once: a part's clean stop (its update finished,
    checkpoint_last.pt saved) takes seconds, which one after another the reserve paid for each part."""
    process.signal_children(signal.SIGTERM, procs)
    process.end_children(grace_s, procs)


def plan_parts(env: Dict[str, str], after: Sequence[str]) -> Tuple[List[str], List[Tuple[int, str]], Dict[str, int]]:
    """The study's plan from ``env``, in this process (what ``study.sh --list`` prints): every model's label and seed
    ("bert-a 1"), the pre-trainings still to do (index, label) and the number of parts still to do of each stage of
    ``after``. ``OUT/settings.env`` is written (or checked) here, as the study's first part would, its PRETRAIN_SEEDS
    line this call's seeds so far (:func:`record_seeds`): the design is recorded before the first pre-training
    starts, and the pre-trainings then start at once without two writers of it. A usage error exits 2."""
    from tupe_study.plan import Plan, check_settings
    from tupe_study.stages import BY_NAME, part_label

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


def pretrain(env: Dict[str, str], out: Path, todo: List[Tuple[int, str]], total_updates: int,
             budget: Budget) -> List[str]:
    """Every pre-training part at once; the progress every 15 s; the parts stopped at the deadline (in
    ``budget.stopped``). Returns the parts that failed ("pre-training bert-a 1")."""
    procs: Dict[str, subprocess.Popen] = {}
    part_logs: Dict[str, Tuple[Path, int]] = {}  # label -> its log, and where this call's lines in it begin
    for index, label in todo:
        log = out / "lanes" / f"pretrain-{label.replace(' ', '-seed')}.log"  # by model, not index: calls add parts
        part_logs[label] = log, log.stat().st_size if log.is_file() else 0
        procs[label] = study(["--part", "pretrain", str(index)], env, log)
        say(f"pre-training {label}: started (log {log})")
    stopped: List[str] = []
    started, shown = time.monotonic(), time.monotonic()
    logs = {label: train_log(out, label) for _, label in todo}
    while any(p.poll() is None for p in procs.values()):
        time.sleep(POLL_S)
        if time.monotonic() > budget.deadline:
            stopped = [label for label, p in procs.items() if p.poll() is None]
            stop(*(procs[label] for label in stopped))  # then the update each one finished and saved
            budget.stopped += [f"pre-training {label} (at update {updates_so_far(logs[label])})" for label in stopped]
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
    failed = [label for label, p in procs.items() if p.returncode and label not in stopped]
    for label in failed:
        said = [line for line in text_from(*part_logs[label]).splitlines()
                if line.startswith(PART_ERROR)]  # the part's own line in this call: why (a full disk: the file)
        say(f"pre-training {label} ended with exit status {procs[label].returncode}"
            + (f": {said[-1][len(PART_ERROR):]}" if said else ""))
    return [f"pre-training {label}" for label in failed]


def run_rest(env: Dict[str, str], out: Path, lanes: int, after: Sequence[str], budget: Budget) -> Tuple[int, float]:
    """``python -m tupe_study --lanes N --stages AFTER`` (the chosen stages after pre-training, then the report; only the
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
    """``python -m tupe_study --report`` in what is left of the budget (what finished; the rest named missing); its
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
    text = text_from(log, seen)
    for line in text.splitlines():
        if line.startswith(PART_PROG) and not line.startswith(f"{PART_PROG} settings"):
            print(f"  {line}", flush=True)
    return seen + len(text.encode("utf-8"))


def report_seconds(log_text: str) -> float:
    """The report stage's seconds, as the study's last "report all: finished in N s" note says."""
    found = re.findall(r"report all: finished in (\d+) s", log_text)
    return float(found[-1]) if found else 0.0



# ---- the calls on a study folder, and what comes back -----------------------------------------------------------


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


def report_to(out: Path, dest: Path, data: Path) -> List[str]:
    """The study folder into ``dest`` without what a later call does not need: the checkpoints, the files of the
    carried data folder, the TensorBoard logs, the run locks (this call's, held while it copies: a copy would refuse
    the next call on ``dest`` for the lock's stale period), and every pre-training the budget stopped (without its
    checkpoint it cannot resume; the next call redoes it). ``dest`` is then a study folder a later call adds seeds to. The
    pre-trainings left out."""
    left_out = sorted(str(p.parent.relative_to(out)) for p in (out / "pretrain").glob("*/seed*/train.log")
                      if not pretrain_finished(str(p.parent)))
    for src in sorted(out.rglob("*")):
        rel = src.relative_to(out)
        if (not src.is_file() or src.suffix == ".pt" or "tensorboard" in rel.parts or (data / rel).is_file()
                or src.name.startswith(LOCK_NAME)
                or any(str(rel).startswith(skip + os.sep) for skip in left_out)):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
    return left_out



# ---- the call: its steps in order -----------------------------------------------------------------------------


@dataclass
class Call:
    """One call of the schedule on a study folder: what :func:`settings` read, then what :func:`prepare` found and
    :func:`run` did."""
    args: argparse.Namespace  # bench/gpu_study.py's options
    out: Path
    manifest: dict  # the carried data's (bench/gpu_study_data.py)
    env: Dict[str, str]  # the study's settings; after prepare, the environment of its processes (child_env)
    finished: List[int]  # the seeds finished before this call
    seeds: List[int]  # this call's
    after: List[str]  # the study's stages run after pre-training
    budget: Budget
    device: str = ""
    config: Optional[StudyConfig] = None
    models: List[str] = field(default_factory=list)  # every pre-training of the seeds so far ("bert-a 1")
    todo: List[Tuple[int, str]] = field(default_factory=list)  # the pre-trainings this call runs (index, label)
    rest: Dict[str, int] = field(default_factory=dict)  # the parts still to do of each stage of ``after``
    workers: int = 0  # data-loader workers of each pre-training
    threads: str = "1"  # OMP and MKL threads of each pre-training
    exit_status: int = 0
    failed: List[str] = field(default_factory=list)  # the parts of this call that failed ("pre-training bert-a 1")


def settings(args: argparse.Namespace) -> Call:
    """This call's settings and seeds from the options, the environment, the data's manifest and the study folder;
    a :class:`UsageError` before anything is written."""
    after = [] if args.after == "none" else args.after.split(",")
    if args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds}: a whole number of seeds, 1 or more")
    bad = [s for s in after if s not in AFTER_PRETRAINING]
    if bad:
        raise UsageError(f"--after {args.after}: the stages after pre-training are {', '.join(AFTER_PRETRAINING)} "
                         f"(or none), not {bad[0]}")
    manifest = read_manifest(args.data)
    out = args.out.resolve()
    env, finished, seeds = settings_env(manifest, args.data.resolve(), out, args.dry_run, args.seeds)
    return Call(args, out, manifest, env, finished, seeds, after, Budget(args.budget_s, args.reserve_s))


def prepare(call: Call, install: Callable[[argparse.Namespace, Path], str]) -> None:
    """1-3 and the study's plan, each a part of the budget: the device, the carried wheels (``install(args, OUT)``,
    the GPU kit's: what it said), the carried data, the settings recorded and the parts listed; the data-loader
    workers and threads of each pre-training."""
    args, budget = call.args, call.budget
    torch_version, call.device = card(args.dry_run)
    call.out.mkdir(parents=True, exist_ok=True)
    budget.done("start-up", f"Python {sys.version.split()[0]}, torch {torch_version}, {call.device}; the settings read")
    said = install(args, call.out)
    site = args.site.resolve() if args.wheels is not None and not args.no_install else None
    budget.done("install", said or "the carried wheels")
    copied = copy_data(args.data, call.out)
    budget.done("data", f"{args.data.name} (PRESET={call.env['PRESET']}, {call.manifest['bytes'] / 2**20:.1f} MiB; "
                        f"{copied / 2**20:.1f} MiB copied into OUT)")

    call.env = child_env(call.env, site)
    if site:
        sys.path.insert(0, str(site))  # the plan imports the registry (torch): the carried wheels first
    call.models, call.todo, call.rest = plan_parts(call.env, call.after)
    budget.done("study plan", "the settings checked and recorded (OUT/settings.env, ENDPOINTS with them), the parts "
                              "listed")
    n = max(1, len(call.todo))
    # each pre-training: its main process (one core: it waits on the GPU) and its share of the cores left
    call.workers = (args.pretrain_workers if args.pretrain_workers is not None
                    else min(4, max(1, math.ceil((cores() - n) / n))))
    call.threads = str(max(1, min(4, cores() // n)))
    config = call.config = read(call.env)
    say(f"seeds finished before: {', '.join(map(str, call.finished)) or 'none'}; this call: "
        f"{', '.join(map(str, call.seeds))}; ENDPOINTS={config.ENDPOINTS}; {len(call.todo)} pre-training(s) to run at "
        f"once (PRESET={config.PRESET}, {config.TOTAL_UPDATES} updates of {config.SENTENCES_PER_UPDATE} sequences), "
        f"{call.workers} data-loader worker(s) each")


def run(call: Call) -> int:
    """4-5: every pre-training of the call at once, then the stages after pre-training and the report (only the
    report when the pre-training took the budget), each a part of the budget; the call recorded in
    ``OUT/gpu_calls.tsv``. The exit status: 1 when a part failed or the budget stopped one."""
    args, budget, out, todo, env = call.args, call.budget, call.out, call.todo, call.env
    call.failed = pretrain(child_env(env, None, NUM_WORKERS=str(call.workers), OMP_NUM_THREADS=call.threads,
                                     MKL_NUM_THREADS=call.threads), out, todo, call.config.TOTAL_UPDATES,
                           budget) if todo else []
    budget.done("pre-training", f"{len(todo)} model(s) at once on one {'CPU' if args.dry_run else 'GPU'}, "
                                f"{call.workers} data-loader worker(s) each" if todo else "done before")
    lanes = args.lanes or max(2, min(8, cores() // 2))
    rest_env = child_env(env, None, NUM_WORKERS="0")
    if time.monotonic() < budget.deadline:
        stopped = len(budget.stopped)
        rest_rc, report_s = run_rest(rest_env, out, lanes, call.after, budget)
        if rest_rc and len(budget.stopped) == stopped:  # failed on its own (the study's lines above name the part)
            call.failed.append("the stages after pre-training" if call.after else "the report")
    else:  # the pre-training took the budget: the report of what there is
        if any(call.rest.values()):  # no part after pre-training ran: said, and the call is not done (exit 1)
            budget.stopped.append("the stages after pre-training (no time left for them)")
        report_s = report_only(rest_env, out, budget)
    what = ", ".join(f"{AFTER_PRETRAINING[name]} {k}" for name, k in call.rest.items() if k)
    budget.done("after pre-training", f"{sum(call.rest.values())} part(s) ({what or 'none to do'}), {lanes} at once")
    budget.parts[-1].seconds -= report_s
    budget.parts.append(Part("report", report_s, "report.md, the CSV tables, overview.png"))
    call.exit_status = 1 if call.failed or budget.stopped else 0
    record_call(out, {"utc": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}", "machine": call.device,
                      "seeds": " ".join(map(str, call.seeds)), "at_once": str(len(todo)), "workers": str(call.workers),
                      "seconds": f"{sum(p.seconds for p in budget.parts):.0f}", "exit": str(call.exit_status)})
    return call.exit_status


def send_back(call: Call) -> None:
    """``--report-to``: the study folder copied there (:func:`report_to`), what was left out said."""
    dest = call.args.report_to
    if dest and dest.resolve() != call.out:
        left_out = report_to(call.out, dest.resolve(), call.args.data.resolve())
        if left_out:
            say(f"not copied into {dest} (stopped at the budget; the next call redoes them): " + ", ".join(left_out))
