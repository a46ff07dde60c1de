# The project's one shell library, sourced by train_scripts/*.sh, glue/*.sh and preprocess/c4/*.sh:
# tunables, messages, device detection. Not meant to be run.
#
# Exit codes of every script (docs/troubleshooting.md, "Exit codes"): 0 done (or nothing left to do: finished outputs
# skipped); 1 a run failed (bad or missing input data, a failing tool; the message says which file);
# 2 wrong usage or settings (unknown option, bad value, settings that differ from those recorded with
# existing outputs): nothing was changed. `die` is the exit-2 path; `fail` reports a command that failed
# (1, or 2 when that command refused its usage).
TUPE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$TUPE_REPO${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python}"

TUNABLES=()
declare -A TUNABLE_DEFAULT TUNABLE_HELP

# tunable NAME DEFAULT HELP: NAME keeps its (non-empty) environment value, else DEFAULT.
# Registered for usage_tunables (--help) and show_tunables (printed at start).
tunable() {
  TUNABLES+=("$1")
  TUNABLE_DEFAULT[$1]="$2"
  TUNABLE_HELP[$1]="$3"
  [[ -n "${!1:-}" ]] || printf -v "$1" '%s' "$2"
}

# renamed_tunable OLD NEW: a job script that still sets the old name OLD keeps working: NEW takes its value
# (unless NEW is set too), with a one-line warning. Call it before `tunable NEW ...`.
renamed_tunable() {
  [[ -n "${!1:-}" ]] || return 0
  if [[ -n "${!2:-}" ]]; then
    note "warning: $1 is a deprecated name of $2; $2=${!2} is set, so $1=${!1} is ignored"
  else
    printf -v "$2" '%s' "${!1}"
    note "warning: $1 is a deprecated name of $2: set $2=${!1} instead"
  fi
}

# export_tunables: export every tunable (for the scripts this one starts, e.g. the C4 steps).
export_tunables() { local v; for v in "${TUNABLES[@]}"; do export "${v?}"; done; }

# usage_tunables: "  NAME  (default)  help" for every tunable, for --help.
usage_tunables() {
  local v
  for v in "${TUNABLES[@]}"; do
    printf '  %-22s %-20s %s\n' "$v" "${TUNABLE_DEFAULT[$v]:-\"\"}" "${TUNABLE_HELP[$v]}"
  done
}

# show_tunables: "NAME=value  [default: D]" for every tunable, to stderr.
show_tunables() {
  local v
  echo "$(basename "$0"): environment (NAME=value [default])" >&2
  for v in "${TUNABLES[@]}"; do
    printf '  %-22s [%s]\n' "$v=${!v}" "${TUNABLE_DEFAULT[$v]}" >&2
  done
}

# header_help FILE: the comment block at the top of FILE (after #! and #SBATCH lines), for --help.
header_help() { awk 'NR == 1 || /^#SBATCH/ { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$1"; }

die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
# fail STATUS MESSAGE: a command this script ran exited with STATUS: the error line, then exit 2 if the
# command refused its usage (status 2), else 1 (the run failed).
fail() { local status="$1"; shift; echo "$(basename "$0"): error: $*" >&2; exit $(( status == 2 ? 2 : 1 )); }
note() { echo "$(basename "$0"): $*" >&2; }

# cuda_device_count: CUDA devices this process can see (respects CUDA_VISIBLE_DEVICES).
cuda_device_count() {
  "$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0
}

# is_uint VALUE / is_number VALUE
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_number() { [[ "$1" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]]; }

# finished_status STATUS DONE_FILE: the exit status to report for a fairseq-train that exited with STATUS
# and was given TUPE_DONE_FILE=DONE_FILE. tupe_plugin.clean_exit writes that file when the run ends
# normally (training done, final checkpoint saved, all ranks past fairseq's last barrier); an abort after
# that (134: SIGABRT, "terminate called without an active exception" from a thread at interpreter exit)
# is a finished run: 0, with a warning. Any other status, and a 134 before the end, is reported as it is.
finished_status() {
  if [[ "$1" == 134 && -s "$2" ]]; then
    note "warning: fairseq-train aborted at exit (status 134) after the run finished ($(head -n 1 "$2")): counted as done"
    echo 0
  else
    echo "$1"
  fi
}

# quote_cmd ARGS...: the command as one shell-quoted line (what to copy and paste).
quote_cmd() { local out; printf -v out '%q ' "$@"; echo "${out% }"; }
