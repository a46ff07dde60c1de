#!/usr/bin/env bash
# One rank of a multi-process fairseq-train, started by torchrun or srun: the shim of `python -m tupe_pretrain.rank`
# (its --help says why and how; tupe-pretrain starts it itself).
#
#   torchrun --nproc-per-node 8 --no-python train_scripts/fairseq_rank.sh 8 gpu DATA ... --distributed-world-size 8
#   srun --ntasks 16 train_scripts/fairseq_rank.sh 16 gpu DATA ...   (MASTER_ADDR, MASTER_PORT exported)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec "$PYTHON" -m tupe_pretrain.rank "$@"
