#!/usr/bin/env bash
# One rank of a multi-process fairseq-train, started by torchrun or srun (pretrain.sh does this).
#
#   torchrun --nproc-per-node 8 --no-python train_scripts/fairseq_rank.sh 8 gpu DATA ... --distributed-world-size 8
#   srun --ntasks 16 train_scripts/fairseq_rank.sh 16 gpu DATA ...   (MASTER_ADDR, MASTER_PORT exported)
#
# Why: fairseq's own inference from the launcher's environment breaks on CPU (rank % cuda count ->
# division by zero; with the default --distributed-world-size 1 every process silently trains alone
# into the same save dir). This wrapper passes rank, device and init method explicitly, the same way
# for torchrun and srun, CPU (gloo) and GPU (nccl), and refuses to start when the launcher's world
# size is not the one the command was built for.
set -euo pipefail
usage() {
  awk 'NR == 1 || /^#SBATCH/ { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$0"
  echo "Usage: $(basename "$0") EXPECTED_WORLD_SIZE gpu|cpu FAIRSEQ_TRAIN_ARGS..."
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
[[ $# -ge 3 ]] || { usage >&2; exit 2; }
expected="$1" device="$2"; shift 2
me="$(basename "$0")"

# torchrun sets RANK/LOCAL_RANK/WORLD_SIZE; srun sets SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS.
if [[ -n "${WORLD_SIZE:-}" ]]; then
  world="$WORLD_SIZE" rank="${RANK:-}" local_rank="${LOCAL_RANK:-}" launcher=torchrun
elif [[ -n "${SLURM_NTASKS:-}" && -n "${SLURM_PROCID:-}" ]]; then
  world="$SLURM_NTASKS" rank="$SLURM_PROCID" local_rank="${SLURM_LOCALID:-}" launcher=srun
else
  echo "$me: error: not started by torchrun or srun (no WORLD_SIZE/RANK nor SLURM_NTASKS/SLURM_PROCID)" >&2
  exit 2
fi
if [[ "$world" != "$expected" ]]; then
  echo "$me: error: $launcher started $world processes but the command was built for world size" \
       "$expected (--distributed-world-size $expected): refusing to train with a different batch size" >&2
  exit 2
fi
# usage errors (exit 2), as the checks above
[[ -n "$rank" && -n "$local_rank" ]] || {
  echo "$me: error: $launcher set no local rank (LOCAL_RANK / SLURM_LOCALID) or rank (RANK)" >&2; exit 2; }
for v in MASTER_ADDR MASTER_PORT; do
  [[ -n "${!v:-}" ]] || { echo "$me: error: $v is not set" >&2; exit 2; }
done
export RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK="$local_rank"  # read by init_method env://
case "$device" in
  gpu) device_id="$local_rank"  # one GPU per process: the launcher's local rank, unless the
    # launcher bound one GPU to each task (CUDA_VISIBLE_DEVICES lists a single device)
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" && "$CUDA_VISIBLE_DEVICES" != *,* ]]; then device_id=0; fi ;;
  cpu) device_id=0 ;;  # --device-id > 0 would call torch.cuda.set_device
  *) echo "$me: error: device must be gpu or cpu, not '$device'" >&2; exit 2 ;;
esac
# Not exec: this shell waits for fairseq-train's status, so that an abort at exit after a finished run
# counts as done (finished_status in lib.sh), and passes the launcher's TERM (or INT) on to it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
done_file="$(mktemp "${TMPDIR:-/tmp}/fairseq_rank.$rank.XXXXXX")"
trap 'rm -f "$done_file"' EXIT
# FAIRSEQ_TRAIN: the command, shell-quoted words (pretrain.sh: fairseq-train, or BF16=1's python -m ...)
train=()
eval "train=(${FAIRSEQ_TRAIN:-fairseq-train})"
TUPE_DONE_FILE="$done_file" "${train[@]}" "$@" --distributed-rank "$rank" \
  --device-id "$device_id" --distributed-init-method env:// --distributed-no-spawn &
child=$!
trap 'kill -TERM "$child" 2> /dev/null' TERM INT
status=0
wait "$child" || status=$?
# a trapped signal ends `wait` early (status 128 + signal): wait again for fairseq-train's own status
while kill -0 "$child" 2> /dev/null; do status=0; wait "$child" || status=$?; done
exit "$(finished_status "$status" "$done_file")"
