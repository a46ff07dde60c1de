#!/usr/bin/env bash
# Steps 1-4 of the C4 pipeline (extract, sentencepiece, binarize, layout) for a folder of C4 files on this
# machine, JOBS tasks of a step at a time; finished outputs are skipped, so a rerun resumes. Settings are
# environment variables: `run_all.sh --help` lists them with their defaults; docs/data_pipeline.md.
#   OUT_DIR=/scratch/c4_prep JOBS=8 preprocess/c4/run_all.sh /data/c4/en
#   OUT_DIR=/tmp/c4 VOCAB_SIZE=1000 preprocess/c4/run_all.sh preprocess/samples/c4
# The logic is tupe_preprocess/c4/pipeline.py (python -m tupe_preprocess.c4 run); this file only finds the repository
# and its Python.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../train_scripts/lib.sh"
exec "$PYTHON" -m tupe_preprocess.c4 run "$@"
