"""``python -m tupe_preprocess.c4``: the C4 pipeline, C4 files -> sentencepiece -> fairseq binary shards, as one command.

    python -m tupe_preprocess.c4 download [--out-dir c4/en --shards 0-31 ...]   C4 files from the Hugging Face hub
    python -m tupe_preprocess.c4 run [C4_DIR]          steps 1-4 for a folder of C4 files, JOBS tasks at a time
    python -m tupe_preprocess.c4 task STEP INDEX       one task of one step, with run's settings (SLURM arrays)
    python -m tupe_preprocess.c4 slurm [C4_DIR]        the sbatch commands of those tasks, an array per step
    python -m tupe_preprocess.c4 extract|spm|binarize|layout ARGS...   one step on files you name

``run``, ``task`` and ``slurm`` read their settings from the environment (``run --help`` lists them; run_all.sh and
slurm_array.sbatch are their shell entry points); the steps take options (``STEP --help``).
Exit status: 0 done; 1 a step failed (the message names the file); 2 a usage error or outputs made with other
settings (nothing was changed).
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from tupe_preprocess.c4 import pipeline
from tupe_common import tunables
from tupe_common.errors import UsageError, exit_main

RESUME_TASKS = "rerun the same command to resume (finished tasks are skipped)"

USAGE = {"run": "[NAME=value ...] python -m tupe_preprocess.c4 run [C4_DIR]   (tupe-c4 run; from a checkout also preprocess/c4/run_all.sh)",
         "task": "[NAME=value ...] python -m tupe_preprocess.c4 task STEP INDEX   (STEP: " + " ".join(pipeline.STEPS) + ")",
         "slurm": "[NAME=value ...] python -m tupe_preprocess.c4 slurm [C4_DIR]"}


def usage(command: str) -> str:
    return (f"{pipeline.__doc__}\nUsage: {USAGE[command]}\n\nEnvironment (default, meaning):\n"
            + tunables.usage_rows(pipeline.config_class().tunables()))


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else ""
    if command in pipeline.STEP_COMMANDS:
        return pipeline.step_main(command)(args[1:])
    if command not in USAGE:
        print(__doc__ if command in ("-h", "--help") else f"{__doc__}\nerror: no subcommand '{command}'",
              file=sys.stdout if command in ("-h", "--help") else sys.stderr)
        return 0 if command in ("-h", "--help") else 2
    rest = args[1:]
    if rest[:1] in (["-h"], ["--help"]):
        print(usage(command))
        return 0
    try:
        tunables.check_names(pipeline.config_class().names(), os.environ, f"python -m tupe_preprocess.c4 {command}")
        if command in ("run", "slurm"):
            if len(rest) > 1:
                raise UsageError(f"{command} takes at most one argument, C4_DIR (not {' '.join(rest)})")
            if command == "slurm":
                print(pipeline.slurm(os.environ, rest[0] if rest else None))
                return 0
            return pipeline.run(os.environ, rest[0] if rest else None)
        if len(rest) != 2:
            raise UsageError(f"task takes STEP INDEX (not '{' '.join(rest)}')")
        return pipeline.task(os.environ, rest[0], rest[1])
    except UsageError as e:
        print(f"tupe_preprocess.c4 {command}: error: {e}", file=sys.stderr)
        return 2


def cli() -> None:
    """The console script ``tupe-c4``."""
    exit_main(main, "tupe-c4", RESUME_TASKS)


if __name__ == "__main__":
    exit_main(main, "tupe_preprocess.c4", RESUME_TASKS)
