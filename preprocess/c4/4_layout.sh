#!/usr/bin/env bash
# Step 4: DATA_BIN/shardK/{train,valid}.{bin,idx} + dict.txt for fairseq-train shard0:shard1:...
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
Usage: $(basename "$0") DATA_BIN SPM_DIR VALID_PREFIX TRAIN_PREFIX...

Shard K gets TRAIN_PREFIX number K as train, and VALID_PREFIX (the same in every shard) as valid.
Prints the colon-joined data path for fairseq-train (also in DATA_BIN/data_path.txt).
Environment (defaults): LINK_MODE=hardlink (or symlink, copy)
Details: $PYTHON -m preprocess.c4_layout --help
USAGE
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -ge 4 ]] || { usage >&2; exit 2; }

LINK_MODE="${LINK_MODE:-hardlink}"
data_bin="$1"; spm_dir="$2"; valid="$3"; shift 3
echo "$(basename "$0") $# train shard(s) -> $data_bin" >&2
show_env LINK_MODE

exec "$PYTHON" -m preprocess.c4_layout "$@" --data-bin "$data_bin" --dict "$spm_dir/dict.txt" \
  --valid "$valid" --link "$LINK_MODE"
