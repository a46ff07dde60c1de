#!/usr/bin/env bash
# Step 0: download C4 en shards from the Hugging Face hub (allenai/c4) into the folder the C4 steps read.
# Each file is verified against the hub's size and SHA-256; verified files are skipped on a rerun and an
# interrupted download resumes. Needs the hf extra: pip install -c constraints.txt -e '.[hf]'.
#
# Examples (from the repository root):
#   C4_DIR=/data/c4/en SHARDS=0-31 preprocess/c4/0_download.sh
#   C4_DIR=/data/c4/en SHARDS=0-3 VALID_SHARDS=0 preprocess/c4/0_download.sh && preprocess/c4/run_all.sh /data/c4/en
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../train_scripts/lib.sh"

tunable C4_DIR c4/en "output folder (what preprocess/c4/run_all.sh reads)"
tunable SHARDS 0-31 "train shards c4-train.NNNNN-of-01024, as ranges: 0-31, 0-3,8"
tunable VALID_SHARDS 0 "validation shards c4-validation.NNNNN-of-00008 (4_layout.sh uses 00000)"
tunable REPO allenai/c4 "hub dataset repository"
tunable REVISION "" "hub revision to pin (branch, tag or commit); empty: main"
tunable FROM_DIR "" "a local copy of the repository's files (en/...) instead of the hub"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  header_help "$0"; echo; echo "Usage: [NAME=value ...] $(basename "$0")"; echo
  echo "Environment (default, meaning):"; usage_tunables; exit 0
fi
[[ $# -eq 0 ]] || die "no arguments expected (settings are environment variables; see --help)"
show_tunables

args=(--out-dir "$C4_DIR" --shards "$SHARDS" --valid-shards "$VALID_SHARDS" --repo "$REPO")
[[ -z "$REVISION" ]] || args+=(--revision "$REVISION")
[[ -z "$FROM_DIR" ]] || args+=(--from-dir "$FROM_DIR")
exec "$PYTHON" -m preprocess.c4_download "${args[@]}"
