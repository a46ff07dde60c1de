#!/usr/bin/env bash
# Pre-train a TUPE / BERT row of the paper (masked LM, or OBJECTIVE=electra), the paper's recipe as defaults.
# Settings are environment variables; arguments are appended to fairseq-train's. `pretrain.sh --help` lists
# every setting with its default (from tupe_pretrain/recipe.py) and examples; docs/pretraining.md.
#   DATA=c4_prep/data-bin train_scripts/pretrain.sh                       # every GPU of this node (torchrun)
#   DRY_RUN=1 DATA=data-bin GPUS=8 train_scripts/pretrain.sh               # print the command only
#   sbatch --nodes 2 train_scripts/pretrain.sbatch                         # SLURM, see that file
# The logic is tupe_pretrain/pretrain.py; this file only finds the repository and its Python.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec "$PYTHON" -m tupe_pretrain.pretrain "$@"
