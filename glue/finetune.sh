#!/usr/bin/env bash
# Fine-tune a pre-trained TUPE/BERT checkpoint on one GLUE task with one LR and seed: the paper's protocol
# (docs/glue_protocol.md). Settings are environment variables; `finetune.sh --help` lists them with examples.
#   CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt GLUE_BIN=glue-bin glue/finetune.sh RTE 2e-5 1
# Output: RUNS/TASK/lr{LR}_seed{SEED}/ (train.log, command.txt, result.json); a finished run is skipped.
# The logic is tupe_glue/finetune.py; this file only finds the repository and its Python.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../train_scripts/lib.sh"
exec "$PYTHON" -m tupe_glue.finetune "$@"
