# Sourced by the C4 steps: repository on PYTHONPATH, helpers. Not meant to be run.
C4_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
C4_REPO="$(cd "$C4_SCRIPTS/../.." && pwd)"
export PYTHONPATH="$C4_REPO${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python}"

# show_env NAME...: print "NAME=value" for each tunable, to stderr.
show_env() {
  local v
  for v in "$@"; do printf '  %s=%s\n' "$v" "${!v}" >&2; done
}

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }

# c4_name FILE: c4-train.00000-of-01024.json.gz -> c4-train.00000-of-01024
c4_name() { local b; b="$(basename "$1")"; b="${b%.gz}"; echo "${b%.json}"; }

# list_c4 DIR GLOB [MAX]: sorted C4 files in DIR matching GLOB, the first MAX of them (0: all).
list_c4() {
  find "$1" -maxdepth 1 -name "$2" | LC_ALL=C sort | awk -v n="${3:-0}" 'n <= 0 || NR <= n'
}

# c4_defaults: the tunables shared by run_all.sh and slurm_array.sbatch (environment overrides).
c4_defaults() {
  OUT_DIR="${OUT_DIR:-c4_prep}"
  TEXT_DIR="${TEXT_DIR:-$OUT_DIR/text}"
  SPM_DIR="${SPM_DIR:-$OUT_DIR/spm}"
  BIN_DIR="${BIN_DIR:-$OUT_DIR/bin}"
  DATA_BIN="${DATA_BIN:-$OUT_DIR/data-bin}"
  TRAIN_GLOB="${TRAIN_GLOB:-c4-train.*-of-*.json.gz}"
  VALID_GLOB="${VALID_GLOB:-c4-validation.00000-of-*.json.gz}"
  MAX_SHARDS="${MAX_SHARDS:-0}"
  VALID_MAX_DOCS="${VALID_MAX_DOCS:-10000}"
  TEXT_EXT="${TEXT_EXT:-.txt}"
  # Step 2 tunables, exported so that 2_train_spm.sh sees them.
  export VOCAB_SIZE="${VOCAB_SIZE:-32768}" MODEL_TYPE="${MODEL_TYPE:-bpe}"
  export SPM_SAMPLE_SENTENCES="${SPM_SAMPLE_SENTENCES:-1000000}" SPM_MAX_FILES="${SPM_MAX_FILES:-32}"
  export HARD_VOCAB_LIMIT="${HARD_VOCAB_LIMIT:-1}"
}
C4_DEFAULT_VARS="C4_DIR OUT_DIR TEXT_DIR SPM_DIR BIN_DIR DATA_BIN TRAIN_GLOB VALID_GLOB MAX_SHARDS
  VALID_MAX_DOCS TEXT_EXT VOCAB_SIZE MODEL_TYPE SPM_SAMPLE_SENTENCES SPM_MAX_FILES HARD_VOCAB_LIMIT"
