#!/usr/bin/env bash
# Step 4: DATA_BIN/shardK/{train,valid}.{bin,idx} + dict.txt for fairseq-train shard0:shard1:...
#
# Shard K gets TRAIN_PREFIX number K as train, and VALID_PREFIX (the same in every shard) as valid.
# Writes DATA_BIN/data_path.txt (shard folders relative to DATA_BIN, so the folder can be moved) and
# DATA_BIN/layout.json (dictionary size and hash, checked by pretrain.sh). Prints the absolute data
# path for fairseq-train. Details: python -m preprocess.c4_layout --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
tunable LINK_MODE hardlink "hardlink, symlink or copy"
c4_args "$(basename "$0") DATA_BIN SPM_DIR VALID_PREFIX TRAIN_PREFIX..." 4 -1 "$@"
data_bin="$1"; spm_dir="$2"; valid="$3"; shift 3
note "$# train shard(s) -> $data_bin"
show_tunables
exec "$PYTHON" -m preprocess.c4_layout "$@" --data-bin "$data_bin" --dict "$spm_dir/dict.txt" \
  --valid "$valid" --link "$LINK_MODE"
