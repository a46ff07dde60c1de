"""The paper's GLUE grid (tasks x LRs x seeds) for ``glue/grid.sh`` and ``glue/grid.sbatch``.

Job ``i`` is the i-th (task, lr, seed) with seeds varying fastest, then LRs, then tasks, so a SLURM
array index and a local run agree on what ``i`` is as long as TASKS, LRS and SEEDS are the same.
A job is done when ``RUNS/TASK/lr{LR}_seed{SEED}/result.json`` can be read and scores every valid
subset of the task (``glue/finetune.sh`` writes it last); an empty or corrupt one is a job to redo.
Tasks: the registry ``glue.tasks`` (``--tasks auto``: the paper's 8 and the custom tasks of ``--glue-bin``).

    python -m glue.grid list  [--tasks ...] [--lrs ...] [--seeds ...] [--runs RUNS]   # index, job, status
    python -m glue.grid job INDEX [...]                # "TASK LR SEED" of one index (grid.sbatch)
    python -m glue.grid array [...]                    # the not-done indices as a SLURM --array value
    python -m glue.grid run --jobs N [--gpus 0,1] [...]   # run the not-done jobs locally, N at a time
    python -m glue.grid check [...]                    # exit 1 unless every not-done job has its binaries
    python -m glue.grid tasks [...]                    # the tasks of the grid, resolved (auto -> names)

``array``, ``run`` and ``check`` refuse (exit 1, a missing input) when a task to run has no
``GLUE_BIN/TASK-bin``; ``run`` stops starting runs when one exits 2 (a usage error, which every run would
repeat). Local runs go through the project's one job runner (``tupe_common.jobs``).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import List, NamedTuple, Optional, Sequence

from glue.collect import read_result_json
from glue.tasks import PAPER_LRS, PAPER_SEEDS, PAPER_TASKS, TASKS, custom_bin_names, get_task
from tupe_common import jobs as runner
from tupe_common.log import get_logger

FINETUNE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "finetune.sh")
log = get_logger("grid")


class Job(NamedTuple):
    index: int
    task: str
    lr: str
    seed: str

    @property
    def name(self) -> str:
        return f"lr{self.lr}_seed{self.seed}"

    def done(self, runs: str) -> bool:
        """A readable ``result.json`` with a score for every valid subset of the task."""
        path = os.path.join(runs, self.task, self.name, "result.json")
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


def missing_binaries(todo: Sequence[Job], glue_bin: str) -> List[str]:
    """The ``GLUE_BIN/TASK-bin`` folders that jobs to do need and that do not exist."""
    folders = dict.fromkeys(os.path.join(glue_bin, f"{j.task}-bin") for j in todo)
    return [f for f in folders if not os.path.isdir(f)]


def run_local(todo: List[Job], runs: str, n_slots: int, gpus: List[str], script: str) -> int:
    """Run ``script TASK LR SEED`` for each job with tupe_common.jobs' runner, ``n_slots`` at a time, slot k on GPU
    gpus[k % len], each run's output in RUNS/.grid_logs/TASK/NAME.out. A run that exits 2 (a usage error: the
    same for every run) stops the grid: no new run starts, the running ones finish, and the grid exits 2."""
    env = dict(os.environ, QUIET="1", RUNS=runs)
    todo_jobs = [runner.Job(f"{j.task} {j.name}", [script, j.task, j.lr, j.seed],
                            os.path.join(runs, ".grid_logs", j.task, f"{j.name}.out")) for j in todo]
    ran = runner.run_jobs(todo_jobs, n_slots, env, say=log.info, gpus=gpus, stop_on_usage_error=True)
    if ran.usage_error:
        return 2
    if ran.failed:
        log.error(f"{len(ran.failed)} of {len(todo)} run(s) failed: " + ", ".join(ran.failed))
        return 1
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m glue.grid", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["list", "job", "array", "run", "tasks", "check"])
    p.add_argument("index", nargs="?", type=int, help="job index (command job)")
    p.add_argument("--tasks", default="auto",
                   help=f"task names, or auto (default): the paper's 8 ({' '.join(PAPER_TASKS)}) and the custom "
                        "tasks binarized in --glue-bin")
    p.add_argument("--glue-bin", default=os.environ.get("GLUE_BIN", "glue-bin"),
                   help="binaries of preprocess.glue_binarize (custom tasks are found there; default $GLUE_BIN or glue-bin)")
    p.add_argument("--lrs", default=" ".join(PAPER_LRS), help=f"default: the paper's {' '.join(PAPER_LRS)}")
    p.add_argument("--seeds", default=" ".join(PAPER_SEEDS), help=f"default: {' '.join(PAPER_SEEDS)}")
    p.add_argument("--runs", default="runs", help="output root of glue/finetune.sh (default runs)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (command run)")
    p.add_argument("--gpus", default="", help="GPU ids for the slots, e.g. 0,1,2,3 (command run; default: none)")
    p.add_argument("--script", default=FINETUNE, help="what to run for each job (default glue/finetune.sh)")
    args = p.parse_args(argv)
    custom = custom_bin_names(args.glue_bin)
    tasks = list(PAPER_TASKS) + custom if args.tasks.strip() == "auto" else split_list(args.tasks)
    lrs, seeds = split_list(args.lrs), split_list(args.seeds)
    unknown = [t for t in tasks if t not in TASKS and t not in custom]
    if unknown or not (tasks and lrs and seeds):
        p.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)} or the custom tasks "
                f"binarized in {args.glue_bin} ({', '.join(custom) or 'none'})" if unknown
                else "--tasks, --lrs and --seeds must not be empty")
    grid = jobs(tasks, lrs, seeds)
    if args.command == "tasks":
        print(" ".join(tasks))
        return 0
    if args.command == "job":
        if args.index is None or not 0 <= args.index < len(grid):
            p.error(f"job needs an index in 0..{len(grid) - 1} (the grid has {len(grid)} jobs)")
        job = grid[args.index]
        print(job.task, job.lr, job.seed)
        return 0
    todo = [j for j in grid if not j.done(args.runs)]
    if args.command == "list":
        for j in grid:
            print(f"{j.index}\t{j.task}\t{j.lr}\t{j.seed}\t{'todo' if j in todo else 'done'}")
        return 0
    missing = missing_binaries(todo, args.glue_bin)
    if missing and args.command in ("array", "run", "check"):
        print(f"{p.prog}: error: {', '.join(missing)}: no such folder (--glue-bin {args.glue_bin}); binarize the "
              "tasks with python -m preprocess.glue_binarize first", file=sys.stderr)
        return 1  # a missing input, as everywhere (docs/troubleshooting.md: exit codes)
    if args.command == "check":  # grid.sh: every run still to do has its binaries
        return 0
    if args.command == "array":
        print(runner.slurm_ranges([j.index for j in todo]))
        return 0
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    log.info(f"{len(grid)} runs ({len(tasks)} task(s) x {len(lrs)} LR(s) x {len(seeds)} seed(s)), "
             f"{len(grid) - len(todo)} done, {len(todo)} to run, {args.jobs} at a time")
    return run_local(todo, args.runs, args.jobs, split_list(args.gpus), args.script)


if __name__ == "__main__":
    sys.exit(main())
