#!/usr/bin/env bash
# Step 2: train the sentencepiece model on a sample of lines across extracted shards; write dict.txt.
#
# Writes SPM_DIR/{spm.model,spm.vocab,dict.txt,settings.json}. Finished outputs made with the same
# settings are skipped; other settings are refused (exit 2) unless FORCE=1.
# Details: python -m preprocess.c4_spm --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tunable VOCAB_SIZE 32768 "sentencepiece pieces"
tunable MODEL_TYPE bpe "bpe or unigram"
tunable SPM_SAMPLE_SENTENCES 1000000 "reservoir sample of lines to train on"
tunable SPM_MAX_FILES 32 "sample from K evenly spaced files (C4's shards are already shuffled; 0: all)"
tunable CHARACTER_COVERAGE 0.9999 "sentencepiece --character_coverage"
tunable SEED 0 "sampling and training seed"
tunable SPM_THREADS 0 "trainer threads (0: all cores)"
tunable HARD_VOCAB_LIMIT 1 "0: accept fewer pieces when the sample is too small"
tunable PROGRESS_SECONDS 30 "progress line interval (0: off)"
tunable FORCE 0 "1: retrain even if the outputs are complete"
c4_args "$(basename "$0") SPM_DIR TEXT..." 2 -1 "$@"
spm_dir="$1"; shift
note "$# file(s) -> $spm_dir"
show_tunables
hard="--hard-vocab-limit"; [[ "$HARD_VOCAB_LIMIT" == 0 ]] && hard="--no-hard-vocab-limit"
# shellcheck disable=SC2046
exec "$PYTHON" -m preprocess.c4_spm "$@" --out-dir "$spm_dir" --vocab-size "$VOCAB_SIZE" \
  --model-type "$MODEL_TYPE" --sample-sentences "$SPM_SAMPLE_SENTENCES" --max-files "$SPM_MAX_FILES" \
  --character-coverage "$CHARACTER_COVERAGE" --seed "$SEED" --threads "$SPM_THREADS" "$hard" \
  --progress-seconds "$PROGRESS_SECONDS" $(force_flag)
