"""Settings are checked by name before any work: a misspelt variable (``VARIENT=bert-a``) is refused with "did you
mean", and another trainer's name of one (``MAX_UPDATE``, fairseq's) naming ours, where either used to leave the
default in place and train it (``tupe_common.tunables.check_names``); a child process gets none of its parent's
settings that it does not declare (``child_environ``), so none is taken for a misspelling of its own; and the
study's usage errors change nothing (``--part STAGE N`` beyond its parts, ``--report`` of a study that has not run).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, ROOT, drop_script_settings, setting_names, setting_tables
from tupe_common.errors import UsageError
from tupe_common.tunables import check_names, child_environ, edit_distance, misspelt, nearest


def plain_distance(a: str, b: str) -> int:
    """Edit distance by trying every shorter edit sequence breadth-first (insert, delete, substitute, swap):
    slow, obviously right, for short strings."""
    alphabet = set(a + b)
    frontier, seen, steps = {a}, {a}, 0
    while b not in frontier:
        nxt = set()
        for s in frontier:
            for i in range(len(s) + 1):
                for c in alphabet:
                    nxt.add(s[:i] + c + s[i:])
                if i < len(s):
                    nxt.add(s[:i] + s[i + 1:])
                    nxt.update(s[:i] + c + s[i + 1:] for c in alphabet)
                if i + 1 < len(s):
                    nxt.add(s[:i] + s[i + 1] + s[i] + s[i + 2:])
        frontier, steps = nxt - seen, steps + 1
        seen |= nxt
    return steps


@pytest.mark.parametrize("a,b", [("VARIENT", "VARIANT"), ("ab", "ba"), ("SEED", "SEEDS"), ("LR", "LRS"),
                                 ("kitten", "sittin"), ("GPUS", "GPU_IDS"), ("", "abc")])
def test_edit_distance_against_a_breadth_first_search(a, b):
    assert edit_distance(a, b) == plain_distance(a, b)


def test_nearest_guesses_one_edit_or_another_case_and_not_short_names():
    known = ["VARIANT", "TOTAL_UPDATES", "LR", "NODE_RANK", "SEED"]
    assert nearest("VARIENT", known) == "VARIANT"
    assert nearest("TOTAL_UPDATE", known) == "TOTAL_UPDATES"
    assert nearest("variant", known) == "VARIANT"
    assert nearest("lr", known) == "LR"  # another case: even a short name
    assert nearest("LRS", known) is None  # one edit from LR, but two letters are near too much to guess
    assert nearest("ROLE_RANK", known) is None  # torchrun's, two edits from NODE_RANK
    assert nearest("SEEDS", known) == "SEED"


# What a shell, a cluster and a launcher put in the environment: none of it may be taken for a misspelt setting.
EVERYDAY = ("PATH HOME USER SHELL LANG TERM PWD OLDPWD HOSTNAME LOGNAME MAIL TMPDIR DISPLAY EDITOR PAGER SHLVL _ "
            "CUDA_VISIBLE_DEVICES CUDA_HOME LD_LIBRARY_PATH PYTHONPATH PYTHONUNBUFFERED OMP_NUM_THREADS "
            "MKL_NUM_THREADS NCCL_DEBUG NCCL_SOCKET_IFNAME HF_HOME TORCH_HOME CONDA_PREFIX VIRTUAL_ENV "
            "SLURM_JOB_ID SLURM_NNODES SLURM_CPUS_PER_TASK SLURM_JOB_NODELIST SLURM_PROCID LOCAL_RANK RANK "
            "GROUP_RANK ROLE_RANK WORLD_SIZE LOCAL_WORLD_SIZE ROLE_WORLD_SIZE GROUP_WORLD_SIZE MASTER_ADDR "
            "MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT PYTHON TUPE_DEBUG FAIRSEQ_TRAIN "
            "TUPE_RUN_LOCKS TUPE_RUN_LOCK_HEARTBEAT_S TUPE_TORCHRUN_PARENT").split()


def test_the_callers_script_settings_do_not_reach_the_tests():
    """A shell set up for a study (OUT, VARIANTS exported) once made 55 tests fail: conftest drops every script
    setting from the environment the tests and their processes start from, and nothing else."""
    environ = {"OUT": "runs/x", "VARIANTS": "all", "FT_LRS": "1e-4", "PATH": "/bin", "HOME": "/root",
               "OMP_NUM_THREADS": "1", "VARIANT_NOTE": "kept"}
    assert drop_script_settings(environ) == ["FT_LRS", "OUT", "VARIANTS"]
    assert environ == {"PATH": "/bin", "HOME": "/root", "OMP_NUM_THREADS": "1", "VARIANT_NOTE": "kept"}
    assert {"OUT", "VARIANTS", "LR", "SEED"} <= {n for script in setting_tables() for n in setting_names(script)}
    assert not {n for script in setting_tables() for n in setting_names(script)} & set(os.environ)


@pytest.mark.parametrize("prog", ["pretrain.sh", "finetune.sh", "grid.sh", "c4", "study.sh"])
def test_an_everyday_environment_is_not_taken_for_misspelt_settings(prog):
    known = setting_names(prog)
    assert misspelt(known, {name: "1" for name in EVERYDAY}, prefixes=("FT_",) if prog == "study.sh" else ()) == []
    # and grid.sh's own settings reach finetune.sh (it runs it with them): none may look misspelt there
    if prog == "finetune.sh":
        assert misspelt(known, {name: "1" for name in setting_names("grid.sh")}) == []


def others(script: str) -> dict:
    """Another trainer's name -> the setting it names, of every table of ``script`` (``setting(others=...)``)."""
    return {other: name for table in setting_tables()[script] for other, name in table.others().items()}


@pytest.mark.parametrize("prog", ["pretrain.sh", "finetune.sh", "grid.sh", "study.sh"])
def test_other_trainers_names_are_none_of_the_scripts_own_and_none_an_everyday_variable(prog):
    names, theirs = set(setting_names(prog)), others(prog)
    assert theirs and set(theirs.values()) <= names
    assert not set(theirs) & names and not set(theirs) & set(EVERYDAY)
    # one meaning each: a name that two tables declare names the same setting in both
    pairs = [(o, n) for table in setting_tables()[prog] for o, n in table.others().items()]
    assert len(pairs) == len(set(theirs))


def test_another_trainers_name_is_refused_naming_ours_and_a_passed_on_or_own_name_is_not():
    from tupe_pretrain.pretrain import PretrainConfig

    known, theirs = PretrainConfig.names(), PretrainConfig.others()
    assert {theirs["MAX_UPDATE"], theirs["LEARNING_RATE"], theirs["WARMUP_UPDATES"], theirs["MAX_TOKENS"]} == {
        "TOTAL_UPDATES", "LR", "WARMUP", "MAX_SENTENCES"}
    for name, ours in (("MAX_UPDATE", "TOTAL_UPDATES"), ("LEARNING_RATE", "LR"), ("WARMUP_UPDATES", "WARMUP")):
        with pytest.raises(UsageError, match=rf"^{name} is another trainer's name \(fairseq's or Hugging Face's\): "
                                             rf"use {ours}, pretrain.sh's \(pretrain.sh --help"):
            check_names(known, {name: "10", "PATH": "/bin"}, "pretrain.sh", others=theirs)
    check_names(known, {"MAX_UPDATE": ""}, "pretrain.sh", others=theirs)  # empty: not set
    check_names(known, {"MAX_UPDATE": "10"}, "pretrain.sh", passed_on=lambda: ["MAX_UPDATE"], others=theirs)
    check_names(["MAX_UPDATE"], {"MAX_UPDATE": "10"}, "x.sh", others=theirs)  # a script's own name


def test_a_child_gets_the_parents_environment_less_the_parents_settings_it_does_not_declare():
    environ = {"SEEDS": "1", "OUT": "o", "VOCAB_SIZE": "300", "PATH": "/bin", "OMP_NUM_THREADS": "1",
               "CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "SLURM_JOB_ID": "7", "HF_HOME": "/h", "X": "y"}
    child = child_environ(environ, parent=["SEEDS", "OUT", "VOCAB_SIZE", "FT_LRS"], child=["VOCAB_SIZE", "SEED"])
    assert child == {k: v for k, v in environ.items() if k not in ("SEEDS", "OUT")}


def test_every_study_setting_in_the_environment_reaches_no_child_as_a_misspelling(monkeypatch):
    """SEEDS=1 study.sh failed at the C4 step: the study handed its environment to python -m tupe_preprocess.c4 task,
    whose name check took SEEDS for a misspelt SEED. Each child of the study now gets the study's settings it
    declares only (the C4 step: C4_DIR, VOCAB_SIZE, ...; fine-tuning's fairseq-train: none)."""
    from tupe_preprocess.c4 import pipeline
    from tupe_study import stages
    from tupe_study.settings import StudyConfig

    for name in StudyConfig.names():
        monkeypatch.setenv(name, "1")
    c4 = pipeline.config_class().names()
    env = stages.child_env(c4)
    assert misspelt(c4, env) == []
    assert {n for n in StudyConfig.names() if n in env} == set(StudyConfig.names()) & set(c4)
    assert not set(StudyConfig.names()) & set(stages.child_env())
    assert stages.child_env(c4, JOBS=2)["JOBS"] == "2" and "PATH" in env


def run(cmd, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TUPE_"))}
    full.update(PATH=f"{BIN}:{full.get('PATH', '')}", OMP_NUM_THREADS="1", **env)
    return subprocess.run([str(c) for c in cmd], cwd=tmp, env=full, capture_output=True, text=True, timeout=300)


def last(p: subprocess.CompletedProcess) -> str:
    return (p.stderr.strip().splitlines() or [""])[-1]


@pytest.mark.usefixtures("starts_process")
@pytest.mark.parametrize("cmd,env,says", [
    (["train_scripts/pretrain.sh"], {"VARIENT": "bert-a", "DATA": "x"},
     "VARIENT is not a setting of pretrain.sh: did you mean VARIANT?"),
    (["train_scripts/pretrain.sh"], {"TOTAL_UPDATE": "10", "DATA": "x"}, "did you mean TOTAL_UPDATES?"),
    (["glue/finetune.sh", "RTE", "1e-5", "1"], {"EPOCH": "3", "CHECKPOINT": "x"}, "did you mean EPOCHS?"),
    (["glue/grid.sh"], {"SEED": "1", "CHECKPOINT": "x"}, "SEED is not a setting of grid.sh: did you mean SEEDS?"),
    (["glue/grid.sh"], {"DROPOUTS": "0.2", "CHECKPOINT": "x"}, "did you mean DROPOUT?"),  # finetune.sh's, passed on
    (["python", "-m", "tupe_preprocess.c4", "run", "x"], {"VOCABSIZE": "100"}, "did you mean VOCAB_SIZE?"),
    (["train_scripts/study.sh"], {"VARIANT": "bert-a", "OUT": "o"}, "did you mean VARIANTS?"),
    (["train_scripts/study.sh"], {"FT_SEED": "2", "OUT": "o"}, "FT_SEED is not a setting of study.sh: no setting"),
    (["train_scripts/pretrain.sh"], {"MAX_UPDATE": "10", "DATA": "x"},
     "MAX_UPDATE is another trainer's name (fairseq's or Hugging Face's): use TOTAL_UPDATES, pretrain.sh's"),
    (["train_scripts/pretrain.sh"], {"LEARNING_RATE": "1e-3", "DATA": "x"}, "LEARNING_RATE is another trainer's name"),
    (["train_scripts/pretrain.sh"], {"WARMUP_UPDATES": "10", "DATA": "x"}, "use WARMUP, pretrain.sh's"),
    (["glue/finetune.sh", "RTE", "1e-5", "1"], {"MAX_EPOCH": "3", "CHECKPOINT": "x"}, "use EPOCHS, finetune.sh's"),
    (["glue/grid.sh"], {"BATCH_SIZE": "16", "CHECKPOINT": "x"}, "use SENTENCES_PER_BATCH, grid.sh's"),
    (["train_scripts/study.sh"], {"MAX_UPDATE": "10", "OUT": "o"}, "use TOTAL_UPDATES, study.sh's"),
], ids=["pretrain-VARIENT", "pretrain-TOTAL_UPDATE", "finetune-EPOCH", "grid-SEED", "grid-DROPOUTS", "c4-VOCABSIZE",
        "study-VARIANT", "study-FT_SEED", "pretrain-MAX_UPDATE", "pretrain-LEARNING_RATE", "pretrain-WARMUP_UPDATES",
        "finetune-MAX_EPOCH", "grid-BATCH_SIZE", "study-MAX_UPDATE"])
def test_a_misspelt_setting_is_refused_before_any_work(cmd, env, says, tmp_path):
    if cmd[0] == "python":
        import sys

        cmd = [sys.executable, *cmd[1:]]
    else:
        cmd = [ROOT / cmd[0], *cmd[1:]]
    p = run(cmd, tmp_path, PYTHONPATH=str(ROOT), **env)
    assert p.returncode == 2 and says in last(p), p.stderr[-2000:]
    assert "Traceback" not in p.stderr and sorted(tmp_path.iterdir()) == []  # nothing written


@pytest.fixture(scope="module")
def c4_folder(tmp_path_factory) -> Path:
    from corpus import study_inputs

    d = tmp_path_factory.mktemp("names_c4")
    study_inputs(d)
    return d / "c4"


def study(tmp: Path, c4: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """What study.sh runs (python -m tupe_study), forked from the tests' warm interpreter (conftest.run)."""
    from conftest import run as run_cli

    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TUPE_"))}
    full.update({"OMP_NUM_THREADS": "1", "PRESET": "tiny", "VARIANTS": "nope", "GPUS": "0", "C4_DIR": str(c4),
                 "TASKS": "none", **env})
    return run_cli([sys.executable, "-m", "tupe_study", *args], tmp, check=False, timeout=300, env=full)


@pytest.mark.usefixtures("starts_process")
def test_study_part_beyond_its_parts_writes_nothing_and_a_corrected_rerun_goes_on(tmp_path, c4_folder):
    out = tmp_path / "s"
    p = study(tmp_path, c4_folder, "--part", "pretrain", "99", OUT=str(out))
    assert p.returncode == 2 and "pretrain has 1 part(s) (0..0), not index 99" in last(p), p.stderr[-2000:]
    assert not (out / "settings.env").exists()
    # the corrected rerun, with another setting, is not refused as a changed study (nothing was recorded)
    p = study(tmp_path, c4_folder, "--slurm", OUT=str(out), TOTAL_UPDATES="8")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "TOTAL_UPDATES=8" in (out / "settings.env").read_text()


@pytest.mark.usefixtures("starts_process")
def test_study_report_needs_a_study_that_has_run(tmp_path, c4_folder):
    out = tmp_path / "s"
    p = study(tmp_path, c4_folder, "--report", OUT=str(out))  # no such folder
    assert p.returncode == 1 and last(p) == f"study.sh: error: {out}: no such file or folder", p.stderr[-2000:]
    out.mkdir()
    p = study(tmp_path, c4_folder, "--report", OUT=str(out))  # a folder, but no study
    assert p.returncode == 2 and "holds no study (no settings.env)" in last(p), p.stderr[-2000:]
    assert sorted(os.listdir(out)) == []
    assert study(tmp_path, c4_folder, "--slurm", OUT=str(out)).returncode == 0  # recorded, nothing trained
    p = study(tmp_path, c4_folder, "--report", OUT=str(out))
    assert p.returncode == 1 and "nothing to report: none of the 1 pre-training run(s)" in last(p), p.stderr[-2000:]
    assert not (out / "report.md").exists()


@pytest.mark.parametrize("kind,good,bad,said", [
    ("int1", ["1", "12"], ["0", "-1", "1.5", "x", ""], "a positive whole number"),
    ("int0", ["0", "7"], ["-1", "x"], "a whole number"),
    ("int", ["-1", "0"], ["1e3", "x"], "an integer"),
    ("num+", ["1e-4", "0.5", "3"], ["0", "-1e-4", "nan", "inf", "x"], "a number > 0"),
    ("num0", ["0", "0.1"], ["-0.1", "x"], "a number >= 0"),
    ("frac", ["0", "0.15", "0.999"], ["1", "1.5", "-0.1", "abc"], "a fraction in [0, 1)"),
    ("auto/int1", ["auto", "3"], ["0", "automatic"], "auto or a positive whole number"),
    ("mlm/electra", ["mlm", "electra"], ["MLM", ""], "mlm or electra"),
    ("auto/0/1", ["auto", "0", "1"], ["2", "yes"], "one of auto, 0, 1"),
])
def test_kinds_accept_and_refuse_by_a_written_out_list(kind, good, bad, said):
    from tupe_common.tunables import Tunable, describe, fits, settings_class

    assert all(fits(kind, v) for v in good) and not any(fits(kind, v) for v in bad)
    assert describe(kind) == said
    one = settings_class("One", [Tunable("X", good[0], "", kind)], "a setting X")
    with pytest.raises(ValueError, match=rf"^X must be {re.escape(said)}, not '{re.escape(bad[0])}'$"):
        one(X=bad[0])


@pytest.mark.parametrize("script", ["pretrain.sh", "finetune.sh", "grid.sh", "c4"])  # study.sh: defaults from presets
def test_every_default_is_of_its_kind(script):
    """The tables' own defaults pass their kinds (a kind written too narrowly would refuse the default run)."""
    from tupe_common.tunables import fits

    table = [t for cls in setting_tables()[script] for t in cls.tunables()]
    assert any(t.kind for t in table)
    assert [t.name for t in table if not fits(t.kind, t.default)] == []


@pytest.mark.usefixtures("starts_process")
def test_study_with_gpus_on_a_machine_without_them_is_refused_before_any_work(tmp_path, c4_folder):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "s"
    p = study(tmp_path, c4_folder, OUT=str(out), GPUS="1")
    assert p.returncode == 2 and last(p).startswith("study.sh: error: GPUS=1 but this machine sees 0 CUDA device(s)")
    assert not out.exists()  # no settings.env, no C4 preparation
