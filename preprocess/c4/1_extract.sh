#!/usr/bin/env bash
# Step 1: one C4 shard (.json.gz) -> text, one paragraph per line, a blank line after each document.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") C4_SHARD.json.gz OUT.txt[.gz]

Extracts the documents' text; bad lines (malformed JSON, missing/non-string/empty text, invalid
UTF-8) are skipped, counted and reported as file:line. Skips OUT if it exists (rerun-safe).
Environment (defaults): MAX_DOCS=0 (all), PROGRESS_SECONDS=30, MAX_WARNINGS=5, PYTHON=python
Details: $PYTHON -m preprocess.c4_extract --help
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -eq 2 ]] || { usage >&2; exit 2; }

MAX_DOCS="${MAX_DOCS:-0}"
PROGRESS_SECONDS="${PROGRESS_SECONDS:-30}"
MAX_WARNINGS="${MAX_WARNINGS:-5}"
echo "$(basename "$0") $1 -> $2" >&2
show_env MAX_DOCS PROGRESS_SECONDS MAX_WARNINGS

exec "$PYTHON" -m preprocess.c4_extract "$1" "$2" --max-docs "$MAX_DOCS" \
  --progress-seconds "$PROGRESS_SECONDS" --max-warnings "$MAX_WARNINGS"
