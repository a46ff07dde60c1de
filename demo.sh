#!/usr/bin/env bash
# make demo: the main job end to end on bundled small data, on CPU, in a few minutes:
#   bundled C4 sample -> sentencepiece -> fairseq binary shards -> tiny TUPE-R pre-training (TensorBoard)
#   -> GLUE fixtures binarized with the same sentencepiece model -> fine-tuning per task -> the results
#   table (DEMO DATA: tiny model, fixture tasks; the numbers say nothing about TUPE) -> positional maps.
# Every step is a command of the installed package (tupe-*; docs/install.md); rerunning skips what is finished. Usage: [OUT=demo_out] ./demo.sh
set -euo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-demo_out}"
UPDATES="${UPDATES:-300}"
TASKS="${TASKS:-CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE}"
echo "demo: OUT=$OUT UPDATES=$UPDATES TASKS='$TASKS'"
step() { echo; echo "=== $* ==="; }

step "1/6 C4 sample -> sentencepiece -> binary shards (tupe-c4 run)"
# TOKENS_PER_SAMPLE: lines longer than a pre-training block are split at binarization, so none is dropped
OUT_DIR="$OUT/c4" VOCAB_SIZE=1000 JOBS=2 TOKENS_PER_SAMPLE=128 tupe-c4 run preprocess/samples/c4

step "2/6 tiny TUPE-R pre-training, $UPDATES updates on CPU (tupe-pretrain)"
DATA="$OUT/c4/data-bin" SAVE_DIR="$OUT/pretrain" VARIANT=tupe-r SIZE=tiny GPUS=0 \
  TOKENS_PER_SAMPLE=128 SENTENCES_PER_UPDATE=16 MAX_SENTENCES=16 TOTAL_UPDATES="$UPDATES" WARMUP=30 LR=1e-3 \
  SAVE_INTERVAL_UPDATES="$UPDATES" LOG_INTERVAL=50 NUM_WORKERS=0 \
  tupe-pretrain
CKPT="$OUT/pretrain/checkpoint_last.pt"

step "3/6 GLUE fixtures -> binaries with the pre-training vocabulary (tupe-glue-binarize)"
tupe-glue-binarize --glue-dir tests/data/glue --tasks "$(echo $TASKS | tr ' ' ,)" \
  --spm-model "$OUT/c4/spm/spm.model" --dict "$OUT/c4/spm/dict.txt" --out-dir "$OUT/glue-bin"

step "4/6 fine-tuning, one LR x one seed per task (tupe-grid), then the table (tupe-collect)"
CHECKPOINT="$CKPT" GLUE_BIN="$OUT/glue-bin" RUNS="$OUT/tupe_r_tiny_DEMO" TASKS="$TASKS" LRS=1e-3 SEEDS=1 \
  EPOCHS=20 SENTENCES_PER_BATCH=8 LOG_INTERVAL=20 NUM_WORKERS=0 VALID_PER_EPOCH=1 \
  tupe-grid
echo "(DEMO DATA: a 2-layer model pre-trained for $UPDATES updates on a 1 MB sample and fine-tuned on"
echo " small fixture tasks with a learnable rule; compare the layout, not the numbers, with the paper's rows)"

step "5/6 learned positional correlations of every head (tupe-pos-maps)"
if [[ -f "$OUT/pos_maps/pos_maps.png" ]]; then
  echo "$OUT/pos_maps exists, kept"
else
  tupe-pos-maps "$CKPT" --out-dir "$OUT/pos_maps" --length 64
fi

step "6/6 the pre-trained model as a Hugging Face transformers folder (tupe-export-hf)"
if ! python -c "import transformers" 2>/dev/null; then
  echo "transformers is not installed (pip install -c constraints.txt -e '.[hf]'): export skipped"
elif [[ -f "$OUT/hf/config.json" ]]; then
  echo "$OUT/hf exists, kept"
else
  tupe-export-hf "$CKPT" "$OUT/hf" --spm-model "$OUT/c4/spm/spm.model" --dict "$OUT/c4/spm/dict.txt"
fi
if [[ -f "$OUT/hf/config.json" ]]; then
  python - "$OUT/hf" <<'PY'
import sys
from transformers import AutoModelForMaskedLM, AutoTokenizer
from transformers.utils import logging
logging.disable_progress_bar()
tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
model = AutoModelForMaskedLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
batch = tok(["Return the number of items in a container."], return_tensors="pt")
print(f"loaded in transformers: {type(model).__name__}, input ids {batch['input_ids'][0].tolist()[:8]}..., "
      f"logits {tuple(model(**batch).logits.shape)}")
PY
fi

echo
echo "demo: done. Results table: $OUT/tupe_r_tiny_DEMO/glue_results.csv (+ .png); positional maps: $OUT/pos_maps/pos_maps.png;"
echo "      TensorBoard: tensorboard --logdir $OUT/pretrain/tensorboard"
echo "      transformers: AutoModelForMaskedLM.from_pretrained('$OUT/hf', trust_remote_code=True) (and AutoTokenizer, AutoModel)"
