# The project's one shell library, sourced by the thin entry points (train_scripts/*.sh, glue/*.sh,
# preprocess/c4/*.sh and *.sbatch): the repository on PYTHONPATH, its Python, and the few messages the shell
# files still print; the scripts' logic and settings are Python (tupe_common.tunables). Not meant to be run.
#
# Exit codes of every script (docs/troubleshooting.md, "Exit codes"): 0 done (or nothing left to do: finished outputs
# skipped); 1 a run failed (bad or missing input data, a failing tool; the message says which file);
# 2 wrong usage or settings (unknown option, bad value, settings that differ from those recorded with
# existing outputs): nothing was changed. `die` is the exit-2 path.
TUPE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$TUPE_REPO${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python}"

# header_help FILE: the comment block at the top of FILE (after #! and #SBATCH lines), for --help.
header_help() { awk 'NR == 1 || /^#SBATCH/ { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$1"; }

die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
note() { echo "$(basename "$0"): $*" >&2; }

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
