#!/usr/bin/env bash
# The study: positional encodings pre-trained side by side (same data order, masks, seed and budget),
# fine-tuned on every task with several seeds, measured for locality/symmetry, and written up.
#   1 prep      C4-format text -> sentencepiece + shards (preprocess/c4/run_all.sh); the tasks binarized with
#               the same vocabulary (preprocess.glue_binarize); held-out sentences for the attention maps
#   2 pretrain  every VARIANT x PRETRAIN_SEEDS (train_scripts/pretrain.sh)   -> OUT/pretrain/V/seedS/
#   3 locality  position-only maps and real attention maps (tupe-locality)   -> OUT/locality/V/seedS.csv
#   4 finetune  every variant x seed x task x FT_LRS x SEEDS (glue/finetune.sh) -> OUT/finetune/V/seedS/
#   5 report    OUT/report.md, study.csv, valid_loss.png, correlation.png (tupe_plugin.analysis.study_report)
# A preset (train_scripts/study_presets/PRESET.env: tiny, cpu-small, gpu-small, base) gives the defaults;
# every value of it is overridable by the environment. Rerunning skips finished parts (a pre-training
# resumes from its checkpoint_last.pt); OUT/settings.env refuses a rerun with other settings.
#
# Examples (from the repository root):
#   OUT=study C4_DIR=corpus/c4 TASKS_DIR=corpus/tasks PRESET=cpu-small train_scripts/study.sh
#   OUT=study ... VARIANTS="bert-a tupe-r gaussian-prior" PRETRAIN_SEEDS="1 2" train_scripts/study.sh
#   OUT=study ... train_scripts/study.sh --list          # every part: index, stage, name, done/todo
#   OUT=study ... train_scripts/study.sh --slurm         # print the sbatch commands (one job per part)
#   OUT=study ... train_scripts/study.sh --part finetune 7   # one part (what train_scripts/study.sbatch runs)
#   OUT=study ... train_scripts/study.sh --report        # only the report, from what is finished
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPTS="$TUPE_REPO/train_scripts"

tunable PRESET cpu-small "tiny, cpu-small, gpu-small, base (train_scripts/study_presets/NAME.env) or a .env file"
preset_file="$PRESET"
[[ -f "$preset_file" ]] || preset_file="$SCRIPTS/study_presets/$PRESET.env"
[[ -f "$preset_file" ]] || die "PRESET=$PRESET: no file $preset_file (presets: $(cd "$SCRIPTS/study_presets" && ls | sed 's/\.env$//' | tr '\n' ' '))"
declare -A P
while IFS= read -r line || [[ -n "$line" ]]; do
  if [[ "$line" =~ ^([A-Z_0-9]+)=(.*)$ ]]; then P[${BASH_REMATCH[1]}]="${BASH_REMATCH[2]}"; fi
done < "$preset_file"
PRESET_KEYS=(SIZE MODEL_ARGS VOCAB_SIZE MAX_SHARDS MAX_DOCS TOKENS_PER_SAMPLE BATCH_SIZE MAX_SENTENCES TOTAL_UPDATES
             WARMUP PRETRAIN_LR VALID_POINTS VALID_STEPS FT_LRS FT_EPOCHS FT_BATCH SEEDS LOC_LENGTH LOC_SENTENCES MIN_GAP_BITS)
for k in "${PRESET_KEYS[@]}"; do
  [[ -v P[$k] ]] || die "$preset_file: no line $k=... (every preset sets: ${PRESET_KEYS[*]})"
done

tunable OUT "" "the study's folder (required)"
tunable C4_DIR "" "C4-format files c4-train.*.json.gz + c4-validation.00000-of-*.json.gz (python -m preprocess.text_to_c4)"
tunable TASKS_DIR "" "tasks in GLUE layout: TASKS_DIR/TASK/{train,dev}.tsv"
tunable TASKS auto "tasks to fine-tune (auto: every folder of TASKS_DIR with train.tsv and dev.tsv)"
tunable VARIANTS "bert-a bert-r tupe-a tupe-r" "VARIANT names of train_scripts/pretrain.sh, in report order (NAME:1,2: that variant's own seeds)"
tunable PRETRAIN_SEEDS 1 "pre-training seeds of every variant without its own (same data order and masks per seed)"
tunable SIZE "${P[SIZE]}" "pretrain.sh SIZE (the arch is VARIANT_SIZE)"
tunable MODEL_ARGS "${P[MODEL_ARGS]:-none}" "fairseq size flags over the arch (--encoder-layers ...; none: the arch's)"
tunable VOCAB_SIZE "${P[VOCAB_SIZE]}" "sentencepiece vocabulary"
tunable MAX_SHARDS "${P[MAX_SHARDS]}" "train files of C4_DIR to use (0: all)"
tunable MAX_DOCS "${P[MAX_DOCS]}" "documents per train file (0: all)"
tunable TOKENS_PER_SAMPLE "${P[TOKENS_PER_SAMPLE]}" "tokens per pre-training sequence (= positions)"
tunable BATCH_SIZE "${P[BATCH_SIZE]}" "sequences per pre-training update"
tunable MAX_SENTENCES "${P[MAX_SENTENCES]}" "sequences per forward (gradient accumulation makes up BATCH_SIZE)"
tunable TOTAL_UPDATES "${P[TOTAL_UPDATES]}" "pre-training budget per variant (updates)"
tunable WARMUP "${P[WARMUP]}" "pre-training warmup updates"
tunable PRETRAIN_LR "${P[PRETRAIN_LR]}" "pre-training peak LR (then linear decay to 0)"
tunable VALID_POINTS "${P[VALID_POINTS]}" "validations per pre-training run (the loss curve; a checkpoint each)"
tunable VALID_STEPS "${P[VALID_STEPS]}" "batches per validation (the same first batches every time; 0: the whole set)"
tunable FT_LRS "${P[FT_LRS]}" "fine-tuning LRs (per task: median over seeds per LR, best LR)"
tunable FT_EPOCHS "${P[FT_EPOCHS]}" "fine-tuning epochs (auto: glue/finetune.sh's per task)"
tunable FT_BATCH "${P[FT_BATCH]}" "fine-tuning batch size"
tunable FT_EXTRA_ARGS "--shorten-method truncate" "more fairseq-train arguments for fine-tuning"
tunable SEEDS "${P[SEEDS]}" "fine-tuning seeds"
tunable LOC_LENGTH "${P[LOC_LENGTH]}" "T of the position-only maps"
tunable LOC_SENTENCES "${P[LOC_SENTENCES]}" "held-out validation lines for the real attention maps"
tunable MIN_GAP_BITS "${P[MIN_GAP_BITS]}" "warn unless every variant ends this many bits below the unigram baseline"
tunable GPUS auto "GPUs for pre-training (auto: all visible; 0: CPU)"
tunable PREP_JOBS "$(nproc)" "C4 files preprocessed in parallel"
tunable NUM_WORKERS 1 "data loader workers (0: in the main process)"

usage() {
  header_help "$0"
  echo
  echo "Usage: [NAME=value ...] $(basename "$0") [--list | --slurm | --report | --part STAGE [INDEX]]"
  echo "STAGE: prep, pretrain, locality, finetune, report (INDEX as in --list)"
  echo
  echo "Environment (default from PRESET=$PRESET, meaning):"
  usage_tunables
}
mode=all stage="" index=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --list) mode=list ;;
  --slurm) mode=slurm ;;
  --report) mode=part stage=report ;;
  --part) mode=part stage="${2:-}" index="${3:-0}"
          [[ "$stage" =~ ^(prep|pretrain|locality|finetune|report)$ ]] || die "--part STAGE: prep, pretrain, locality, finetune or report, not '$stage'"
          is_uint "$index" || die "--part $stage INDEX: a whole number, not '$index'" ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

# ---- resolve and check ------------------------------------------------------------------------------
[[ -n "$OUT" ]] || die "OUT is required: the study's folder"
[[ "$MODEL_ARGS" == none ]] && MODEL_ARGS=""
for v in TOTAL_UPDATES VALID_POINTS PREP_JOBS LOC_LENGTH LOC_SENTENCES; do
  is_uint "${!v}" && (( ${!v} > 0 )) || die "$v must be a positive whole number, not '${!v}'"
done
is_uint "$VALID_STEPS" || die "VALID_STEPS must be a whole number, not '$VALID_STEPS'"
is_uint "$WARMUP" && (( WARMUP < TOTAL_UPDATES )) || die "WARMUP=$WARMUP must be a whole number below TOTAL_UPDATES=$TOTAL_UPDATES"
(( VALID_POINTS <= TOTAL_UPDATES )) || die "VALID_POINTS=$VALID_POINTS exceeds TOTAL_UPDATES=$TOTAL_UPDATES"
(( LOC_LENGTH <= TOKENS_PER_SAMPLE )) || die "LOC_LENGTH=$LOC_LENGTH exceeds the $TOKENS_PER_SAMPLE positions (TOKENS_PER_SAMPLE)"
VALID_INTERVAL=$(( TOTAL_UPDATES / VALID_POINTS ))
valid_args="--log-format json --validate-interval-updates $VALID_INTERVAL"  # json lines: what the report reads
if (( VALID_STEPS > 0 )); then valid_args+=" --max-valid-steps $VALID_STEPS"; fi
read -r -a variants <<< "$VARIANTS"; read -r -a pseeds <<< "$PRETRAIN_SEEDS"
read -r -a lrs <<< "$FT_LRS"; read -r -a seeds <<< "$SEEDS"
(( ${#variants[@]} > 0 && ${#pseeds[@]} > 0 )) || die "VARIANTS and PRETRAIN_SEEDS must not be empty"
for v in "${pseeds[@]}" "${seeds[@]}"; do is_uint "$v" || die "PRETRAIN_SEEDS and SEEDS are whole numbers, not '$v'"; done
variant_seeds() {  # ENTRY of VARIANTS -> its pre-training seeds, one per line (NAME:1,2 or PRETRAIN_SEEDS)
  if [[ "$1" == *:* ]]; then tr ',' '\n' <<< "${1#*:}"; else printf '%s\n' "${pseeds[@]}"; fi
}
for entry in "${variants[@]}"; do
  [[ "$entry" =~ ^[a-z0-9_-]+(:[0-9]+(,[0-9]+)*)?$ ]] ||
    die "VARIANTS entry '$entry': write NAME or NAME:SEED,SEED (e.g. bert-a:1,2)"
done
if [[ "$TASKS" == auto ]]; then
  [[ -n "$TASKS_DIR" ]] || die "TASKS_DIR is required (or TASKS=none for pre-training only)"
  TASKS=$(for d in "$TASKS_DIR"/*/; do if [[ -f "$d/train.tsv" && -f "$d/dev.tsv" ]]; then basename "$d"; fi; done | tr '\n' ' ')
  [[ -n "$TASKS" ]] || die "TASKS_DIR=$TASKS_DIR has no TASK/train.tsv + TASK/dev.tsv"
fi
[[ "$TASKS" == none ]] && TASKS=""
read -r -a tasks <<< "${TASKS//,/ }"
C4_OUT="$OUT/c4"; SPM="$C4_OUT/spm"; TASKS_BIN="$OUT/tasks-bin"; HELDOUT="$OUT/locality/heldout.txt"

# parts, in the order of --list
pretrain_parts=(); finetune_parts=()
for entry in "${variants[@]}"; do
  v="${entry%%:*}"
  for s in $(variant_seeds "$entry"); do
    pretrain_parts+=("$v $s")
    for t in "${tasks[@]}"; do for lr in "${lrs[@]}"; do for k in "${seeds[@]}"; do
      finetune_parts+=("$v $s $t $lr $k")
    done; done; done
  done
done

pretrain_dir() { echo "$OUT/pretrain/$1/seed$2"; }
is_done() {  # is_done STAGE ARGS...
  case "$1" in
    prep) [[ -f "$C4_OUT/data-bin/data_path.txt" && -f "$HELDOUT" ]] || return 1
          local t; for t in "${tasks[@]}"; do [[ -d "$TASKS_BIN/$t-bin" ]] || return 1; done ;;
    pretrain) [[ -f "$(pretrain_dir "$2" "$3")/pretrain.done" ]] ;;
    locality) [[ -f "$OUT/locality/$2/seed$3.csv" ]] ;;
    finetune) [[ -f "$OUT/finetune/$2/seed$3/$4/lr$5_seed$6/result.json" ]] ;;
    report) [[ -f "$OUT/report.md" ]] ;;
  esac
}
parts_of() {  # parts_of STAGE: one part per line
  case "$1" in
    prep|report) echo "" ;;
    pretrain|locality) printf '%s\n' "${pretrain_parts[@]}" ;;
    finetune) (( ${#finetune_parts[@]} == 0 )) || printf '%s\n' "${finetune_parts[@]}" ;;
  esac
}
STAGES=(prep pretrain locality finetune report)

# ---- the settings of this study are recorded once; a rerun with others is refused --------------------
RECORDED=(C4_DIR PRESET SIZE MODEL_ARGS VOCAB_SIZE MAX_SHARDS MAX_DOCS TOKENS_PER_SAMPLE BATCH_SIZE TOTAL_UPDATES WARMUP
          PRETRAIN_LR VALID_POINTS VALID_STEPS FT_LRS FT_EPOCHS FT_BATCH FT_EXTRA_ARGS LOC_LENGTH LOC_SENTENCES)
check_settings() {
  local now; now="$(for v in "${RECORDED[@]}"; do printf '%s=%s\n' "$v" "${!v}"; done)"
  mkdir -p "$OUT"
  if [[ -f "$OUT/settings.env" ]]; then
    local diff; diff="$(diff <(cat "$OUT/settings.env") <(echo "$now") | grep '^[<>]' || true)"
    [[ -z "$diff" ]] || die "$OUT/settings.env (line: recorded <, now >) differs from this run's settings:" \
      $'\n'"$diff"$'\n'"A study compares variants under one setting: use another OUT, or set these back."
  else
    echo "$now" > "$OUT/settings.env.tmp" && mv "$OUT/settings.env.tmp" "$OUT/settings.env"
  fi
}

# ---- the parts ------------------------------------------------------------------------------------------
run_prep() {
  [[ -n "$C4_DIR" ]] || die "C4_DIR is required: C4-format files (see python -m preprocess.text_to_c4)"
  # TOKENS_PER_SAMPLE: the binarizer splits lines longer than one pre-training block (fairseq would drop them)
  OUT_DIR="$C4_OUT" VOCAB_SIZE="$VOCAB_SIZE" MAX_SHARDS="$MAX_SHARDS" MAX_DOCS="$MAX_DOCS" JOBS="$PREP_JOBS" \
    TOKENS_PER_SAMPLE="$TOKENS_PER_SAMPLE" "$TUPE_REPO/preprocess/c4/run_all.sh" "$C4_DIR"
  if (( ${#tasks[@]} > 0 )); then
    "$PYTHON" -m preprocess.glue_binarize --glue-dir "$TASKS_DIR" --tasks "$(IFS=,; echo "${tasks[*]}")" \
      --spm-model "$SPM/spm.model" --dict "$SPM/dict.txt" --out-dir "$TASKS_BIN"
  fi
  [[ -f "$HELDOUT" ]] || write_heldout
}

write_heldout() {  # the first LOC_SENTENCES non-empty lines of the extracted validation text
  local files=("$C4_OUT"/text/c4-validation.*)
  [[ -f "${files[0]}" ]] || fail 1 "no validation text $C4_OUT/text/c4-validation.* for the held-out sentences"
  mkdir -p "$(dirname "$HELDOUT")"
  local f
  for f in "${files[@]}"; do [[ "$f" == *.gz ]] && gzip -dc "$f" || cat "$f"; done |
    awk 'NF' | head -n "$LOC_SENTENCES" > "$HELDOUT.tmp" || true  # head closes the pipe early
  [[ -s "$HELDOUT.tmp" ]] || fail 1 "the validation text in $C4_OUT/text has no non-empty line"
  mv "$HELDOUT.tmp" "$HELDOUT"
}

train_data() {  # the shards of OUT/c4/data-bin as fairseq-train's a:b:c (data_path.txt: absolute or relative)
  local bin="$C4_OUT/data-bin" shard shards=() out=()
  IFS=: read -r -a shards < "$bin/data_path.txt"
  for shard in "${shards[@]}"; do
    if [[ "$shard" == /* ]]; then out+=("$shard"); else out+=("$bin/$shard"); fi
  done
  (IFS=:; echo "${out[*]}")
}

run_pretrain() {  # VARIANT SEED
  local dir; dir="$(pretrain_dir "$1" "$2")"
  is_done prep || die "prep is not finished: run --part prep first"
  mkdir -p "$dir"
  note "pre-training $1 seed $2 ($TOTAL_UPDATES updates) -> $dir (log: $dir/train.log)"
  # fairseq validates (and saves) every VALID_INTERVAL updates
  DATA="$(train_data)" VARIANT="$1" SIZE="$SIZE" ARCH=auto SAVE_DIR="$dir" TENSORBOARD_DIR="$dir/tensorboard" \
    GPUS="$GPUS" BATCH_SIZE="$BATCH_SIZE" MAX_SENTENCES="$MAX_SENTENCES" UPDATE_FREQ=auto \
    TOKENS_PER_SAMPLE="$TOKENS_PER_SAMPLE" MAX_POSITIONS=auto TOTAL_UPDATES="$TOTAL_UPDATES" WARMUP="$WARMUP" \
    LR="$PRETRAIN_LR" SEED="$2" SAVE_INTERVAL_UPDATES="$VALID_INTERVAL" KEEP_INTERVAL_UPDATES=1 KEEP_PATTERN=-1 \
    LOG_INTERVAL="$(( VALID_INTERVAL > 1 ? VALID_INTERVAL / 2 : 1 ))" NUM_WORKERS="$NUM_WORKERS" DRY_RUN=0 \
    EXTRA_ARGS="$MODEL_ARGS $valid_args" \
    "$SCRIPTS/pretrain.sh" 2>&1 | tee -a "$dir/train.log" || fail "$?" "pre-training $1 seed $2 failed; log $dir/train.log"
  date -u +%FT%TZ > "$dir/pretrain.done"
}

checkpoint_of() {  # VARIANT SEED: the finished pre-training's checkpoint, or an error
  is_done pretrain "$1" "$2" || die "pre-training $1 seed $2 is not finished ($(pretrain_dir "$1" "$2")): run it first"
  echo "$(pretrain_dir "$1" "$2")/checkpoint_last.pt"
}

run_locality() {  # VARIANT SEED
  local ckpt csv="$OUT/locality/$1/seed$2.csv"
  ckpt="$(checkpoint_of "$1" "$2")"
  mkdir -p "$(dirname "$csv")"
  note "locality/symmetry of $1 seed $2 -> $csv"
  "$PYTHON" -m tupe_plugin.analysis.locality_cli "$ckpt" --length "$LOC_LENGTH" --text "$HELDOUT" \
    --spm-model "$SPM/spm.model" --data "$SPM" --max-sentences "$LOC_SENTENCES" --out-csv "$csv" \
    > "${csv%.csv}.log" 2>&1 || { s=$?; tail -n 20 "${csv%.csv}.log" >&2; fail "$s" "tupe-locality failed; log ${csv%.csv}.log"; }
}

run_finetune() {  # VARIANT SEED TASK LR FT_SEED
  local ckpt
  ckpt="$(checkpoint_of "$1" "$2")"
  local log="$OUT/finetune/$1/seed$2/.logs/$3_lr$4_seed$5.out"
  mkdir -p "$(dirname "$log")"
  # the size flags are not in tupe-checkpoint-info --fairseq-args: pass them as at pre-training
  CHECKPOINT="$ckpt" GLUE_BIN="$TASKS_BIN" RUNS="$OUT/finetune/$1/seed$2" EPOCHS="$FT_EPOCHS" BATCH="$FT_BATCH" \
    QUIET=1 NUM_WORKERS="$NUM_WORKERS" EXTRA_ARGS="$MODEL_ARGS $FT_EXTRA_ARGS" \
    "$TUPE_REPO/glue/finetune.sh" "$3" "$4" "$5" > "$log" 2>&1 || { s=$?; tail -n 20 "$log" >&2; fail "$s" "fine-tuning failed; log $log"; }
  grep -h ' done' "$log" | tail -n 1 >&2 || true
}

run_report() {
  "$PYTHON" -m tupe_plugin.analysis.study_report "$OUT" --variants "$VARIANTS" --pretrain-seeds "$PRETRAIN_SEEDS" \
    --total-updates "$TOTAL_UPDATES" --min-gap-bits "$MIN_GAP_BITS" \
    --title "Study: PRESET=$PRESET, $TOTAL_UPDATES updates, variants $VARIANTS"
}

run_part() {  # STAGE INDEX: one part; skipped when done (the report is always rewritten)
  local stage="$1" i="$2" args=() all=()
  mapfile -t all < <(parts_of "$stage")
  (( i < ${#all[@]} )) || die "$stage has ${#all[@]} part(s) (0..$(( ${#all[@]} - 1 ))), not index $i"
  read -r -a args <<< "${all[$i]}"
  if [[ "$stage" != report && "$stage" != prep ]] && is_done "$stage" "${args[@]}"; then
    note "$stage ${args[*]}: done, skipping"; return 0
  fi
  local start=$SECONDS machine
  "run_$stage" "${args[@]}"
  note "$stage ${args[*]}: finished in $(( SECONDS - start )) s"
  # for the report's "Run" section: how long each part took, and where
  machine="$(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs || uname -m)"
  if command -v nvidia-smi > /dev/null && (( $(cuda_device_count) > 0 )); then
    machine+=", GPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
  fi
  [[ "$stage" == report ]] || printf '%s\t%s\t%d\t%s\t%s\n' "$stage" "${args[*]:-all}" "$(( SECONDS - start ))" \
    "$(date -u +%FT%TZ)" "$machine" >> "$OUT/timings.tsv"
}

# ---- modes ------------------------------------------------------------------------------------------------
if [[ "$mode" == list ]]; then
  for st in "${STAGES[@]}"; do
    mapfile -t all < <(parts_of "$st")
    for i in "${!all[@]}"; do
      read -r -a a <<< "${all[$i]}"
      printf '%s\t%d\t%s\t%s\n' "$st" "$i" "${all[$i]:-all}" "$(is_done "$st" "${a[@]}" && echo "done" || echo todo)"
    done
  done
  exit 0
fi

[[ -n "${STUDY_PART_OF:-}" ]] || show_tunables  # a part started by the local run below: printed there
check_settings
note "${#variants[@]} variant(s), ${#pretrain_parts[@]} pre-training run(s) (variants x their seeds) of" \
  "$TOTAL_UPDATES updates (validation every $VALID_INTERVAL); ${#finetune_parts[@]} fine-tuning run(s)" \
  "(${#tasks[@]} task(s): ${tasks[*]:-none} x ${#lrs[@]} LR(s) x ${#seeds[@]} seed(s) per model)"

if [[ "$mode" == slurm ]]; then
  todo_array() {  # STAGE -> SLURM --array value of the parts still to do ("" when none)
    mapfile -t all < <(parts_of "$1")
    local idx=() i a
    for i in "${!all[@]}"; do read -r -a a <<< "${all[$i]}"; is_done "$1" "${a[@]}" || idx+=("$i"); done
    "$PYTHON" -c 'import sys; from glue.grid import slurm_ranges; print(slurm_ranges([int(x) for x in sys.argv[1:]]))' "${idx[@]}"
  }
  echo "# Submit from the repository root, in one shell: these settings are passed on to every job by sbatch"
  for v in "${TUNABLES[@]}"; do
    val="${!v}"
    [[ -z "$val" && ( "$v" == MODEL_ARGS || "$v" == TASKS ) ]] && val=none  # empty would mean: the default
    printf 'export %s=%q\n' "$v" "$val"
  done
  echo 'export VENV=${VENV:-$PWD/.venv}'
  dep=""
  is_done prep || { echo 'prep=$(sbatch --parsable train_scripts/study.sbatch prep)'; dep='--dependency=afterok:$prep '; }
  todo="$(todo_array pretrain)"
  if [[ -n "$todo" ]]; then
    echo "pre=\$(sbatch --parsable ${dep}--array=$todo train_scripts/study.sbatch pretrain)"; dep='--dependency=afterok:$pre '
  fi
  after=""
  for st in locality finetune; do
    todo="$(todo_array "$st")"
    [[ -n "$todo" ]] && { echo "$st=\$(sbatch --parsable ${dep}--array=$todo train_scripts/study.sbatch $st)"; after+=":\$$st"; }
  done
  echo "sbatch ${after:+--dependency=afterany$after }train_scripts/study.sbatch report"
  exit 0
fi

if [[ "$mode" == part ]]; then
  run_part "$stage" "$index"
  exit 0
fi

# All parts here, in order, each as its own process (as on SLURM; bash ignores `set -e` inside anything
# followed by `||`, so a part run as a function there would carry on past its errors). A failed part is
# counted and the others go on; rerun to retry it.
failed=()
export STUDY_PART_OF=$$
if is_done prep; then note "prep: done, skipping"; else "$0" --part prep 0 || fail "$?" "prep failed"; fi
for st in pretrain locality finetune; do
  mapfile -t all < <(parts_of "$st")
  for i in "${!all[@]}"; do
    "$0" --part "$st" "$i" || failed+=("$st ${all[$i]}")
  done
done
"$0" --part report 0
if (( ${#failed[@]} > 0 )); then
  note "${#failed[@]} part(s) failed (rerun to retry them): $(printf '%s; ' "${failed[@]}")"
  exit 1
fi
note "done: $OUT/report.md"
