#!/usr/bin/env bash
# Step 1: one C4 shard (.json.gz) -> text, one paragraph per line, a blank line after each document.
#
# Bad lines (malformed JSON, missing/non-string/empty text, invalid UTF-8) are skipped, counted and
# reported as file:line; a shard with no usable document is an error (exit 1) naming the file.
# A finished OUT (OUT.settings.json) made with the same settings is skipped; one made with other
# settings is refused (exit 2) unless FORCE=1. Details: python -m preprocess.c4_extract --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tunable MAX_DOCS 0 "stop after N documents (0: all)"
tunable PROGRESS_SECONDS 30 "progress line interval (0: off)"
tunable MAX_WARNINGS 5 "file:line warnings per skip reason"
tunable FORCE 0 "1: redo OUT even if it is complete"
c4_args "$(basename "$0") C4_SHARD.json.gz OUT.txt[.gz]" 2 2 "$@"
note "$1 -> $2"
show_tunables
# shellcheck disable=SC2046
exec "$PYTHON" -m preprocess.c4_extract "$1" "$2" --max-docs "$MAX_DOCS" \
  --progress-seconds "$PROGRESS_SECONDS" --max-warnings "$MAX_WARNINGS" $(force_flag)
