#!/usr/bin/env bash
# Fine-tune a pre-trained TUPE/BERT checkpoint on one GLUE task with one LR and seed: the paper's protocol
# (docs/glue_protocol.md §3; task facts from glue/tasks.py): batch 32, 10 epochs (5 for MNLI/QNLI/QQP), warmup ratio 0.06 then linear decay,
# Adam eps 1e-6 betas (0.9,0.999), clip 1.0, dropout 0.1, weight decay 0.01, --max-tokens 4400, validation
# twice per epoch, fp16 on GPU. The model flags (arch, positions, variant) come from the checkpoint.
#
# Examples (from the repository root):
#   CHECKPOINT=checkpoints/tupe_r_base/checkpoint_last.pt GLUE_BIN=glue-bin glue/finetune.sh RTE 2e-5 1
#   CHECKPOINT=... RUNS=runs/bert_a KEEP_CHECKPOINTS=1 glue/finetune.sh MNLI 3e-5 2
#   CHECKPOINT=... EPOCHS=1 EXTRA_ARGS="--max-update 50" glue/finetune.sh CoLA 2e-5 1   # quick check
#
# Output: RUNS/TASK/lr{LR}_seed{SEED}/ with train.log (the fairseq log), command.txt and result.json
# (unrounded scores at the best validation, the format python -m glue.collect reads; docs/glue_protocol.md
# §8). The run is made in RUNS/.partial/TASK/lr{LR}_seed{SEED}/ and renamed when complete: a run with a
# readable result.json is skipped, an incomplete one is redone from scratch, and one whose result.json
# cannot be read (empty, corrupt) is moved to RUNS/.unreadable/ and redone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../train_scripts/lib.sh"

tunable CHECKPOINT "" "pre-trained checkpoint (.pt) (required)"
tunable GLUE_BIN glue-bin "folder with TASK-bin/ from python -m preprocess.glue_binarize"
tunable RUNS runs "output root: RUNS/TASK/lr{LR}_seed{SEED}/"
tunable EPOCHS auto "epochs (auto: 5 for MNLI, QNLI, QQP; 10 otherwise)"
renamed_tunable BATCH SENTENCES_PER_BATCH
tunable SENTENCES_PER_BATCH 32 "sentences per batch of each process, at most (--batch-size; was BATCH); one process: per update"
tunable MAX_TOKENS 4400 "tokens per batch at most (--max-tokens)"
tunable WARMUP_RATIO 0.06 "fraction of updates spent warming up (warmup_ratio scheduler)"
tunable ADAM_BETAS "(0.9,0.999)" "Adam betas"
tunable ADAM_EPS 1e-6 "Adam epsilon"
tunable WEIGHT_DECAY 0.01 "weight decay"
tunable CLIP_NORM 1.0 "gradient clipping"
tunable DROPOUT 0.1 "dropout"
tunable ATTENTION_DROPOUT 0.1 "attention dropout"
tunable POOLER_DROPOUT 0.1 "dropout of the classification head (the official head: dense, tanh, dropout 0.1)"
tunable VALID_PER_EPOCH 2 "validations per epoch, evenly spaced, the last at the epoch's end (the original's --validate-interval-updates 2)"
tunable KEEP_CHECKPOINTS 0 "1: keep checkpoint_best.pt of the run; 0: write no checkpoints"
tunable FP16 auto "1: --fp16 with the original's loss-scale flags (auto: 1 on GPU, 0 on CPU)"
tunable LOG_INTERVAL 50 "log every N updates"
tunable NUM_WORKERS 1 "data loader workers"
tunable METRIC_AVERAGING dev_set "dev_set: metrics over the whole dev set (GLUE's definition); per_batch: the official code's mean of per-batch metrics"
tunable TRUNCATE 0 "1: cut inputs longer than the model's positions (--shorten-method truncate); 0: an over-long input is an error"
tunable QUIET 0 "1: fairseq's output only to train.log (glue/grid.sh sets it)"
tunable EXTRA_ARGS "" "more fairseq-train arguments (split on spaces)"

usage() {
  header_help "$0"
  echo
  echo "Usage: [NAME=value ...] $(basename "$0") TASK LR SEED"
  echo "TASK: CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE (WNLI), or a custom task binarized by preprocess.glue_binarize"
  echo
  echo "Environment (default, meaning):"
  usage_tunables
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -eq 3 ]] || { usage >&2; exit 2; }
TASK="$1" LR="$2" SEED="$3"
is_number "$LR" || die "LR must be a number like 2e-5, not '$LR'"
[[ "$SEED" =~ ^-?[0-9]+$ ]] || die "SEED must be a whole number, not '$SEED'"

run_name="lr${LR}_seed${SEED}"
final="$RUNS/$TASK/$run_name"
partial="$RUNS/.partial/$TASK/$run_name"
if [[ -f "$final/result.json" ]]; then
  if why="$("$PYTHON" -m glue.finetune_helper check-result "$TASK" "$final/result.json" 2>&1)"; then
    note "$TASK $run_name: already done ($final/result.json), skipping"
    exit 0
  fi
  aside="$RUNS/.unreadable/$TASK/$run_name.$(date +%Y%m%d-%H%M%S)"
  note "$TASK $run_name: unreadable result ($why); moving the run to $aside and redoing it"
  mkdir -p "$(dirname "$aside")"
  mv -T "$final" "$aside"
fi
[[ -e "$final" ]] && die "$final exists without result.json: not a finished run of this script; move it away"

show_tunables
[[ -n "$CHECKPOINT" ]] || die "CHECKPOINT is required: the pre-trained checkpoint to fine-tune"
[[ -f "$CHECKPOINT" ]] || fail 1 "CHECKPOINT=$CHECKPOINT: no such file"
data="$GLUE_BIN/$TASK-bin"
[[ -d "$data" ]] || fail 1 "$data: no such folder (GLUE_BIN=$GLUE_BIN)"
settings="$("$PYTHON" -m glue.finetune_helper settings "$TASK" "$CHECKPOINT" "$GLUE_BIN")"  # exits on error
eval "$settings"
[[ "$EPOCHS" == auto ]] && EPOCHS="$TASK_EPOCHS"
[[ "$FP16" == auto ]] && FP16=$(( CUDA_DEVICES > 0 ? 1 : 0 ))
note "$TASK: $NUM_CLASSES class(es), metric $METRIC on $VALID_SUBSETS, $EPOCHS epochs;" \
  "checkpoint variant $CHECKPOINT_VARIANT ($MODEL_ARGS)"

rm -rf "$partial"  # an earlier attempt that did not finish: redo from scratch
mkdir -p "$partial"
read -r -a model_args <<< "$MODEL_ARGS"
read -r -a extra <<< "$EXTRA_ARGS"
args=(
  "$data" --user-dir "$TUPE_REPO/tupe_plugin" "${model_args[@]}"
  --restore-file "$CHECKPOINT" --reset-optimizer --reset-dataloader --reset-meters --reset-lr-scheduler
  --task sentence_prediction --criterion glue_sentence_prediction --metric-averaging "$METRIC_AVERAGING"
  --num-classes "$NUM_CLASSES"
  --init-token 0 --separator-token 2
  --batch-size "$SENTENCES_PER_BATCH" --max-tokens "$MAX_TOKENS" --required-batch-size-multiple 1
  --optimizer adam --adam-betas "$ADAM_BETAS" --adam-eps "$ADAM_EPS" --weight-decay "$WEIGHT_DECAY"
  --clip-norm "$CLIP_NORM" --lr "$LR" --lr-scheduler warmup_ratio --warmup-ratio "$WARMUP_RATIO"
  --max-epoch "$EPOCHS" --dropout "$DROPOUT" --attention-dropout "$ATTENTION_DROPOUT" --pooler-dropout "$POOLER_DROPOUT" --seed "$SEED"
  --valid-subset "$VALID_SUBSETS" --best-checkpoint-metric "$METRIC" --maximize-best-checkpoint-metric
  --save-dir "$partial/checkpoints" --no-epoch-checkpoints --no-last-checkpoints
  --log-format simple --log-interval "$LOG_INTERVAL" --num-workers "$NUM_WORKERS"
  --data-buffer-size 0  # no prefetch thread: it can abort the exit with status 134 (see train_scripts/pretrain.sh)
)
[[ "$REGRESSION" == 1 ]] && args+=(--regression-target)
[[ "$TRUNCATE" == 1 ]] && args+=(--shorten-method truncate)
if (( CUDA_DEVICES == 0 )); then args+=(--cpu); fi
[[ "$FP16" == 1 ]] && args+=(--fp16 --fp16-init-scale 4 --threshold-loss-scale 1 --fp16-scale-window 128)
args+=("${extra[@]}")
# glue.fairseq_train: fairseq-train validating exactly VALID_PER_EPOCH times per epoch (docs/glue_protocol.md §4)
if [[ "$KEEP_CHECKPOINTS" == 1 ]]; then args+=(--keep-interval-updates 1); else args+=(--no-save); fi
command -v fairseq-train > /dev/null || die "fairseq-train not found (activate the virtual environment)"
cmd=("$PYTHON" -m glue.fairseq_train --validations-per-epoch "$VALID_PER_EPOCH" "${args[@]}")
quote_cmd "${cmd[@]}" > "$partial/command.txt"
note "command:"
cat "$partial/command.txt" >&2
status=0
done_file="$partial/done.txt"  # written by tupe_plugin.clean_exit when the run ends normally
rm -f "$done_file"
if [[ "$QUIET" == 1 ]]; then
  TUPE_DONE_FILE="$done_file" "${cmd[@]}" > "$partial/train.log" 2>&1 || status=$?
else
  TUPE_DONE_FILE="$done_file" "${cmd[@]}" 2>&1 | tee "$partial/train.log" || status=$?
fi
status="$(finished_status "$status" "$done_file")"
rm -f "$done_file"
if (( status != 0 )); then
  tail -n 30 "$partial/train.log" >&2
  # the error our plugin raised (wrong variant, dictionary, ...) as the last line, not 30 lines above it
  reason="$("$PYTHON" -m tupe_plugin_cli.errors "$partial/train.log" 2>/dev/null | sed 's/^error: //')" || true
  fail "$status" "$TASK $run_name: fairseq-train failed (exit $status)${reason:+: $reason}; log in $partial/train.log"
fi

"$PYTHON" -m glue.finetune_helper result --task "$TASK" --lr "$LR" --seed "$SEED" --metric "$METRIC" \
  --subsets "$VALID_SUBSETS" --log "$partial/train.log" --variant "$CHECKPOINT_VARIANT" \
  --checkpoint "$CHECKPOINT" --out "$partial/result.json" > "$partial/best.txt"
if [[ "$KEEP_CHECKPOINTS" == 1 ]]; then
  find "$partial/checkpoints" -maxdepth 1 -type f ! -name checkpoint_best.pt -delete 2>/dev/null || true
else
  rm -rf "$partial/checkpoints"
fi
mkdir -p "$RUNS/$TASK"
mv -T "$partial" "$final"  # fails rather than nest if another copy of this run finished meanwhile
note "$TASK $run_name done: $(cat "$final/best.txt")  -> $final/result.json"
