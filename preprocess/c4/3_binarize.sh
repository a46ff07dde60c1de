#!/usr/bin/env bash
# Step 3: extracted text -> fairseq mmap binary PREFIX.{bin,idx} (+ PREFIX.done), many workers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") SPM_DIR OUT_PREFIX TEXT...

Encodes TEXT (several files are concatenated) with SPM_DIR/spm.model and SPM_DIR/dict.txt.
Byte-identical to spm_encode + fairseq-preprocess --only-source --dataset-impl mmap. Crash-safe:
a finished shard is skipped on rerun, an interrupted one is redone.
Environment (defaults): WORKERS=0 (all usable cores), CHUNK_BYTES=1048576, PROGRESS_SECONDS=30
Details: $PYTHON -m preprocess.c4_binarize --help
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -ge 3 ]] || { usage >&2; exit 2; }

WORKERS="${WORKERS:-0}"
CHUNK_BYTES="${CHUNK_BYTES:-1048576}"
PROGRESS_SECONDS="${PROGRESS_SECONDS:-30}"
spm_dir="$1"; prefix="$2"; shift 2
echo "$(basename "$0") $* -> $prefix" >&2
show_env WORKERS CHUNK_BYTES PROGRESS_SECONDS

exec "$PYTHON" -m preprocess.c4_binarize "$@" --out "$prefix" --spm-model "$spm_dir/spm.model" \
  --dict "$spm_dir/dict.txt" --workers "$WORKERS" --chunk-bytes "$CHUNK_BYTES" \
  --progress-seconds "$PROGRESS_SECONDS"
