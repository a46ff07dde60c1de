"""The paper's GLUE grid (tasks x LRs x seeds) for ``glue/grid.sh`` and ``glue/grid.sbatch``.

Job ``i`` is the i-th (task, lr, seed) with seeds varying fastest, then LRs, then tasks, so a SLURM
array index and a local run agree on what ``i`` is as long as TASKS, LRS and SEEDS are the same.
A job is done when ``RUNS/TASK/lr{LR}_seed{SEED}/result.json`` can be read and scores every valid
subset of the task (``glue/finetune.sh`` writes it last); an empty or corrupt one is a job to redo. The folder is
found by value (``tupe_glue.finetune.run_name``: ``lr0.001_seed1`` is the job of LR 1e-3), and a list holding one value
twice (``LRS="1e-3 0.001"``) is refused.
Tasks: the registry ``tupe_glue.tasks`` (``--tasks auto``: the paper's 8 and the custom tasks of ``--glue-bin``).

    python -m tupe_glue.grid list  [--tasks ...] [--lrs ...] [--seeds ...] [--runs RUNS]   # index, job, status
    python -m tupe_glue.grid job INDEX [...]                # "TASK LR SEED" of one index (grid.sbatch)
    python -m tupe_glue.grid array [...]                    # the not-done indices as a SLURM --array value
    python -m tupe_glue.grid run --jobs N [--gpus 0,1] [...]   # run the not-done jobs locally, N at a time
    python -m tupe_glue.grid check [...]                    # exit 1 unless every not-done job has its binaries
    python -m tupe_glue.grid tasks [...]                    # the tasks of the grid, resolved (auto -> names)
    python -m tupe_glue.grid sh [--slurm | --list]          # glue/grid.sh: the settings from the environment

``array``, ``run`` and ``check`` refuse (exit 1, a missing input) when a task to run has no
``GLUE_BIN/TASK-bin``; ``run`` stops starting runs when one exits 2 (a usage error, which every run would
repeat). Local runs go through the project's one job runner (``tupe_common.jobs``). ``sh`` is all of
``glue/grid.sh`` (a thin entry point): its settings (:class:`GridConfig`) read from the environment, the checkpoint and
binaries checked before the first run, the runs, then the table (``tupe_glue.collect``).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import shlex
import sys
from dataclasses import dataclass
from typing import List, Mapping, NamedTuple, Optional, Sequence, Tuple

from tupe_glue.collect import read_result_json
from tupe_glue.finetune import run_name
from tupe_glue.tasks import PAPER_LRS, PAPER_SEEDS, PAPER_TASKS, TASKS, custom_bin_names, get_task
from tupe_common import jobs as runner
from tupe_common import tunables
from tupe_common.errors import command_name, RESUME_RUNS, UsageError, exit_main, stdout_reader_left
from tupe_common.log import get_logger
from tupe_common.numbers import check_once
from tupe_common.tunables import Num, Settings, setting

FINETUNE = (sys.executable, "-m", "tupe_glue.finetune")  # each run: what glue/finetune.sh and tupe-finetune run
PROG = command_name("grid.sh")
log = get_logger(PROG)  # its lines start as its own: grid.sh: or tupe-grid:

@dataclass(frozen=True)
class GridConfig(Settings):
    """glue/grid.sh's settings (every setting of glue/finetune.sh passes through to its runs)."""

    TASKS: str = setting("auto", f"tasks (spaces or commas); auto: the paper's {' '.join(PAPER_TASKS)} and every "
                         "custom task binarized in GLUE_BIN")
    LRS: Tuple[float, ...] = setting(" ".join(PAPER_LRS), "learning rates (default: the paper's)", "[num+]")
    SEEDS: Tuple[int, ...] = setting(" ".join(PAPER_SEEDS), "seeds (default: the paper's)", "[int]")
    RUNS: str = setting("runs", "output root (RUNS/TASK/lr{LR}_seed{SEED}/)")
    GLUE_BIN: str = setting("glue-bin", "binaries of python -m tupe_preprocess.glue_binarize (TASK-bin/)")
    JOBS: Optional[int] = setting("auto", "runs at a time, locally (auto: one per GPU, 1 on CPU)", "auto/int1")
    GPU_IDS: str = setting("auto", "GPUs for the local runs (auto: all visible; none on CPU)")
    CHECKPOINT: str = setting("", "pre-trained checkpoint (required; see tupe-finetune --help for the rest)")


USAGE = """The paper's GLUE grid: every task x LR x seed (by default the paper's {n_tasks} tasks, {n_lrs} LRs and {n_seeds}
seeds: {n_runs} runs), one tupe-finetune run each, then the results table (tupe-collect RUNS).

Examples (every variable of tupe-finetune passes through; glue/grid.sh, from a checkout, is the same command):
  CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt RUNS=runs/tupe_r tupe-grid        # all GPUs
  CHECKPOINT=... TASKS="RTE MRPC" SEEDS="1 2 3" JOBS=2 GPU_IDS="0 1" tupe-grid
  CHECKPOINT=... RUNS=runs/tupe_r tupe-grid --slurm     # print the sbatch command (glue/grid.sbatch)
  RUNS=runs/tupe_r tupe-grid --list                     # index, task, LR, seed, done/todo

Finished runs (a readable result.json) are skipped, so rerunning or resubmitting only does what is
missing; a run whose result.json is empty or corrupt is redone (tupe-finetune moves it aside).
Tasks and their facts: tupe_glue/tasks.py; the protocol: docs/glue_protocol.md.
Locally, JOBS runs go at a time, run k on GPU GPU_IDS[k % n]; their output is in RUNS/.grid_logs/.
CHECKPOINT and the binaries of the tasks to run are checked before the first run, and a run that fails
with a usage error (exit 2, e.g. a bad EXTRA_ARGS) stops the grid: the other runs would repeat it.
The logic is tupe_glue/grid.py.

Usage: [NAME=value ...] grid.sh [--slurm | --list]

Environment (default, meaning):
""".format(n_tasks=len(PAPER_TASKS), n_lrs=len(PAPER_LRS), n_seeds=len(PAPER_SEEDS),
           n_runs=len(PAPER_TASKS) * len(PAPER_LRS) * len(PAPER_SEEDS))


class Job(NamedTuple):
    index: int
    task: str
    lr: str
    seed: str

    def name(self, runs: str) -> str:
        """The run's folder name in RUNS/TASK/ (``tupe_glue.finetune.run_name``: by value, ``lr1e-3_seed1`` for 0.001)."""
        return run_name(runs, self.task, float(self.lr), int(self.seed))

    def done(self, runs: str) -> bool:
        """A readable ``result.json`` with a score for every valid subset of the task."""
        path = os.path.join(runs, self.task, self.name(runs), "result.json")
        if not os.path.isfile(path):
            return False
        spec = get_task(self.task, custom=True)
        try:
            scores = read_result_json(path, spec.name, spec.metric)
        except (OSError, ValueError):
            return False
        return all(s in scores for s in spec.valid_subsets)


def split_list(text: str) -> List[str]:
    return [x for x in text.replace(",", " ").split() if x]


def jobs(tasks: Sequence[str], lrs: Sequence[str], seeds: Sequence[str]) -> List[Job]:
    return [Job(i, t, lr, s) for i, (t, lr, s) in enumerate(itertools.product(tasks, lrs, seeds))]


def missing_binaries(todo: Sequence[Job], glue_bin: str, named: str) -> Optional[str]:
    """The error line when ``GLUE_BIN/TASK-bin`` folders that jobs to do need do not exist (``named``: how the caller
    was given ``glue_bin``), else None."""
    folders = dict.fromkeys(os.path.join(glue_bin, f"{j.task}-bin") for j in todo)
    missing = [f for f in folders if not os.path.isdir(f)]
    return (f"{', '.join(missing)}: no such folder ({named}); binarize the tasks with python -m "
            "tupe_preprocess.glue_binarize first") if missing else None


def run_local(todo: List[Job], runs: str, n_slots: int, gpus: List[str], script: Sequence[str],
              environ: Mapping[str, str] = os.environ) -> Tuple[int, List[str]]:
    """Run the command ``script`` with ``TASK LR SEED`` for each job with tupe_common.jobs' runner, ``n_slots`` at a time, slot k on GPU
    gpus[k % len], each run's output in RUNS/.grid_logs/TASK/NAME.out, in ``environ`` (finetune.sh's settings;
    grid.sh's own left out: tupe_common.tunables.child_environ). A
    run that exits 2 (a usage error: the same for every run) stops the grid: no new run starts, the running ones
    finish, and the grid exits 2. Returns the exit status and the runs that failed."""
    from tupe_glue import finetune

    env = dict(tunables.child_environ(environ, GridConfig.names(), finetune.FinetuneConfig.names()), QUIET="1",
               RUNS=runs)
    names = [j.name(runs) for j in todo]  # each a look into RUNS/TASK/: once
    todo_jobs = [runner.Job(f"{j.task} {name}", [*script, j.task, j.lr, j.seed],
                            os.path.join(runs, ".grid_logs", j.task, f"{name}.out")) for j, name in zip(todo, names)]
    ran = runner.run_jobs(todo_jobs, n_slots, env, say=log.info, gpus=gpus, stop_on_usage_error=True)
    if ran.usage_error:
        return 2, ran.failed
    return (1 if ran.failed else 0), ran.failed


def failed_line(failed: Sequence[str], n_runs: int) -> str:
    """The grid's last line when runs failed (each run's own line above names why)."""
    return f"{len(failed)} of {n_runs} run(s) failed: {', '.join(failed)}; {RESUME_RUNS}"


def runs_with_other_inputs(done: Sequence[Job], runs: str, environ: Mapping[str, str],
                           grid_settings: GridConfig) -> Optional[str]:
    """The error line when finished runs of the grid were made with other inputs than glue/finetune.sh would use
    now (``tupe_glue.finetune.run_inputs``: the checkpoint, the binaries, every setting that changes a result), else
    None: the grid would count them done and the table would mix them with new ones."""
    from tupe_glue import finetune

    settings = finetune.read(environ, say=lambda line: None)
    settings = dataclasses.replace(settings, CHECKPOINT=grid_settings.CHECKPOINT, GLUE_BIN=grid_settings.GLUE_BIN,
                                   RUNS=runs)
    differ = []
    for job in done:
        if not os.path.isdir(os.path.join(settings.GLUE_BIN, f"{job.task}-bin")):
            continue  # binaries removed after the run: its inputs cannot be compared (the table still reads it)
        name = job.name(runs)
        why = finetune.other_inputs(os.path.join(runs, job.task, name, "result.json"),
                                    finetune.run_inputs(settings, job.task, Num(job.lr), int(job.seed)), settings.CHECKPOINT)
        if why:
            differ.append(f"{job.task} {name} ({why})")
    if not differ:
        return None
    return (f"{len(differ)} finished run(s) in {runs} were made with other inputs: {differ[0]}"
            + (f", and {len(differ) - 1} more" if len(differ) > 1 else "")
            + "; set RUNS to another folder, or move those runs away to redo them")


def print_list(grid: Sequence[Job], todo: Sequence[Job]) -> None:
    """A line per job: index, task, LR, seed, todo or done (tab-separated)."""
    for j in grid:
        print(f"{j.index}\t{j.task}\t{j.lr}\t{j.seed}\t{'todo' if j in todo else 'done'}")


def announce(grid: Sequence[Job], todo: Sequence[Job], tasks: Sequence[str], lrs: Sequence[str],
             seeds: Sequence[str], n_jobs: int) -> None:
    log.info(f"{len(grid)} runs ({len(tasks)} task(s) x {len(lrs)} LR(s) x {len(seeds)} seed(s)), "
             f"{len(grid) - len(todo)} done, {len(todo)} to run, {n_jobs} at a time")


def grid_of(tasks: str, lrs: str, seeds: str, glue_bin: str) -> Tuple[List[str], List[str], List[str], List[Job]]:
    """The tasks, LRs and seeds of a grid's settings (spaces or commas; tasks ``auto``: the paper's and the custom
    tasks binarized in ``glue_bin``) and its jobs; a UsageError names an unknown task, an empty list or a value
    given twice (numbers by value: ``LRS="1e-3 0.001"``)."""
    custom = custom_bin_names(glue_bin)
    names = list(PAPER_TASKS) + custom if tasks.strip() == "auto" else split_list(tasks)
    unknown = [t for t in names if t not in TASKS and t not in custom]
    if unknown:
        raise UsageError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)} or the custom tasks "
                         f"binarized in {glue_bin} ({', '.join(custom) or 'none'})")
    lr_list, seed_list = split_list(lrs), split_list(seeds)
    if not (names and lr_list and seed_list):
        raise UsageError("TASKS, LRS and SEEDS (--tasks, --lrs, --seeds) must not be empty")
    for name, values, noun in (("TASKS", names, "task"), ("LRS", lr_list, "LR"), ("SEEDS", seed_list, "seed")):
        check_once(f"{name}='{' '.join(values)}'", values, noun)  # one run folder each, by value (1e-3 is 0.001)
    return names, lr_list, seed_list, jobs(names, lr_list, seed_list)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sh"]:
        return main_sh(argv[1:], os.environ)
    p = argparse.ArgumentParser(prog="python -m tupe_glue.grid", description=__doc__.split("\n\n")[0],
                                epilog="python -m tupe_glue.grid sh [--slurm | --list] is tupe-grid: its settings come "
                                       "from the environment (tupe-grid --help), and it takes no option above")
    p.add_argument("command", choices=["list", "job", "array", "run", "tasks", "check"])
    p.add_argument("index", nargs="?", type=int, help="job index (command job)")
    p.add_argument("--tasks", default="auto",
                   help=f"task names, or auto (default): the paper's 8 ({' '.join(PAPER_TASKS)}) and the custom "
                        "tasks binarized in --glue-bin")
    p.add_argument("--glue-bin", default=os.environ.get("GLUE_BIN", "glue-bin"),
                   help="binaries of tupe_preprocess.glue_binarize (custom tasks are found there; default $GLUE_BIN or glue-bin)")
    p.add_argument("--lrs", default=" ".join(PAPER_LRS), help=f"default: the paper's {' '.join(PAPER_LRS)}")
    p.add_argument("--seeds", default=" ".join(PAPER_SEEDS), help=f"default: {' '.join(PAPER_SEEDS)}")
    p.add_argument("--runs", default=os.environ.get("RUNS", "runs"),
                   help="output root of tupe-finetune (default $RUNS or runs)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (command run)")
    p.add_argument("--gpus", default="", help="GPU ids for the slots, e.g. 0,1,2,3 (command run; default: none)")
    p.add_argument("--script", help="a program to run for each job as SCRIPT TASK LR SEED (default: tupe-finetune's code)")
    args = p.parse_args(argv)
    try:
        tasks, lrs, seeds, grid = grid_of(args.tasks, args.lrs, args.seeds, args.glue_bin)
        todo = [j for j in grid if not j.done(args.runs)] if args.command not in ("tasks", "job") else []
    except UsageError as e:
        p.error(str(e))
    if args.command == "tasks":
        print(" ".join(tasks))
        return 0
    if args.command == "job":
        if args.index is None or not 0 <= args.index < len(grid):
            p.error(f"job needs an index in 0..{len(grid) - 1} (the grid has {len(grid)} jobs)")
        job = grid[args.index]
        print(job.task, job.lr, job.seed)
        return 0
    if args.command == "list":
        print_list(grid, todo)
        return 0
    missing = missing_binaries(todo, args.glue_bin, f"--glue-bin {args.glue_bin}")
    if missing:  # array, run and check
        print(f"{p.prog}: error: {missing}", file=sys.stderr)
        return 1  # a missing input, as everywhere (docs/troubleshooting.md: exit codes)
    if args.command == "check":  # grid.sh: every run still to do has its binaries
        return 0
    if args.command == "array":
        print(runner.slurm_ranges([j.index for j in todo]))
        return 0
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    announce(grid, todo, tasks, lrs, seeds, args.jobs)
    status, failed = run_local(todo, args.runs, args.jobs, split_list(args.gpus),
                               [args.script] if args.script else FINETUNE)
    if failed and status == 1:
        log.error(failed_line(failed, len(todo)))
    return status


def say(line: str) -> None:
    sys.stderr.write(f"{PROG}: {line}\n")


def check_gpu_ids(setting: str, ids: Sequence[str], count) -> None:
    """GPU_IDS given by hand must name CUDA devices this machine sees (``count()``: how many), else a UsageError
    before any run (each run would fine-tune on the CPU, or fail, on an id that is not there)."""
    if setting in ("auto", "none"):
        return
    visible = count()
    bad = [g for g in ids if not g.isdigit() or int(g) >= visible]
    if bad:
        raise UsageError(f"GPU_IDS='{setting}' names {' '.join(bad)}, but this machine sees {visible} CUDA device(s)"
                         f"{f' (0..{visible - 1})' if visible else ''}: set GPU_IDS=auto, or none to run on the CPU")


def collect_args(runs: str, lrs: Sequence[str], seeds: Sequence[str]) -> List[str]:
    """tupe-collect's arguments for the grid's runs: its defaults are the paper's grid, which would count no run of
    another one."""
    return [runs, "--expected-lrs", ",".join(lrs), "--expected-seeds", ",".join(seeds)]


def slurm_settings(grid_settings: GridConfig, tuned, tasks: Sequence[str], lrs: Sequence[str],
                   seeds: Sequence[str]) -> str:
    """The environment an array job needs, as a shell prefix (values quoted): where its inputs and runs are, the
    grid, and every fine-tuning setting that is not its default (an array job reads the environment of its
    submission: a setting given to grid.sh alone would be lost, and the grid's runs made with the defaults)."""
    from tupe_glue import finetune

    values = {"CHECKPOINT": grid_settings.CHECKPOINT, "GLUE_BIN": grid_settings.GLUE_BIN, "RUNS": grid_settings.RUNS,
              "TASKS": " ".join(tasks), "LRS": " ".join(lrs), "SEEDS": " ".join(seeds)}
    values.update({t.name: tuned.text(t.name) for t in finetune.FinetuneConfig.tunables()
                   if t.name not in values and tuned.text(t.name) != t.default})
    return " ".join(f"{name}={shlex.quote(str(value))}" for name, value in values.items())


def main_sh(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """``glue/grid.sh [--slurm | --list]``: the settings from ``environ``; exit 2 on a usage error, 1 when the
    checkpoint, a task's binaries or a run fail."""
    if list(argv[:1]) in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + tunables.usage_rows(GridConfig.tunables()))
        return 0
    if len(argv) > 1 or argv and argv[0] not in ("--slurm", "--list"):
        sys.stderr.write(USAGE + tunables.usage_rows(GridConfig.tunables()))
        return 2
    mode = argv[0][2:] if argv else "local"
    from tupe_glue import finetune

    try:  # every variable of finetune.sh passes through, and is checked before the first run
        tunables.check_names([*GridConfig.names(), *finetune.FinetuneConfig.names()], environ, PROG,
                             others={**GridConfig.others(), **finetune.FinetuneConfig.others()})
        c = GridConfig.read(environ, say)
        say(tunables.shown(c))
        tasks, lrs, seeds, grid = grid_of(c.TASKS, c.text("LRS"), c.text("SEEDS"), c.GLUE_BIN)
        say(f"tasks: {' '.join(tasks)}")
        tuned = finetune.read(environ, say=lambda line: None)
        todo = [j for j in grid if not j.done(c.RUNS)]  # a run in two folders (lr1e-3_seed1, lr0.001_seed1) refused
    except UsageError as e:
        say(f"error: {e}")
        return 2
    python = environ.get("PYTHON") or "python"
    if mode == "list":
        print_list(grid, todo)
        return 0
    if mode == "slurm" and not todo:
        print(f"all {len(grid)} runs are done; the table: {python} -m tupe_glue.collect "
              f"{shlex.join(collect_args(c.RUNS, lrs, seeds))}")
        return 0
    if not c.CHECKPOINT:
        say("error: CHECKPOINT is required: the pre-trained checkpoint to fine-tune")
        return 2
    from tupe_common.errors import message
    from tupe_common.io import need

    try:  # missing, or a folder: one line naming it (its contents are each run's check, finetune.sh's)
        need(c.CHECKPOINT)
    except OSError as e:
        say(f"error: CHECKPOINT={message(e)}")
        return 1
    missing = missing_binaries(todo, c.GLUE_BIN, f"GLUE_BIN={c.GLUE_BIN}")
    if missing:
        say(f"error: {missing}")
        return 1  # a missing input, as everywhere (docs/troubleshooting.md: exit codes)
    made_otherwise = runs_with_other_inputs([j for j in grid if j not in todo], c.RUNS, environ, c)
    if made_otherwise:
        say(f"error: {made_otherwise}")
        return 2
    if mode == "slurm":
        print(f"# {len(todo)} of {len(grid)} runs to do; submit from the repository root (add %N to the array to run N "
              "at a time):")
        print(f"{slurm_settings(c, tuned, tasks, lrs, seeds)} sbatch "
              f"--array={runner.slurm_ranges([j.index for j in todo])} glue/grid.sbatch")
        print(f"# then: {python} -m tupe_glue.collect {shlex.join(collect_args(c.RUNS, lrs, seeds))}")
        return 0
    gpus = (" ".join(map(str, range(runner.cuda_device_count()))) if c.GPU_IDS == "auto"
            else "" if c.GPU_IDS == "none" else c.GPU_IDS)
    try:
        check_gpu_ids(c.GPU_IDS, split_list(gpus), runner.cuda_device_count)
        n_jobs = (len(split_list(gpus)) or 1) if c.JOBS is None else c.JOBS
    except UsageError as e:
        say(f"error: {e}")
        return 2
    from tupe_common.lock import LockHeld, folder_lock, hold

    try:  # one grid per RUNS (tupe_common.lock; each run also holds its own: finetune.run_lock)
        grid_lock = hold(folder_lock(c.RUNS), PROG, "RUNS", say)
    except LockHeld as e:
        say(f"error: {e}")
        return 2
    with grid_lock:
        say(f"local runs: JOBS={n_jobs} GPU_IDS='{gpus}'")
        announce(grid, todo, tasks, lrs, seeds, n_jobs)
        env = {**environ, "CHECKPOINT": c.CHECKPOINT, "GLUE_BIN": c.GLUE_BIN}
        status, failed = run_local(todo, c.RUNS, n_jobs, split_list(gpus), FINETUNE, env)
        if status == 2:  # refused, or stopped at a usage error: no table
            return 2
        from tupe_glue import collect

        collected = collect.main(collect_args(c.RUNS, lrs, seeds))
    if failed:  # the last line, after the table of the finished runs
        say(f"error: {failed_line(failed, len(todo))}")
    return status or collected


def cli() -> None:
    """The console script ``tupe-grid``."""
    exit_main(lambda: main(["sh", *sys.argv[1:]]), "tupe-grid", RESUME_RUNS)


if __name__ == "__main__":
    try:
        exit_main(main, "grid.sh", RESUME_RUNS)
    except BrokenPipeError:  # `grid.sh --list | head`: the reader is gone
        stdout_reader_left()
        sys.exit(141)
