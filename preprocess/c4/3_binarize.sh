#!/usr/bin/env bash
# Step 3: extracted text -> fairseq mmap binary PREFIX.{bin,idx} (+ PREFIX.done), many workers.
#
# Encodes TEXT (several files are concatenated) with SPM_DIR/spm.model and SPM_DIR/dict.txt, as
# spm_encode + fairseq-preprocess --only-source --dataset-impl mmap would, except that a line longer
# than one masked_lm block (TOKENS_PER_SAMPLE - 1 tokens with its </s>) is split so that no text is
# dropped (counted as split_lines in the summary). Crash-safe: a finished shard is skipped on rerun,
# an interrupted one is redone; one made with another TOKENS_PER_SAMPLE is refused (exit 2) unless
# FORCE=1. Details: python -m preprocess.c4_binarize --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tunable TOKENS_PER_SAMPLE 512 "pre-training's --tokens-per-sample (0: never split lines)"
tunable WORKERS 0 "encoding processes (0: all usable cores)"
tunable CHUNK_BYTES 1048576 "bytes of text per work item"
tunable PROGRESS_SECONDS 30 "progress line interval (0: off)"
tunable FORCE 0 "1: redo even if the shard is complete"
c4_args "$(basename "$0") SPM_DIR OUT_PREFIX TEXT..." 3 -1 "$@"
spm_dir="$1"; prefix="$2"; shift 2
note "$* -> $prefix"
show_tunables
# shellcheck disable=SC2046
exec "$PYTHON" -m preprocess.c4_binarize "$@" --out "$prefix" --spm-model "$spm_dir/spm.model" \
  --dict "$spm_dir/dict.txt" --workers "$WORKERS" --chunk-bytes "$CHUNK_BYTES" \
  --progress-seconds "$PROGRESS_SECONDS" --tokens-per-sample "$TOKENS_PER_SAMPLE" $(force_flag)
