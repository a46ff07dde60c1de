#!/usr/bin/env bash
# Driver: steps 1-4 for a folder of C4 shards on this machine, JOBS shards at a time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") [C4_DIR]

Runs, for the C4 files in C4_DIR (c4-train.NNNNN-of-01024.json.gz, c4-validation.NNNNN-of-00008.json.gz):
  1 extract each file -> TEXT_DIR            (JOBS files in parallel)
  2 sentencepiece + dict.txt -> SPM_DIR        (sample across the train texts)
  3 binarize each train text -> BIN_DIR/<name>, validation texts -> BIN_DIR/valid
  4 layout -> DATA_BIN/shardK/{train,valid}.{bin,idx}, dict.txt; prints the fairseq-train data path
Every step skips finished outputs, so rerunning after a crash resumes.
Environment (defaults):
  C4_DIR (required, or the argument), OUT_DIR=c4_prep, TEXT_DIR=\$OUT_DIR/text, SPM_DIR=\$OUT_DIR/spm,
  BIN_DIR=\$OUT_DIR/bin, DATA_BIN=\$OUT_DIR/data-bin, TRAIN_GLOB='c4-train.*-of-*.json.gz',
  VALID_GLOB='c4-validation.00000-of-*.json.gz' (validation set, replicated into every shard),
  MAX_SHARDS=0 (all train files; N: the first N), MAX_DOCS=0 (documents per train file, 0: all;
  for trial runs), VALID_MAX_DOCS=10000 (documents per validation file, 0: all), TEXT_EXT=.txt
  (.txt.gz: gzip the text), JOBS=\$(nproc) (parallel shards), WORKERS=nproc/JOBS (binarize
  processes per shard), STEPS=1234, plus the step scripts' own variables (VOCAB_SIZE=32768,
  MODEL_TYPE=bpe, SPM_SAMPLE_SENTENCES=1000000, SPM_MAX_FILES=32, HARD_VOCAB_LIMIT=1, LINK_MODE, ...).
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -le 1 ]] || { usage >&2; exit 2; }

C4_DIR="${1:-${C4_DIR:-}}"
[[ -n "$C4_DIR" ]] || { usage >&2; die "no C4_DIR given"; }
[[ -d "$C4_DIR" ]] || die "C4_DIR=$C4_DIR is not a folder"
c4_defaults
NPROC="$(nproc)"
JOBS="${JOBS:-$NPROC}"
WORKERS="${WORKERS:-$(( NPROC / JOBS > 0 ? NPROC / JOBS : 1 ))}"
STEPS="${STEPS:-1234}"
MAX_DOCS="${MAX_DOCS:-0}"
export WORKERS MAX_DOCS
echo "$(basename "$0"): settings" >&2
show_env $C4_DEFAULT_VARS MAX_DOCS JOBS WORKERS STEPS

mapfile -t train_json < <(list_c4 "$C4_DIR" "$TRAIN_GLOB" "$MAX_SHARDS")
mapfile -t valid_json < <(list_c4 "$C4_DIR" "$VALID_GLOB")
(( ${#train_json[@]} > 0 )) || die "no $TRAIN_GLOB in $C4_DIR"
(( ${#valid_json[@]} > 0 )) || die "no $VALID_GLOB in $C4_DIR"
train_txt=(); train_bin=(); valid_txt=()
for f in "${train_json[@]}"; do
  train_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); train_bin+=("$BIN_DIR/$(c4_name "$f")")
done
for f in "${valid_json[@]}"; do valid_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); done
echo "$(basename "$0"): ${#train_json[@]} train file(s), ${#valid_json[@]} validation file(s)" >&2

if [[ "$STEPS" == *1* ]]; then
  echo "== step 1: extract" >&2
  for i in "${!train_json[@]}"; do printf '%s\n%s\n' "${train_json[$i]}" "${train_txt[$i]}"; done |
    xargs -d '\n' -P "$JOBS" -n 2 "$C4_SCRIPTS/1_extract.sh"
  for i in "${!valid_json[@]}"; do printf '%s\n%s\n' "${valid_json[$i]}" "${valid_txt[$i]}"; done |
    MAX_DOCS="$VALID_MAX_DOCS" xargs -d '\n' -P "$JOBS" -n 2 "$C4_SCRIPTS/1_extract.sh"
fi
if [[ "$STEPS" == *2* ]]; then
  echo "== step 2: sentencepiece" >&2
  "$C4_SCRIPTS/2_train_spm.sh" "$SPM_DIR" "${train_txt[@]}"
fi
if [[ "$STEPS" == *3* ]]; then
  echo "== step 3: binarize (JOBS=$JOBS x WORKERS=$WORKERS)" >&2
  for i in "${!train_txt[@]}"; do printf '%s\n%s\n%s\n' "$SPM_DIR" "${train_bin[$i]}" "${train_txt[$i]}"; done |
    xargs -d '\n' -P "$JOBS" -n 3 "$C4_SCRIPTS/3_binarize.sh"
  "$C4_SCRIPTS/3_binarize.sh" "$SPM_DIR" "$BIN_DIR/valid" "${valid_txt[@]}"
fi
if [[ "$STEPS" == *4* ]]; then
  echo "== step 4: layout" >&2
  "$C4_SCRIPTS/4_layout.sh" "$DATA_BIN" "$SPM_DIR" "$BIN_DIR/valid" "${train_bin[@]}" >/dev/null
  echo "$(basename "$0"): done. Train with: fairseq-train $(cat "$DATA_BIN/data_path.txt") ..." >&2
fi
