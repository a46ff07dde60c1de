#!/usr/bin/env bash
# Driver: steps 1-4 for a folder of C4 shards on this machine, JOBS shards at a time.
#
# For the C4 files in C4_DIR (c4-train.NNNNN-of-01024.json.gz, c4-validation.NNNNN-of-00008.json.gz):
#   1 extract each file -> TEXT_DIR            (JOBS files in parallel)
#   2 sentencepiece + dict.txt -> SPM_DIR        (sample across the train texts)
#   3 binarize each train text -> BIN_DIR/<name>, validation texts -> BIN_DIR/valid
#   4 layout -> DATA_BIN/shardK/{train,valid}.{bin,idx}, dict.txt, data_path.txt
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
[[ -d "$C4_DIR" ]] || die "C4_DIR=$C4_DIR is not a folder"
show_tunables
# each_shard N SCRIPT: run SCRIPT on every N lines of stdin, JOBS at a time; any failure exits 1
each_shard() { xargs -d '\n' -P "$JOBS" -n "$1" "$2" || die_failed "step $(basename "$2") failed for some shard(s) (messages above)"; }
die_failed() { echo "$(basename "$0"): error: $*" >&2; exit 1; }

mapfile -t train_json < <(list_c4 "$C4_DIR" "$TRAIN_GLOB" "$MAX_SHARDS")
mapfile -t valid_json < <(list_c4 "$C4_DIR" "$VALID_GLOB")
(( ${#train_json[@]} > 0 )) || die "no $TRAIN_GLOB in $C4_DIR"
(( ${#valid_json[@]} > 0 )) || die "no $VALID_GLOB in $C4_DIR"
train_txt=(); train_bin=(); valid_txt=()
for f in "${train_json[@]}"; do
  train_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); train_bin+=("$BIN_DIR/$(c4_name "$f")")
done
for f in "${valid_json[@]}"; do valid_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); done
note "${#train_json[@]} train file(s), ${#valid_json[@]} validation file(s)"

if [[ "$STEPS" == *1* ]]; then
  echo "== step 1: extract" >&2
  for i in "${!train_json[@]}"; do printf '%s\n%s\n' "${train_json[$i]}" "${train_txt[$i]}"; done |
    each_shard 2 "$C4_SCRIPTS/1_extract.sh"
  for i in "${!valid_json[@]}"; do printf '%s\n%s\n' "${valid_json[$i]}" "${valid_txt[$i]}"; done |
    MAX_DOCS="$VALID_MAX_DOCS" each_shard 2 "$C4_SCRIPTS/1_extract.sh"
fi
if [[ "$STEPS" == *2* ]]; then
  echo "== step 2: sentencepiece" >&2
  "$C4_SCRIPTS/2_train_spm.sh" "$SPM_DIR" "${train_txt[@]}"
fi
if [[ "$STEPS" == *3* ]]; then
  echo "== step 3: binarize (JOBS=$JOBS x WORKERS=$WORKERS)" >&2
  for i in "${!train_txt[@]}"; do printf '%s\n%s\n%s\n' "$SPM_DIR" "${train_bin[$i]}" "${train_txt[$i]}"; done |
    each_shard 3 "$C4_SCRIPTS/3_binarize.sh"
  "$C4_SCRIPTS/3_binarize.sh" "$SPM_DIR" "$BIN_DIR/valid" "${valid_txt[@]}"
fi
if [[ "$STEPS" == *4* ]]; then
  echo "== step 4: layout" >&2
  "$C4_SCRIPTS/4_layout.sh" "$DATA_BIN" "$SPM_DIR" "$BIN_DIR/valid" "${train_bin[@]}" >/dev/null
  note "done. Train with: DATA=$DATA_BIN train_scripts/pretrain.sh, or fairseq-train \$($PYTHON -m preprocess.c4_layout --data-path $DATA_BIN) ..."
fi
