# Sourced by the C4 steps: the project's shell library (train_scripts/lib.sh: tunable, show_tunables,
# die, exit codes) plus the C4 file helpers and the settings shared by run_all.sh and slurm_array.sbatch.
C4_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../train_scripts/lib.sh
source "$C4_SCRIPTS/../../train_scripts/lib.sh"

# c4_help USAGE_LINE: --help of a C4 script: its header comment, the usage line, the tunables.
c4_help() {
  header_help "$0"
  printf '\nUsage: %s\n\nEnvironment (default, meaning):\n' "$1"
  usage_tunables
}

# c4_args USAGE_LINE MIN MAX "$@": --help prints help and exits 0; a wrong argument count exits 2.
c4_args() {
  local usage="$1" min="$2" max="$3"; shift 3
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then c4_help "$usage"; exit 0; fi
  if (( $# < min || (max >= 0 && $# > max) )); then c4_help "$usage" >&2; die "wrong number of arguments"; fi
}

# force_flag: --force when FORCE=1 (redo finished outputs, e.g. after changing a setting).
force_flag() { [[ "${FORCE:-0}" == 1 ]] && echo --force || true; }

# c4_name FILE: c4-train.00000-of-01024.json.gz -> c4-train.00000-of-01024
c4_name() { local b; b="$(basename "$1")"; b="${b%.gz}"; echo "${b%.json}"; }

# list_c4 DIR GLOB [MAX]: sorted C4 files in DIR matching GLOB, the first MAX of them (0: all).
list_c4() {
  find "$1" -maxdepth 1 -name "$2" | LC_ALL=C sort | awk -v n="${3:-0}" 'n <= 0 || NR <= n'
}

# c4_tunables: the settings of run_all.sh and slurm_array.sbatch, exported for the step scripts.
c4_tunables() {
  tunable C4_DIR "" "folder of C4 files (or the first argument of run_all.sh)"
  tunable OUT_DIR c4_prep "output root"
  tunable TEXT_DIR "$OUT_DIR/text" "step 1 output"
  tunable SPM_DIR "$OUT_DIR/spm" "step 2 output (spm.model, dict.txt)"
  tunable BIN_DIR "$OUT_DIR/bin" "step 3 output"
  tunable DATA_BIN "$OUT_DIR/data-bin" "step 4 output: shardK/ and data_path.txt"
  tunable TRAIN_GLOB 'c4-train.*-of-*.json.gz' "train files in C4_DIR"
  tunable VALID_GLOB 'c4-validation.00000-of-*.json.gz' "validation files (one set, linked into every shard)"
  tunable MAX_SHARDS 0 "use the first N train files (0: all)"
  tunable MAX_DOCS 0 "documents per train file (0: all; for trial runs)"
  tunable VALID_MAX_DOCS 10000 "documents per validation file (0: all)"
  tunable TEXT_EXT .txt "step 1 text files: .txt, or .txt.gz (gzip)"
  tunable VOCAB_SIZE 32768 "sentencepiece pieces (step 2)"
  tunable MODEL_TYPE bpe "sentencepiece model: bpe or unigram (step 2)"
  tunable SPM_SAMPLE_SENTENCES 1000000 "lines sampled to train sentencepiece (step 2)"
  tunable SPM_MAX_FILES 32 "sample from K evenly spaced text files (0: all) (step 2)"
  tunable HARD_VOCAB_LIMIT 1 "0: accept fewer pieces when the sample is too small (step 2)"
  tunable TOKENS_PER_SAMPLE 512 "pre-training's --tokens-per-sample: longer lines are split to fit (step 3)"
  tunable LINK_MODE hardlink "step 4: hardlink, symlink or copy"
  tunable FORCE 0 "1: redo finished outputs (needed after changing a setting; otherwise refused)"
  export_tunables
}
