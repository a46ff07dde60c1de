#!/usr/bin/env bash
# The study: positional encodings pre-trained side by side (same data order, masks, seed and budget),
# fine-tuned on every task with several seeds, measured for locality/symmetry, word-order sensitivity and
# longer inputs, and written up with intervals that say which differences are settled (docs/study.md).
# The stages and the settings are declared once, in the installed tupe_study package: this script is the shim of
# `tupe-study` (python -m tupe_study), kept for the commands published with earlier results. A preset (tupe_study/presets/NAME.env: tiny,
# cpu-small, gpu-9min, gpu-small, base) gives the defaults; every value is overridable by the environment.
# Rerunning skips finished parts (a pre-training resumes from its checkpoint_last.pt); OUT/settings.env
# refuses a rerun with other settings.
#
# Examples (from the repository root):
#   OUT=runs/study C4_DIR=runs/corpus TASKS_DIR=runs/tasks PRESET=cpu-small train_scripts/study.sh
#   OUT=runs/study ... VARIANTS="all bert-a:1,2,3 tupe-r:1,2,3" train_scripts/study.sh   # every variant
#   OUT=runs/study ... train_scripts/study.sh --lanes 2  # 2 parts at once, each with cores/2 threads (CPU)
#   OUT=runs/study ... train_scripts/study.sh --list     # every part: stage, index, arguments, done/todo
#   OUT=runs/study ... train_scripts/study.sh --slurm    # print the sbatch commands (one job per part)
#   OUT=runs/study ... train_scripts/study.sh --part finetune 7   # one part (what train_scripts/study.sbatch runs)
#   OUT=runs/study ... train_scripts/study.sh --report   # only the report, from what is finished
#   train_scripts/study.sh --help                        # every setting with its default and meaning
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec "$PYTHON" -m tupe_study "$@"
