#!/usr/bin/env bash
# One task of one C4 step, with the settings of run_all.sh (see its --help): STEP is extract, spm,
# binarize or layout, INDEX which task of it (common.sh, c4_task_count: extract 0..T-1 = the train
# files, T..T+V-1 = the validation files; binarize 0..T-1 = the train files, T = the validation set;
# spm and layout: 0). run_all.sh runs the tasks of a step JOBS at a time, slurm_array.sbatch one per
# array task. An INDEX past the last task has nothing to do (exit 0).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
c4_tunables
c4_args "$(basename "$0") STEP INDEX" 2 2 "$@"
is_uint "$2" || die "INDEX must be a task number 0, 1, ... (not '$2')"
c4_inputs
c4_task "$1" "$2"
