#!/usr/bin/env bash
# The paper's GLUE grid: every task x LR {2,3,4,5}e-5 x 5 seeds, one glue/finetune.sh run each
# (160 runs for the 8 tasks), then the results table (python -m glue.collect RUNS).
#
# Examples (from the repository root; every variable of glue/finetune.sh passes through):
#   CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt RUNS=runs/tupe_r glue/grid.sh     # all GPUs
#   CHECKPOINT=... TASKS="RTE MRPC" SEEDS="1 2 3" JOBS=2 GPU_IDS="0 1" glue/grid.sh
#   CHECKPOINT=... RUNS=runs/tupe_r glue/grid.sh --slurm     # print the sbatch command (glue/grid.sbatch)
#   RUNS=runs/tupe_r glue/grid.sh --list                     # index, task, LR, seed, done/todo
#
# Finished runs (a readable result.json) are skipped, so rerunning or resubmitting only does what is
# missing; a run whose result.json is empty or corrupt is redone (glue/finetune.sh moves it aside).
# Tasks and their facts: glue/tasks.py; the protocol: docs/glue_protocol.md.
# Locally, JOBS runs go at a time, run k on GPU GPU_IDS[k % n]; their output is in RUNS/.grid_logs/.
# CHECKPOINT and the binaries of the tasks to run are checked before the first run, and a run that fails
# with a usage error (exit 2, e.g. a bad EXTRA_ARGS) stops the grid: the other runs would repeat it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../train_scripts/lib.sh"

# the paper's grid (tasks, LRs, seeds), from its one copy: glue/tasks.py PAPER_TASKS, PAPER_LRS, PAPER_SEEDS
paper_grid="$("$PYTHON" -m glue.tasks grid)" || die "cannot read the paper's grid: '$PYTHON -m glue.tasks grid' failed (activate the venv)"
mapfile -t paper <<< "$paper_grid"
tunable TASKS auto "tasks (spaces or commas); auto: the paper's ${paper[0]} and every custom task binarized in GLUE_BIN"
tunable LRS "${paper[1]}" "learning rates (default: the paper's)"
tunable SEEDS "${paper[2]}" "seeds (default: the paper's)"
tunable RUNS runs "output root (RUNS/TASK/lr{LR}_seed{SEED}/)"
tunable GLUE_BIN glue-bin "binaries of python -m preprocess.glue_binarize (TASK-bin/)"
tunable JOBS auto "runs at a time, locally (auto: one per GPU, 1 on CPU)"
tunable GPU_IDS auto "GPUs for the local runs (auto: all visible; none on CPU)"
tunable CHECKPOINT "" "pre-trained checkpoint (required; see glue/finetune.sh --help for the rest)"

usage() {
  header_help "$0"
  echo
  echo "Usage: [NAME=value ...] $(basename "$0") [--slurm | --list]"
  echo
  echo "Environment (default, meaning):"
  usage_tunables
}
# check_checkpoint: CHECKPOINT names a file, before any run starts (each run would refuse it alike).
check_checkpoint() {
  [[ -n "$CHECKPOINT" ]] || die "CHECKPOINT is required: the pre-trained checkpoint to fine-tune"
  [[ -f "$CHECKPOINT" ]] || fail 1 "CHECKPOINT=$CHECKPOINT: no such file"
}
mode=local
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --slurm) mode=slurm ;;
  --list) mode=list ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac
show_tunables
export RUNS CHECKPOINT GLUE_BIN
TASKS="$("$PYTHON" -m glue.grid tasks --tasks "$TASKS" --glue-bin "$GLUE_BIN")"  # auto -> the names
note "tasks: $TASKS"
grid=("$PYTHON" -m glue.grid --tasks "$TASKS" --lrs "$LRS" --seeds "$SEEDS" --runs "$RUNS" --glue-bin "$GLUE_BIN")

if [[ "$mode" == list ]]; then exec "${grid[@]}" list; fi
if [[ "$mode" == slurm ]]; then
  total=$("${grid[@]}" list | wc -l)
  array=$("${grid[@]}" array)
  if [[ -z "$array" ]]; then
    echo "all $total runs are done; the table: $PYTHON -m glue.collect $RUNS"
    exit 0
  fi
  check_checkpoint
  todo=$("${grid[@]}" list | grep -c 'todo$')
  env_line="CHECKPOINT=\"$CHECKPOINT\" GLUE_BIN=\"$GLUE_BIN\" RUNS=\"$RUNS\" TASKS=\"$TASKS\""
  env_line+=" LRS=\"$LRS\" SEEDS=\"$SEEDS\""
  echo "# $todo of $total runs to do; submit from the repository root (add %N to the array to run N at a time):"
  echo "$env_line sbatch --array=$array glue/grid.sbatch"
  echo "# then: $PYTHON -m glue.collect $RUNS"
  exit 0
fi

check_checkpoint
"${grid[@]}" check  # the binaries of every run still to do (exit 1 naming the missing ones)
if [[ "$GPU_IDS" == auto ]]; then
  n=$(cuda_device_count)
  GPU_IDS=$(seq -s ' ' 0 $(( n - 1 )) 2>/dev/null || true)
fi
[[ "$GPU_IDS" == none ]] && GPU_IDS=""
if [[ "$JOBS" == auto ]]; then
  read -r -a ids <<< "$GPU_IDS"
  JOBS=$(( ${#ids[@]} > 0 ? ${#ids[@]} : 1 ))
fi
note "local runs: JOBS=$JOBS GPU_IDS='$GPU_IDS'"
status=0
"${grid[@]}" run --jobs "$JOBS" --gpus "$GPU_IDS" || status=$?
(( status != 2 )) || exit 2  # refused before the first run, or stopped at a usage error: no table
"$PYTHON" -m glue.collect "$RUNS" --expected-lrs "$(tr -s ' ,' ',' <<< "$LRS")" \
  --expected-seeds "$(tr -s ' ,' ',' <<< "$SEEDS")"
exit "$status"
