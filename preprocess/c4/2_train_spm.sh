#!/usr/bin/env bash
# Step 2: train the sentencepiece model on a sample of lines across extracted shards; write dict.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") SPM_DIR TEXT...

Writes SPM_DIR/{spm.model,spm.vocab,dict.txt}; skipped if they all exist.
Environment (defaults): VOCAB_SIZE=32768, MODEL_TYPE=bpe (or unigram),
  SPM_SAMPLE_SENTENCES=1000000 (reservoir sample of lines), SPM_MAX_FILES=32 (sample from K evenly
  spaced files; C4's shards are already shuffled; 0: all), CHARACTER_COVERAGE=0.9999, SEED=0, SPM_THREADS=0 (all cores),
  HARD_VOCAB_LIMIT=1 (0: accept fewer pieces when the sample is too small), PROGRESS_SECONDS=30
Details: $PYTHON -m preprocess.c4_spm --help
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -ge 2 ]] || { usage >&2; exit 2; }

VOCAB_SIZE="${VOCAB_SIZE:-32768}"
MODEL_TYPE="${MODEL_TYPE:-bpe}"
SPM_SAMPLE_SENTENCES="${SPM_SAMPLE_SENTENCES:-1000000}"
SPM_MAX_FILES="${SPM_MAX_FILES:-32}"
CHARACTER_COVERAGE="${CHARACTER_COVERAGE:-0.9999}"
SEED="${SEED:-0}"
SPM_THREADS="${SPM_THREADS:-0}"
HARD_VOCAB_LIMIT="${HARD_VOCAB_LIMIT:-1}"
PROGRESS_SECONDS="${PROGRESS_SECONDS:-30}"
spm_dir="$1"; shift
echo "$(basename "$0") $# file(s) -> $spm_dir" >&2
show_env VOCAB_SIZE MODEL_TYPE SPM_SAMPLE_SENTENCES SPM_MAX_FILES CHARACTER_COVERAGE SEED SPM_THREADS \
  HARD_VOCAB_LIMIT PROGRESS_SECONDS
hard="--hard-vocab-limit"; [[ "$HARD_VOCAB_LIMIT" == 0 ]] && hard="--no-hard-vocab-limit"

exec "$PYTHON" -m preprocess.c4_spm "$@" --out-dir "$spm_dir" --vocab-size "$VOCAB_SIZE" \
  --model-type "$MODEL_TYPE" --sample-sentences "$SPM_SAMPLE_SENTENCES" --max-files "$SPM_MAX_FILES" \
  --character-coverage "$CHARACTER_COVERAGE" --seed "$SEED" --threads "$SPM_THREADS" "$hard" \
  --progress-seconds "$PROGRESS_SECONDS"
