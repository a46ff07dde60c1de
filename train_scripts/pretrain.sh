#!/usr/bin/env bash
# Pre-train a TUPE / BERT row of the paper with masked LM, the paper's recipe as defaults (Ke et al.,
# "Rethinking Positional Encoding in Language Pre-training", ICLR 2021, Sec. 4.1 and its appendix):
# BERT-base TUPE-R, 512 tokens, batch 256, 1M updates, Adam, LR 1e-4 with 10k warmup then linear decay to 0,
# fp16 on GPU. OBJECTIVE=electra: replaced-token detection with ELECTRA-Base's recipe (Clark et al., ICLR
# 2020, Table 6): LR 2e-4 for 766k updates, generator 1/3 of the width, discriminator loss weight 50.
# The recipe's one copy is tupe_common/pretrain_recipe.py: every default below comes from it (--help lists them).
#
# Examples (from the repository root; DATA is a fairseq data dir, shard0:shard1:..., or a folder with
# data_path.txt as written by preprocess/c4/4_layout.sh):
#   DATA=c4_prep/data-bin train_scripts/pretrain.sh                       # every GPU of this node (torchrun)
#   DATA=data-bin VARIANT=bert-a GPUS=1 train_scripts/pretrain.sh          # one GPU: update-freq 16
#   DATA=data-bin VARIANT=tupe-a SIZE=large SENTENCES_PER_UPDATE=512 train_scripts/pretrain.sh
#   DRY_RUN=1 DATA=data-bin GPUS=8 train_scripts/pretrain.sh               # print the command only
#   DATA=data-bin OBJECTIVE=electra VARIANT=tupe-r train_scripts/pretrain.sh   # ELECTRA (docs/electra.md)
#   sbatch --nodes 2 train_scripts/pretrain.sbatch                         # SLURM, see that file
# Re-running the same command resumes from SAVE_DIR/checkpoint_last.pt (fairseq's default).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPTS="$TUPE_REPO/train_scripts"
# RECIPE[NAME]: the MLM recipe's default of NAME; RECIPE[electra:NAME]: ELECTRA-Base's, where it differs
recipe_lines="$("$PYTHON" -m tupe_common.pretrain_recipe shell)" ||
  die "cannot read the recipe: '$PYTHON -m tupe_common.pretrain_recipe shell' failed (activate the venv)"
declare -A RECIPE
while IFS='=' read -r name value; do RECIPE[$name]="$value"; done <<< "$recipe_lines"

tunable VARIANT tupe-r "positional variant: a name of 'tupe-checkpoint-info --list-variants' (tupe-r, bert-a, rope, alibi, ...; tupe_r is read as tupe-r)"
tunable OBJECTIVE mlm "mlm (RoBERTa masked LM) or electra (replaced-token detection, ELECTRA-Base defaults: docs/electra.md)"
tunable SIZE base "base, large or tiny (tests)"
tunable ARCH auto "fairseq --arch (auto: VARIANT_SIZE, e.g. tupe_r_base)"
tunable DATA "" "fairseq data dir(s), colon-separated, or a folder with data_path.txt (required)"
tunable SAVE_DIR auto "checkpoints; reruns resume from its checkpoint_last.pt (auto: checkpoints/ARCH, electra: checkpoints/ARCH_electra)"
tunable TENSORBOARD_DIR auto "TensorBoard logs (auto: SAVE_DIR/tensorboard; none: off)"
tunable GPUS auto "GPUs per node (auto: all CUDA devices visible; 0: CPU)"
tunable NPROC_PER_NODE auto "processes per node (auto: GPUS, or 1 on CPU; >1 on CPU uses gloo)"
tunable NNODES "${SLURM_NNODES:-1}" "nodes"
tunable NODE_RANK 0 "this node's index (torchrun multi-node without SLURM)"
tunable MASTER_ADDR auto "rendezvous host (auto: first node of the SLURM allocation, else 127.0.0.1)"
tunable MASTER_PORT auto "rendezvous port (auto: free port on one node; from SLURM_JOB_ID under SLURM)"
tunable LAUNCHER auto "auto, none (1 process), torchrun or srun (pretrain.sbatch sets srun)"
renamed_tunable BATCH_SIZE SENTENCES_PER_UPDATE
tunable SENTENCES_PER_UPDATE "${RECIPE[SENTENCES_PER_UPDATE]}" "target sentences per update = NNODES x NPROC_PER_NODE x MAX_SENTENCES x UPDATE_FREQ (was BATCH_SIZE)"
tunable MAX_SENTENCES "${RECIPE[MAX_SENTENCES]}" "sentences per process per forward (--batch-size)"
tunable UPDATE_FREQ auto "gradient accumulation (auto: SENTENCES_PER_UPDATE / (processes x MAX_SENTENCES))"
tunable TOKENS_PER_SAMPLE "${RECIPE[TOKENS_PER_SAMPLE]}" "tokens per sequence"
tunable MAX_POSITIONS auto "learned positions (auto: TOKENS_PER_SAMPLE)"
tunable SAMPLE_BREAK_MODE "${RECIPE[SAMPLE_BREAK_MODE]}" "masked_lm packing: complete = FULL-SENTENCES"
tunable MASK_PROB "${RECIPE[MASK_PROB]}" "masking probability (mlm: 80/10/10 mask/random/same; electra: 85/15 mask/same)"
tunable GENERATOR_SIZE_DIVISOR auto "electra: generator width, FFN, heads = the discriminator's / N (auto: 3 at base, 4 otherwise)"
tunable DISC_WEIGHT "${RECIPE[electra:DISC_WEIGHT]}" "electra: weight of the discriminator's loss"
tunable TOTAL_UPDATES auto "updates, LR schedule length and stop (auto: ${RECIPE[TOTAL_UPDATES]}; electra ${RECIPE[electra:TOTAL_UPDATES]}, ELECTRA-Base)"
tunable WARMUP "${RECIPE[WARMUP]}" "linear warmup updates"
tunable LR auto "peak learning rate, then linear decay to END_LR (auto: ${RECIPE[LR]}; electra ${RECIPE[electra:LR]}, ELECTRA-Base)"
tunable END_LR "${RECIPE[END_LR]}" "learning rate at TOTAL_UPDATES"
tunable ADAM_BETAS "${RECIPE[ADAM_BETAS]}" "Adam betas"
tunable ADAM_EPS "${RECIPE[ADAM_EPS]}" "Adam epsilon"
tunable WEIGHT_DECAY "${RECIPE[WEIGHT_DECAY]}" "weight decay"
tunable CLIP_NORM "${RECIPE[CLIP_NORM]}" "gradient clipping"
tunable DROPOUT "${RECIPE[DROPOUT]}" "dropout"
tunable ATTENTION_DROPOUT "${RECIPE[ATTENTION_DROPOUT]}" "attention dropout"
tunable SEED "${RECIPE[SEED]}" "random seed"
tunable FP16 auto "1: --fp16 (auto: 1 on GPU, 0 on CPU)"
tunable SAVE_INTERVAL_UPDATES "${RECIPE[SAVE_INTERVAL_UPDATES]}" "checkpoint (and validate) every N updates"
tunable KEEP_INTERVAL_UPDATES "${RECIPE[KEEP_INTERVAL_UPDATES]}" "keep the last N interval checkpoints"
tunable KEEP_PATTERN "${RECIPE[KEEP_PATTERN]}" "also keep every checkpoint at a multiple of N updates (-1: none)"
tunable LOG_INTERVAL "${RECIPE[LOG_INTERVAL]}" "log every N updates"
tunable NUM_WORKERS 1 "data loader workers per process"
tunable DATA_BUFFER_SIZE 0 "fairseq --data-buffer-size; >0 starts a prefetch thread that can abort the exit (status 134) at --max-update mid-epoch"
tunable MAX_SKIP_FRACTION 0 "stop at start if more than this fraction of train/valid lines would be dropped as over-length"
tunable ON_SETTINGS_CHANGE refuse "SAVE_DIR holds a run with other settings: refuse, or continue it with the new ones"
tunable DDP_BACKEND auto "fairseq --ddp-backend (auto: pytorch_ddp on GPU, legacy_ddp on CPU)"
tunable EXTRA_ARGS "" "more fairseq-train arguments (split on spaces); script arguments are appended too"
tunable DRY_RUN 0 "1: print the settings and the command, do not train"

usage() {
  header_help "$0"
  echo
  echo "Usage: [NAME=value ...] $(basename "$0") [FAIRSEQ_TRAIN_ARGS...]"
  echo
  echo "Environment (default, meaning):"
  usage_tunables
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }

# ---- resolve the automatic values ----------------------------------------------------------------
VARIANT="${VARIANT//_/-}"  # variant names are written with dashes; the registry's (and the archs') underscores are read as dashes
case "$OBJECTIVE" in  # ELECTRA-Base (Clark et al. 2020, Table 6): its own LR and length, else as MLM
  mlm) TASK=masked_lm RUN_SUFFIX=""; recipe_prefix="" ;;
  electra) TASK=electra RUN_SUFFIX=_electra; recipe_prefix="electra:" ;;
  *) die "OBJECTIVE must be mlm or electra, not '$OBJECTIVE'" ;;
esac
[[ "$LR" == auto ]] && LR="${RECIPE[${recipe_prefix}LR]}"
[[ "$TOTAL_UPDATES" == auto ]] && TOTAL_UPDATES="${RECIPE[${recipe_prefix}TOTAL_UPDATES]}"
# the task's default for the size
[[ "$GENERATOR_SIZE_DIVISOR" == auto ]] && GENERATOR_SIZE_DIVISOR="${RECIPE[electra:GENERATOR_SIZE_DIVISOR]}"
[[ "$GPUS" == auto ]] && GPUS="$(cuda_device_count)"
is_uint "$GPUS" || die "GPUS must be a number, not '$GPUS'"
if [[ "$NPROC_PER_NODE" == auto ]]; then
  NPROC_PER_NODE=$(( GPUS > 0 ? GPUS : 1 ))
fi
for v in NPROC_PER_NODE NNODES MAX_SENTENCES SENTENCES_PER_UPDATE TOTAL_UPDATES WARMUP NODE_RANK; do
  is_uint "${!v}" || die "$v must be a whole number, not '${!v}'"
done
(( NPROC_PER_NODE > 0 && NNODES > 0 && MAX_SENTENCES > 0 )) || die "NPROC_PER_NODE, NNODES, MAX_SENTENCES must be > 0"
(( GPUS == 0 || NPROC_PER_NODE <= GPUS )) ||
  die "NPROC_PER_NODE=$NPROC_PER_NODE but only GPUS=$GPUS: one process per GPU"
DEVICE=$([[ "$GPUS" -gt 0 ]] && echo gpu || echo cpu)
WORLD=$(( NNODES * NPROC_PER_NODE ))

# A script started by a launcher itself (e.g. torchrun --no-python pretrain.sh) must agree with it.
if [[ -n "${WORLD_SIZE:-}" ]]; then
  [[ "$WORLD_SIZE" == "$WORLD" ]] || die "started under a launcher with WORLD_SIZE=$WORLD_SIZE, but" \
    "NNODES x NPROC_PER_NODE = $NNODES x $NPROC_PER_NODE = $WORLD. Run this script directly (it starts" \
    "torchrun itself), or set NPROC_PER_NODE/NNODES to match"
  [[ "$LAUNCHER" == auto ]] && LAUNCHER=rank
fi
if (( WORLD == 1 )); then LAUNCHER=none  # one process: plain fairseq-train, whatever launched us
elif [[ "$LAUNCHER" == auto ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" ]] && (( NNODES > 1 )); then LAUNCHER=srun
  else LAUNCHER=torchrun; fi
fi
case "$LAUNCHER" in
  none) (( WORLD == 1 )) || die "LAUNCHER=none runs one process, but the world size is $WORLD" ;;
  torchrun|srun|rank) ;;
  *) die "LAUNCHER must be auto, none, torchrun or srun, not '$LAUNCHER'" ;;
esac
if [[ "$MASTER_ADDR" == auto ]]; then
  if [[ -n "${SLURM_JOB_NODELIST:-}" ]] && command -v scontrol > /dev/null; then
    MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
  else MASTER_ADDR=127.0.0.1; fi
fi
if [[ "$MASTER_PORT" == auto ]]; then
  if [[ -n "${SLURM_JOB_ID:-}" ]]; then MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))
  else MASTER_PORT=29500; fi
fi

if [[ "$UPDATE_FREQ" == auto ]]; then
  per_update=$(( WORLD * MAX_SENTENCES ))
  (( SENTENCES_PER_UPDATE % per_update == 0 )) || die "SENTENCES_PER_UPDATE=$SENTENCES_PER_UPDATE is not divisible by" \
    "$WORLD process(es) x MAX_SENTENCES=$MAX_SENTENCES = $per_update; change MAX_SENTENCES or set UPDATE_FREQ"
  UPDATE_FREQ=$(( SENTENCES_PER_UPDATE / per_update ))
fi
if ! is_uint "$UPDATE_FREQ" || (( UPDATE_FREQ == 0 )); then die "UPDATE_FREQ must be a positive whole number"; fi
EFFECTIVE=$(( WORLD * MAX_SENTENCES * UPDATE_FREQ ))

if [[ "$ARCH" == auto ]]; then
  # the variant registry (tupe_plugin/models/variants.py) is the one list of VARIANT names
  known="$("$PYTHON" -m tupe_plugin.checkpoint_info --list-variants 2>/dev/null | tr '\n' ' ')" \
    || die "cannot list the variants: '$PYTHON -m tupe_plugin.checkpoint_info --list-variants' failed (activate the venv)"
  [[ " $known" == *" $VARIANT "* ]] || die "VARIANT must be one of ${known% }, not '$VARIANT'"
  case "$SIZE" in
    base|large|tiny) ;;
    *) die "SIZE must be base, large or tiny, not '$SIZE'" ;;
  esac
  ARCH="${VARIANT//-/_}_$SIZE"
fi
[[ "$MAX_POSITIONS" == auto ]] && MAX_POSITIONS="$TOKENS_PER_SAMPLE"
[[ "$FP16" == auto ]] && FP16=$([[ "$DEVICE" == gpu ]] && echo 1 || echo 0)
[[ "$DDP_BACKEND" == auto ]] && DDP_BACKEND=$([[ "$DEVICE" == gpu ]] && echo pytorch_ddp || echo legacy_ddp)

[[ -n "$DATA" ]] || die "DATA is required: a fairseq data dir (dict.txt, train.bin/idx, valid.bin/idx)," \
  "shard0:shard1:..., or a folder with data_path.txt"
[[ "$ON_SETTINGS_CHANGE" == refuse || "$ON_SETTINGS_CHANGE" == continue ]] ||
  die "ON_SETTINGS_CHANGE must be refuse or continue, not '$ON_SETTINGS_CHANGE'"
# The data exists, its shards share the recorded dictionary, and few lines are too long (exit 1 otherwise).
DATA="$("$PYTHON" -m preprocess.c4_data "$DATA" --tokens-per-sample "$TOKENS_PER_SAMPLE" \
  --sample-break-mode "$SAMPLE_BREAK_MODE" --max-skip-fraction "$MAX_SKIP_FRACTION")" || exit 1
[[ "$SAVE_DIR" == auto ]] && SAVE_DIR="checkpoints/$ARCH${RUN_SUFFIX}"
SAVE_DIR="$(realpath -m "$SAVE_DIR")"  # absolute: every rank and every resubmission writes the same place
[[ "$TENSORBOARD_DIR" == auto ]] && TENSORBOARD_DIR="$SAVE_DIR/tensorboard"

show_tunables
note "world size $WORLD = $NNODES node(s) x $NPROC_PER_NODE process(es) on $DEVICE, launcher $LAUNCHER"
note "effective batch size: $EFFECTIVE = $WORLD process(es) x MAX_SENTENCES $MAX_SENTENCES x UPDATE_FREQ" \
  "$UPDATE_FREQ ($(( EFFECTIVE * TOKENS_PER_SAMPLE )) tokens per update at most)"
(( EFFECTIVE == SENTENCES_PER_UPDATE )) || note "warning: effective batch size $EFFECTIVE differs from SENTENCES_PER_UPDATE=$SENTENCES_PER_UPDATE"

# ---- the fairseq command ----------------------------------------------------------------------------
read -r -a extra <<< "$EXTRA_ARGS"
args=(
  "$DATA" --user-dir "$TUPE_REPO/tupe_plugin"
  --task "$TASK" --criterion "$TASK" --arch "$ARCH" --max-positions "$MAX_POSITIONS"
  --sample-break-mode "$SAMPLE_BREAK_MODE" --tokens-per-sample "$TOKENS_PER_SAMPLE" --mask-prob "$MASK_PROB"
  --optimizer adam --adam-betas "$ADAM_BETAS" --adam-eps "$ADAM_EPS" --weight-decay "$WEIGHT_DECAY"
  --clip-norm "$CLIP_NORM" --lr "$LR" --lr-scheduler polynomial_decay --power 1 --end-learning-rate "$END_LR"
  --warmup-updates "$WARMUP" --total-num-update "$TOTAL_UPDATES" --max-update "$TOTAL_UPDATES"
  --dropout "$DROPOUT" --attention-dropout "$ATTENTION_DROPOUT"
  --batch-size "$MAX_SENTENCES" --update-freq "$UPDATE_FREQ" --seed "$SEED"
  --save-dir "$SAVE_DIR" --no-epoch-checkpoints --save-interval-updates "$SAVE_INTERVAL_UPDATES"
  --keep-interval-updates "$KEEP_INTERVAL_UPDATES" --keep-interval-updates-pattern "$KEEP_PATTERN"
  --skip-invalid-size-inputs-valid-test
  --log-format simple --log-interval "$LOG_INTERVAL" --num-workers "$NUM_WORKERS"
  --data-buffer-size "$DATA_BUFFER_SIZE"
)
[[ "$OBJECTIVE" == electra ]] &&
  args+=(--generator-size-divisor "$GENERATOR_SIZE_DIVISOR" --disc-weight "$DISC_WEIGHT")
[[ "$TENSORBOARD_DIR" != none ]] && args+=(--tensorboard-logdir "$TENSORBOARD_DIR")
[[ "$DEVICE" == cpu ]] && args+=(--cpu)
[[ "$FP16" == 1 ]] && args+=(--fp16)
if (( WORLD > 1 )); then
  args+=(--distributed-world-size "$WORLD" --ddp-backend "$DDP_BACKEND"
         --distributed-backend "$([[ "$DEVICE" == gpu ]] && echo nccl || echo gloo)")
fi
args+=("${extra[@]}" "$@")

FAIRSEQ_TRAIN="$(command -v fairseq-train)" || die "fairseq-train not found (activate the virtual environment)"
export FAIRSEQ_TRAIN MASTER_ADDR MASTER_PORT
rank_cmd=("$SCRIPTS/fairseq_rank.sh" "$WORLD" "$DEVICE" "${args[@]}")
case "$LAUNCHER" in
  none) cmd=("$FAIRSEQ_TRAIN" "${args[@]}") ;;
  rank) cmd=("${rank_cmd[@]}") ;;
  torchrun)
    if (( NNODES == 1 )); then rdzv=(--standalone)
    else
      rdzv=(--nnodes "$NNODES" --node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT")
    fi
    torchrun="$(dirname "$FAIRSEQ_TRAIN")/torchrun"
    [[ -x "$torchrun" ]] || torchrun=torchrun
    cmd=("$torchrun" "${rdzv[@]}" --nproc-per-node "$NPROC_PER_NODE" --no-python "${rank_cmd[@]}") ;;
  srun)
    # srun does not inherit --cpus-per-task from sbatch (SLURM >= 22.05): pass it on
    cmd=(srun --kill-on-bad-exit=1 --nodes "$NNODES" --ntasks "$WORLD" --ntasks-per-node "$NPROC_PER_NODE"
         ${SLURM_CPUS_PER_TASK:+--cpus-per-task "$SLURM_CPUS_PER_TASK"} "${rank_cmd[@]}") ;;
esac
note "command:"
quote_cmd "${cmd[@]}" >&2
[[ "$DRY_RUN" == 1 ]] && { note "DRY_RUN=1: not starting"; exit 0; }

mkdir -p "$SAVE_DIR"
# the settings that define the run: a rerun into the same SAVE_DIR with others is refused (exit 2)
settings=()
for v in ARCH TOKENS_PER_SAMPLE MAX_POSITIONS SAMPLE_BREAK_MODE MASK_PROB LR END_LR WARMUP TOTAL_UPDATES \
         ADAM_BETAS ADAM_EPS WEIGHT_DECAY CLIP_NORM DROPOUT ATTENTION_DROPOUT SEED; do settings+=(--setting "$v=${!v}"); done
[[ "$OBJECTIVE" == electra ]] &&  # MLM runs keep their settings.json as before
  for v in OBJECTIVE GENERATOR_SIZE_DIVISOR DISC_WEIGHT; do settings+=(--setting "$v=${!v}"); done
settings+=(--setting "EFFECTIVE_BATCH_SIZE=$EFFECTIVE" --dict "${DATA%%:*}/dict.txt" --on-change "$ON_SETTINGS_CHANGE")
"$PYTHON" "$SCRIPTS/check_resume.py" "$SAVE_DIR" "${settings[@]}"
exec "${cmd[@]}"
