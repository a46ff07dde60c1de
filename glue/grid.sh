#!/usr/bin/env bash
# The paper's GLUE grid: every task x LR {2,3,4,5}e-5 x 5 seeds, one glue/finetune.sh run each
# (160 runs for the 8 tasks), then the results table (python -m tupe_glue.collect RUNS).
#   CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt RUNS=runs/tupe_r glue/grid.sh     # all GPUs
#   CHECKPOINT=... RUNS=runs/tupe_r glue/grid.sh --slurm     # print the sbatch command (glue/grid.sbatch)
# `grid.sh --help` lists every setting with its default and more examples; docs/glue_protocol.md.
# The logic is tupe_glue/grid.py (python -m tupe_glue.grid sh); this file only finds the repository and its Python.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../train_scripts/lib.sh"
exec "$PYTHON" -m tupe_glue.grid sh "$@"
