# The project's one shell library, sourced by the thin shims (train_scripts/*.sh, glue/*.sh, preprocess/c4/*.sh and
# *.sbatch): the Python to run (PYTHON, default `python`: the active environment's), a check that the package is
# installed in it, and the few messages the shell files still print. The logic and settings are the installed
# package's (tupe_pretrain, tupe_glue, tupe_preprocess, tupe_study; the same as the tupe-* commands). Not meant to be run.
#
# Exit codes of every script (docs/troubleshooting.md, "Exit codes"): 0 done (or nothing left to do: finished outputs
# skipped); 1 a run failed (bad or missing input data, a failing tool; the message says which file);
# 2 wrong usage or settings (unknown option, bad value, settings that differ from those recorded with
# existing outputs): nothing was changed. `die` is the exit-2 path.
PYTHON="${PYTHON:-python}"

# header_help FILE: the comment block at the top of FILE (after #! and #SBATCH lines), for --help.
header_help() { awk 'NR == 1 || /^#SBATCH/ { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "$1"; }

die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
note() { echo "$(basename "$0"): $*" >&2; }

"$PYTHON" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("tupe_common") is None)' 2> /dev/null ||
  die "the tupe_plugin package is not installed in $(command -v "$PYTHON" || echo "$PYTHON"): run \`pip install -e .\` in the repository, or set PYTHON to the Python that has it (docs/install.md)"
