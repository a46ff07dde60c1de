#!/usr/bin/env bash
# Driver: steps 1-4 for a folder of C4 shards on this machine, JOBS shards at a time.
#
# For the C4 files in C4_DIR (c4-train.NNNNN-of-01024.json.gz, c4-validation.NNNNN-of-00008.json.gz):
#   1 extract each file -> TEXT_DIR            (JOBS files in parallel)
#   2 sentencepiece + dict.txt -> SPM_DIR        (sample across the train texts)
#   3 binarize each train text -> BIN_DIR/<name>, validation texts -> BIN_DIR/valid (JOBS in parallel)
#   4 layout -> DATA_BIN/shardK/{train,valid}.{bin,idx}, dict.txt, data_path.txt
# The steps and their tasks are declared once, in common.sh (C4_STEPS, c4_task), for this script and
# slurm_array.sbatch.
# Every step skips outputs finished with the same settings, so rerunning after a crash resumes; a
# rerun with other settings into the same OUT_DIR stops (exit 2) naming them: FORCE=1 redoes the
# steps, a new OUT_DIR keeps both.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
c4_tunables
tunable JOBS "$(nproc)" "shards processed in parallel"
tunable WORKERS "$(( $(nproc) / JOBS > 0 ? $(nproc) / JOBS : 1 ))" "binarize processes per shard"
tunable STEPS 1234 "which steps to run"
export WORKERS
c4_args "$(basename "$0") [C4_DIR]" 0 1 "$@"
C4_DIR="${1:-$C4_DIR}"
[[ -n "$C4_DIR" ]] || die "no C4_DIR given (argument or environment)"
show_tunables
c4_inputs
note "${#train_json[@]} train file(s), ${#valid_json[@]} validation file(s)"

# A step's tasks JOBS at a time; a one-task step runs directly, so that its exit status (2: other settings)
# is this script's. Only step 4 writes to stdout (the data path), said again in the last note.
for n in "${!C4_STEPS[@]}"; do
  step="${C4_STEPS[$n]}"
  [[ "$STEPS" == *$(( n + 1 ))* ]] || continue
  count="$(c4_task_count "$step")"
  echo "== step $(( n + 1 )): $step ($count task(s), JOBS=$JOBS at a time)" >&2
  if (( count == 1 )); then
    "$C4_SCRIPTS/task.sh" "$step" 0 >/dev/null
  else
    seq 0 $(( count - 1 )) | xargs -P "$JOBS" -n 1 "$C4_SCRIPTS/task.sh" "$step" >/dev/null ||
      { echo "$(basename "$0"): error: step $step failed for some shard(s) (messages above)" >&2; exit 1; }
  fi
done
[[ "$STEPS" != *4* ]] ||
  note "done. Train with: DATA=$DATA_BIN train_scripts/pretrain.sh, or fairseq-train \$($PYTHON -m preprocess.c4_layout --data-path $DATA_BIN) ..."
