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

# The C4 steps in their order: step N is C4_STEPS[N-1]. run_all.sh runs them one after another on this
# machine, slurm_array.sbatch one array task at a time; both run a step's tasks with task.sh STEP I.
C4_STEPS=(extract spm binarize layout)

# c4_inputs: the C4 files of C4_DIR (train_json, valid_json) and their outputs (train_txt, valid_txt of
# step 1, train_bin of step 3), as arrays; no train or no validation file is a usage error (exit 2).
c4_inputs() {
  local f
  [[ -d "$C4_DIR" ]] || die "C4_DIR='$C4_DIR' is not a folder"
  mapfile -t train_json < <(list_c4 "$C4_DIR" "$TRAIN_GLOB" "$MAX_SHARDS")
  mapfile -t valid_json < <(list_c4 "$C4_DIR" "$VALID_GLOB")
  (( ${#train_json[@]} > 0 )) || die "no $TRAIN_GLOB in $C4_DIR"
  (( ${#valid_json[@]} > 0 )) || die "no $VALID_GLOB in $C4_DIR"
  train_txt=(); train_bin=(); valid_txt=()
  for f in "${train_json[@]}"; do
    train_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); train_bin+=("$BIN_DIR/$(c4_name "$f")")
  done
  for f in "${valid_json[@]}"; do valid_txt+=("$TEXT_DIR/$(c4_name "$f")$TEXT_EXT"); done
}

# c4_task_count STEP: the independent tasks of STEP (after c4_inputs). extract: the train files, then the
# validation files; binarize: the train files, then the validation set (one task); spm, layout: one.
c4_task_count() {
  case "$1" in
    extract) echo $(( ${#train_json[@]} + ${#valid_json[@]} )) ;;
    binarize) echo $(( ${#train_json[@]} + 1 )) ;;
    spm|layout) echo 1 ;;
    *) die "STEP must be one of: ${C4_STEPS[*]} (not '$1')" ;;
  esac
}

# c4_task STEP I: run task I of STEP (after c4_inputs); I past the last task: nothing to do (exit 0).
c4_task() {
  local step="$1" i="$2" n_train=${#train_json[@]} count
  count="$(c4_task_count "$step")"  # an unknown STEP: exit 2
  (( i < count )) || { note "nothing to do for $step task $i"; exit 0; }
  case "$step" in
    extract)
      if (( i < n_train )); then
        "$C4_SCRIPTS/1_extract.sh" "${train_json[$i]}" "${train_txt[$i]}"
      else
        MAX_DOCS="$VALID_MAX_DOCS" "$C4_SCRIPTS/1_extract.sh" "${valid_json[$i - n_train]}" "${valid_txt[$i - n_train]}"
      fi ;;
    spm) "$C4_SCRIPTS/2_train_spm.sh" "$SPM_DIR" "${train_txt[@]}" ;;
    binarize)
      if (( i < n_train )); then
        "$C4_SCRIPTS/3_binarize.sh" "$SPM_DIR" "${train_bin[$i]}" "${train_txt[$i]}"
      else
        "$C4_SCRIPTS/3_binarize.sh" "$SPM_DIR" "$BIN_DIR/valid" "${valid_txt[@]}"
      fi ;;
    layout) "$C4_SCRIPTS/4_layout.sh" "$DATA_BIN" "$SPM_DIR" "$BIN_DIR/valid" "${train_bin[@]}" ;;
  esac
}
