"""glue/finetune.sh, glue/grid.sh, glue/grid.sbatch end to end on the GLUE fixtures, on CPU.

The fixtures (tests/data/glue) are binarized with the conftest sentencepiece model, so that they share the
dictionary of the conftest ``pretrained`` tiny TUPE-R (64 positions); the runs are tiny (2 epochs,
batch 16) through env overrides, with ``--shorten-method truncate`` because a few fixture pairs are
longer than 64 tokens.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import BIN, ROOT, run, train_losses
from tupe_glue import collect
from tupe_glue.finetune_helper import TaskFacts, task_settings
from tupe_glue.grid import PAPER_LRS, PAPER_SEEDS, PAPER_TASKS, jobs, main_sh
from tupe_common.errors import UsageError
from tupe_common.jobs import slurm_ranges

FIXTURES = ROOT / "tests" / "data" / "glue"
FINETUNE, GRID, GRID_SBATCH = ROOT / "glue" / "finetune.sh", ROOT / "glue" / "grid.sh", ROOT / "glue" / "grid.sbatch"
TINY = {"EPOCHS": "2", "SENTENCES_PER_BATCH": "16", "NUM_WORKERS": "0", "LOG_INTERVAL": "1",
        "TRUNCATE": "1"}
VALID_RE = re.compile(r"valid on '(\w+)' subset \|.*? \| (accuracy|mcc|pearson) (-?[0-9.]+) \|")


def sh(cmd: List, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in TINY}
    full.update(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **env)
    return run(cmd, cwd=ROOT, check=check, env=full, timeout=300)


@pytest.fixture(scope="module")
def glue_bin(spm_dir, tmp_path_factory, starts_process) -> Path:
    out = tmp_path_factory.mktemp("glue_bin")
    sh(["python", "-m", "tupe_preprocess.glue_binarize", "--glue-dir", FIXTURES, "--tasks", "RTE,STS-B",
        "--spm-model", spm_dir / "spm.model", "--dict", spm_dir / "dict.txt", "--out-dir", out])
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("glue_runs") / "tupe_r_tiny"


def run_env(pretrained: Path, glue_bin: Path, runs: Path, **extra: str) -> Dict[str, str]:
    return dict(TINY, CHECKPOINT=str(pretrained / "checkpoint_last.pt"), GLUE_BIN=str(glue_bin), RUNS=str(runs),
                **extra)


def best_in_log(log: str) -> Dict[str, float]:
    best: Dict[str, float] = {}
    for subset, _, value in VALID_RE.findall(log):
        best[subset] = max(best.get(subset, -1e9), float(value))
    return best


@pytest.fixture(scope="module")
def rte_run(pretrained, glue_bin, runs, starts_process):
    stale = runs / ".partial" / "RTE" / "lr1e-3_seed1"
    stale.mkdir(parents=True)
    (stale / "train.log").write_text("an earlier attempt that was killed\n")
    p = sh([FINETUNE, "RTE", "1e-3", "1"], **run_env(pretrained, glue_bin, runs))
    return runs / "RTE" / "lr1e-3_seed1", p


# ---- no training -----------------------------------------------------------------------------------


def test_help_texts(starts_process):
    out = sh([FINETUNE, "--help"]).stdout
    for var in ("CHECKPOINT", "GLUE_BIN", "RUNS", "EPOCHS", "SENTENCES_PER_BATCH", "MAX_TOKENS", "KEEP_CHECKPOINTS", "EXTRA_ARGS"):
        assert re.search(rf"^  {var} ", out, re.M), var
    grid = sh([GRID, "--help"]).stdout
    assert all(re.search(rf"^  {v} ", grid, re.M) for v in ("TASKS", "LRS", "SEEDS", "JOBS", "GPU_IDS"))
    assert "SLURM_ARRAY_TASK_ID" in sh(["bash", GRID_SBATCH, "--help"]).stdout


def test_task_settings_follow_the_paper():
    mnli, cola, stsb, qqp = (task_settings(t) for t in ("MNLI", "CoLA", "STS-B", "QQP"))
    assert (mnli.num_classes, mnli.valid_subsets, mnli.epochs) == (3, ("valid", "valid1"), 5)
    assert (cola.metric, cola.epochs) == ("mcc", 10)
    assert (stsb.metric, stsb.regression, stsb.num_classes) == ("pearson", True, 1)
    assert (qqp.metric, qqp.epochs) == ("accuracy", 5)
    custom = task_settings("Reviews", num_classes=2, custom=True)  # a custom task: SST-2's settings
    assert custom == TaskFacts(num_classes=2, metric="accuracy", valid_subsets=("valid",), epochs=10, regression=False)
    with pytest.raises(ValueError, match="unknown task 'Reviews'"):
        task_settings("Reviews")


def test_grid_indices_and_defaults(starts_process):
    grid = jobs(PAPER_TASKS, PAPER_LRS, PAPER_SEEDS)
    assert len(grid) == 160 and grid[0][1:] == ("CoLA", "2e-5", "1") and grid[159][1:] == ("RTE", "5e-5", "5")
    assert grid[6][1:] == ("CoLA", "3e-5", "2")  # seeds fastest, then LRs, then tasks
    assert slurm_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    help_text = sh([GRID, "--help"]).stdout  # grid.sh's defaults are the ones grid.sbatch gets from tupe_glue.grid
    assert " ".join(PAPER_TASKS) in help_text and " ".join(PAPER_LRS) in help_text
    assert " ".join(PAPER_SEEDS) in help_text


def test_grid_sh_lists_without_a_checkpoint_and_refuses_bad_settings(tmp_path, capsys):
    """grid.sh's function (tupe_glue/grid.py main_sh) in this process: --list needs no CHECKPOINT; a bad JOBS, an
    unknown task and two modes at once are usage errors (2) named on one line, before any run."""
    env = {"RUNS": str(tmp_path / "runs"), "TASKS": "RTE", "LRS": "1e-3", "SEEDS": "1,2", "GLUE_BIN": str(tmp_path)}
    assert main_sh(["--list"], env) == 0
    assert capsys.readouterr().out.splitlines() == ["0\tRTE\t1e-3\t1\ttodo", "1\tRTE\t1e-3\t2\ttodo"]
    (tmp_path / "ck.pt").write_bytes(b"")
    (tmp_path / "RTE-bin").mkdir()
    assert main_sh([], dict(env, CHECKPOINT=str(tmp_path / "ck.pt"), JOBS="two", GPU_IDS="none")) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "grid.sh: error: JOBS must be auto or a positive whole number, not 'two'"
    assert main_sh(["--list"], dict(env, TASKS="RTE Poetry")) == 2
    assert "grid.sh: error: unknown task(s) Poetry; choose from" in capsys.readouterr().err
    assert main_sh(["--slurm", "--list"], env) == 2 and "Usage: " in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_refuses_a_foreign_run_folder_and_a_missing_checkpoint(tmp_path, glue_bin, starts_process):
    (tmp_path / "RTE" / "lr2e-5_seed1").mkdir(parents=True)
    p = sh([FINETUNE, "RTE", "2e-5", "1"], check=False, CHECKPOINT="x.pt", GLUE_BIN=str(glue_bin), RUNS=str(tmp_path))
    assert p.returncode == 2 and "exists without result.json" in p.stderr
    q = sh([FINETUNE, "RTE", "2e-5", "2"], check=False, CHECKPOINT=str(tmp_path / "none.pt"),
           GLUE_BIN=str(glue_bin), RUNS=str(tmp_path))
    assert q.returncode == 1 and "none.pt: no such file" in q.stderr  # a missing input: 1
    (tmp_path / "bogus.pt").write_bytes(b"not a checkpoint")
    r = sh([FINETUNE, "RTE", "2e-5", "3"], check=False, CHECKPOINT=str(tmp_path / "bogus.pt"),
           GLUE_BIN=str(glue_bin), RUNS=str(tmp_path))
    assert r.returncode == 1 and "bogus.pt: not a checkpoint (a text file: 'not a checkpoint')" in r.stderr  # bad data: 1
    assert not (tmp_path / "RTE" / "lr2e-5_seed3").exists() and not (tmp_path / ".partial").exists()


def test_the_old_name_batch_still_sets_the_batch_with_a_warning(tmp_path, starts_process):
    p = sh([FINETUNE, "RTE", "2e-5", "1"], check=False, BATCH="8", RUNS=str(tmp_path))
    assert "warning: BATCH is a deprecated name of SENTENCES_PER_BATCH: set SENTENCES_PER_BATCH=8" in p.stderr
    assert re.search(r"^  SENTENCES_PER_BATCH=8 +\[32\]$", p.stderr, re.M), p.stderr
    assert p.returncode == 2 and "CHECKPOINT is required" in p.stderr  # then stops before any work
    q = sh([FINETUNE, "RTE", "2e-5", "1"], check=False, BATCH="8", SENTENCES_PER_BATCH="4", RUNS=str(tmp_path))
    assert "SENTENCES_PER_BATCH=4 is set, so BATCH=8 is ignored" in q.stderr
    assert re.search(r"^  SENTENCES_PER_BATCH=4 +\[32\]$", q.stderr, re.M)


def test_grid_checks_checkpoint_and_binaries_before_the_first_run(tmp_path, starts_process):
    runs, checkpoint = tmp_path / "runs", tmp_path / "ck.pt"
    checkpoint.write_bytes(b"")  # exists: the grid checks the name; finetune.sh reads it
    p = sh([GRID], check=False, CHECKPOINT=str(tmp_path / "none.pt"), GLUE_BIN=str(tmp_path / "no-bin"),
           RUNS=str(runs), TASKS="RTE", JOBS="1")
    assert p.returncode == 1 and "CHECKPOINT=" in p.stderr and "none.pt: no such file" in p.stderr
    q = sh([GRID], check=False, CHECKPOINT=str(checkpoint), GLUE_BIN=str(tmp_path / "no-bin"), RUNS=str(runs),
           TASKS="RTE MRPC", JOBS="1")
    assert q.returncode == 1 and "no-bin/RTE-bin, " in q.stderr and "no-bin/MRPC-bin: no such folder" in q.stderr
    r = sh([GRID, "--slurm"], check=False, CHECKPOINT=str(checkpoint), GLUE_BIN=str(tmp_path / "no-bin"),
           RUNS=str(runs), TASKS="RTE")
    assert r.returncode == 1 and "sbatch" not in r.stdout and "no such folder" in r.stderr
    assert not runs.exists()  # no run started, no table written


def test_grid_stops_at_a_usage_error_instead_of_repeating_it(pretrained, tmp_path, glue_bin, starts_process):
    """A usage error that only a run finds (fairseq-train refusing EXTRA_ARGS; the grid checks LRs, seeds and
    numbers before the first run): the first run's exit 2 stops the grid, the others are not started."""
    runs = tmp_path / "runs"
    p = sh([GRID], check=False, CHECKPOINT=str(pretrained / "checkpoint_last.pt"), GLUE_BIN=str(glue_bin),
           RUNS=str(runs), TASKS="RTE", LRS="1e-3 2e-3", SEEDS="1 2", JOBS="1", EXTRA_ARGS="--no-such-flag")
    assert p.returncode == 2
    assert "grid.sh: error: RTE lr1e-3_seed1 failed (exit 2): see " in p.stderr
    assert "RTE lr1e-3_seed1 failed with a usage error (exit 2): the other jobs would fail the same way, so 3 " \
           "job(s) are not started" in p.stderr
    assert [f.name for f in (runs / ".grid_logs" / "RTE").iterdir()] == ["lr1e-3_seed1.out"]
    assert "unrecognized arguments: --no-such-flag" in (runs / ".grid_logs" / "RTE" / "lr1e-3_seed1.out").read_text()
    assert not (runs / "glue_results.csv").exists()  # no table of a stopped grid


# ---- fine-tuning -----------------------------------------------------------------------------------


def test_finetune_rte_end_to_end(rte_run):
    run_dir, p = rte_run
    assert sorted(os.listdir(run_dir)) == ["best.txt", "command.txt", "result.json", "train.log"]
    assert not (run_dir.parent.parent / ".partial" / "RTE" / "lr1e-3_seed1").exists()  # stale attempt redone
    result = json.loads((run_dir / "result.json").read_text())
    log = (run_dir / "train.log").read_text()
    assert "an earlier attempt" not in log
    # fairseq-train's logging: "time | LEVEL | name | message" at INFO, not Python's "LEVEL:name:" with DEBUG lines
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| fairseq_cli\.train \| ", log, re.M)
    assert not re.search(r"^(DEBUG|INFO|WARNING|ERROR):[\w.]+:", log, re.M) and "| DEBUG |" not in log
    assert result["best_valid"] == best_in_log(log) and set(result["best_valid"]) == {"valid"}
    assert {k: result[k] for k in ("task", "lr", "seed", "metric", "checkpoint_variant")} == {
        "task": "RTE", "lr": 1e-3, "seed": 1, "metric": "accuracy", "checkpoint_variant": "tupe_r"}
    assert 0 <= result["best_valid"]["valid"] <= 100
    cmd = (run_dir / "command.txt").read_text()
    for flag in ("--arch tupe_roberta_tiny --max-positions 64 --encoder-layers 2 --encoder-embed-dim 64 "
                 "--encoder-attention-heads 4 --encoder-ffn-embed-dim 128 --no-input-pe --untied-pos --untie-cls --rel-pos",
                 "--criterion glue_sentence_prediction --metric-averaging dev_set",
                 "--num-classes 2 --init-token 0 --separator-token 2", "--batch-size 16 --max-tokens 4400",
                 "--adam-betas '(0.9,0.999)' --adam-eps 1e-6 --weight-decay 0.01 --clip-norm 1.0",
                 "--lr 1e-3 --lr-scheduler warmup_ratio --warmup-ratio 0.06 --max-epoch 2",
                 "--dropout 0.1 --attention-dropout 0.1 --pooler-dropout 0.1 --seed 1", "--valid-subset valid",
                 "--best-checkpoint-metric accuracy --maximize-best-checkpoint-metric", "--cpu", "--no-save",
                 "--validations-per-epoch 2", "--reset-optimizer", "--shorten-method truncate"):
        assert flag in cmd, flag
    assert "--fp16" not in cmd and "--regression-target" not in cmd
    # 48 pairs / batch 16 = 3 updates per epoch: exactly two validations per epoch, after update
    # ceil(3/2) = 2 of the epoch and at its end (fairseq's --validate-interval-updates 2 gives 2, 3, 4, 6)
    assert "warmup_ratio schedule: 3 updates/epoch x 2 epochs -> 6 updates" in log
    assert [int(u) for u in re.findall(r"valid on 'valid' subset .*num_updates (\d+)", log)] == [2, 3, 5, 6]
    assert "--validate-interval-updates" not in cmd
    assert f"RTE lr1e-3_seed1 done: valid accuracy {result['best_valid']['valid']}" in p.stderr
    assert collect.read_run("RTE", str(run_dir), "accuracy") == result["best_valid"]


def test_a_failed_fairseq_train_is_exit_1_not_a_usage_error(pretrained, glue_bin, tmp_path, starts_process):
    """1, so that glue/grid.sh goes on with the other runs (it stops at a 2: fairseq's own usage errors)."""
    q = sh([FINETUNE, "RTE", "1e-3", "2"], check=False,
           **run_env(pretrained, glue_bin, tmp_path, EXTRA_ARGS="--max-positions 32"))
    assert q.returncode == 1 and "fairseq-train failed (exit 1)" in q.stderr  # the checkpoint has 64 positions


def test_finished_run_is_skipped(rte_run, pretrained, glue_bin, runs, starts_process):
    run_dir, _ = rte_run
    before = (run_dir / "result.json").stat().st_mtime_ns
    p = sh([FINETUNE, "RTE", "1e-3", "1"], **run_env(pretrained, glue_bin, runs))
    assert "already done" in p.stderr and "skipping" in p.stderr
    assert (run_dir / "result.json").stat().st_mtime_ns == before
    q = sh([FINETUNE, "RTE", "0.001", "1"], **run_env(pretrained, glue_bin, runs))  # one value, one run
    assert "RTE lr1e-3_seed1: already done" in q.stderr and not (runs / "RTE" / "lr0.001_seed1").exists()


def test_readers_beside_a_live_lock_and_a_grid_on_a_held_runs_refused(rte_run, pretrained, glue_bin, runs, capsys):
    """tupe_glue.collect reads RUNS beside live locks (RUNS's: a grid's; a run's), and grid.sh on a RUNS another grid
    holds is refused, exit 2, before any run (tupe_common/lock.py); the finished rte_run left no lock. Two
    finetune.sh of one run at once (the second refused): test_sigterm_stops_the_grid_..., on the run it stops (its
    own fine-tuning here cost ~9 s of issue 62's test time)."""
    from tupe_glue.finetune import run_lock
    from tupe_common import lock

    assert not list(runs.rglob("*.lock")) and rte_run[0].is_dir()  # the finished run left no lock
    live = {"pid": 1, "host": lock.host(), "started": "2026-01-01T00:00:00Z", "token": "t"}  # pid 1: a live holder
    for planted in (runs / lock.LOCK_NAME, Path(run_lock(str(runs), "RTE", 1e-3, 1))):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(json.dumps(live))
    try:
        assert collect.main([str(runs)]) == 0 and "RTE" in capsys.readouterr().out
        env = run_env(pretrained, glue_bin, runs, TASKS="RTE", LRS="1e-3 2e-3", SEEDS="1", GPU_IDS="none")
        assert main_sh([], env) == 2
        assert f"grid.sh: error: {runs} is in use by another run (pid 1 on {lock.host()}" in \
            capsys.readouterr().err.strip().splitlines()[-1]
        assert not (runs / "RTE" / "lr2e-3_seed1").exists() and not (runs / ".grid_logs").exists()
    finally:
        for planted in (runs / lock.LOCK_NAME, Path(run_lock(str(runs), "RTE", 1e-3, 1))):
            planted.unlink()


def test_a_rerun_with_other_inputs_is_refused_not_skipped(rte_run, pretrained, glue_bin, runs, tmp_path,
                                                         starts_process):
    """The finished RTE run again with another checkpoint or other EPOCHS: refused (exit 2), naming what differs,
    the run untouched; grid.sh with that checkpoint refuses before any run; the same inputs still skip."""
    import torch

    run_dir, _ = rte_run
    before = (run_dir / "result.json").read_bytes()
    recorded = json.loads(before)["inputs"]
    assert recorded["EPOCHS"] == "2" and recorded["lr"] == "1e-3" and len(recorded["checkpoint"]) == 16
    state = torch.load(pretrained / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    state["optimizer_history"][-1]["num_updates"] += 1  # another checkpoint of the same model
    other = tmp_path / "other.pt"
    torch.save(state, other)
    p = sh([FINETUNE, "RTE", "1e-3", "1"], check=False, **dict(run_env(pretrained, glue_bin, runs), CHECKPOINT=str(other)))
    assert p.returncode == 2 and "was made with other inputs (CHECKPOINT (fingerprint) " in p.stderr, p.stderr
    assert "set RUNS to another folder, or move that run away to redo it" in p.stderr
    q = sh([FINETUNE, "RTE", "1e-3", "1"], check=False, **run_env(pretrained, glue_bin, runs, EPOCHS="3"))
    assert q.returncode == 2 and "(EPOCHS 2 -> 3)" in q.stderr, q.stderr
    r = sh([GRID], check=False, **dict(run_env(pretrained, glue_bin, runs, TASKS="RTE", LRS="1e-3 5e-3", SEEDS="1",
                                               JOBS="1"), CHECKPOINT=str(other)))
    assert r.returncode == 2 and "1 finished run(s) in " in r.stderr and "RTE lr1e-3_seed1 (CHECKPOINT" in r.stderr
    assert not (runs / "RTE" / "lr5e-3_seed1").exists()  # nothing ran
    assert (run_dir / "result.json").read_bytes() == before
    assert "already done" in sh([FINETUNE, "RTE", "1e-3", "1"], **run_env(pretrained, glue_bin, runs)).stderr


def test_ctrl_c_ends_a_run_with_one_line_exit_130_and_nothing_a_rerun_trusts(pretrained, glue_bin, tmp_path,
                                                                           starts_process):
    """Ctrl-C (SIGINT to the terminal's process group: finetune.sh and its fairseq-train) while it trains: one
    line, exit 130, no traceback of ours, no finished-looking run folder (only .partial/, which a rerun redoes)."""
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in TINY}
    env.update(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               **run_env(pretrained, glue_bin, tmp_path, EPOCHS="500", QUIET="1"))
    # SIGINT's default action, as under a terminal: a caller started in the background by a shell without job
    # control (CI launched with `( ... & )`) passes SIGINT on ignored, and the run would train to its end
    p = subprocess.Popen([str(FINETUNE), "RTE", "1e-3", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = tmp_path / ".partial" / "RTE" / "lr1e-3_seed1" / "train.log"
    deadline = time.time() + 240
    while time.time() < deadline and not (log.exists() and "| epoch 002" in log.read_text(errors="replace")):
        assert p.poll() is None, p.communicate()
        time.sleep(0.5)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert err.rstrip().splitlines()[-1] == ("finetune.sh: error: stopped by SIGINT; rerun the same command to resume "
                                             "(finished runs are skipped)")
    assert "Traceback" not in err
    assert not (tmp_path / "RTE" / "lr1e-3_seed1").exists() and log.exists()
    # fairseq-train (its own process group) had the signal passed on: it finished its update and ended, no traceback
    text = log.read_text()
    assert "KeyboardInterrupt" not in text and "Traceback" not in text
    assert re.search(r"fairseq-train: error: stopped by SIGINT after update \d+; this run saves no checkpoint", text)


def test_sigterm_stops_the_grid_and_its_runs_and_the_rerun_matches_an_uninterrupted_run(rte_run, pretrained, glue_bin,
                                                                                        tmp_path, starts_process):
    """SIGTERM to grid.sh alone (kill PID) while its run trains: grid.sh -> finetune.sh -> fairseq-train all end,
    each saying so, exit 143, no finished-looking run; the same command then trains the run as an uninterrupted one
    (rte_run: the same settings), loss for loss.

    One run per folder, on that run (it had a fine-tuning of its own): while the grid's finetune.sh holds the run's
    lock, a second finetune.sh of the same run exits 2 at once naming the holder's pid and host, and so does a second
    grid.sh on the same RUNS; the lock is gone after the stop and after the rerun's normal end
    (tupe_common/lock.py)."""
    from tupe_glue.finetune import run_lock
    from process_tree import command_lines, start, stop_cleanly, tree, wait_for
    from tupe_common import lock

    runs = tmp_path / "runs"
    settings = run_env(pretrained, glue_bin, runs, TASKS="RTE", LRS="1e-3", SEEDS="1", JOBS="1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in TINY and k != lock.ENV}
    env.update(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **settings)
    p = start([GRID], env, cwd=ROOT)
    path = Path(run_lock(str(runs), "RTE", 1e-3, 1))
    wait_for(lambda: p.poll() is not None or path.exists(), 120, "the run took no lock")
    assert p.poll() is None, p.communicate()
    holder = (lock.read_record(str(path)) or {}).get("pid")
    assert "tupe_glue.finetune" in " ".join(command_lines([c for c in tree(p.pid) if c.pid == holder])), holder  # grid's run
    # the second: what finetune.sh execs (python -m tupe_glue.finetune), forked from the tests' warm interpreter
    # (conftest.run; a fresh one spent seconds importing torch before the lock); finetune.sh's settings alone
    alone = {k: v for k, v in env.items() if k not in ("TASKS", "LRS", "SEEDS", "JOBS")}
    second = run([sys.executable, "-m", "tupe_glue.finetune", "RTE", "1e-3", "1"], cwd=ROOT, env=alone, check=False,
                 timeout=120)
    last = second.stderr.strip().splitlines()[-1]
    assert second.returncode == 2 and last.startswith(
        f"finetune.sh: error: {runs}/.partial/RTE/lr1e-3_seed1 is in use by another run (pid {holder} on "
        f"{lock.host()}, "), last
    # a second grid.sh on the same RUNS (another LR: work the first does not do) is refused at once, naming the first
    grid_holder = (lock.read_record(str(runs / lock.LOCK_NAME)) or {}).get("pid")
    assert grid_holder in [p.pid] + [c.pid for c in tree(p.pid)], grid_holder
    other = sh([GRID], check=False, **dict(settings, LRS="2e-3"))
    assert other.returncode == 2 and other.stderr.strip().splitlines()[-1].startswith(
        f"grid.sh: error: {runs} is in use by another run (pid {grid_holder} on {lock.host()}, "), other.stderr[-2000:]
    assert not (runs / ".partial" / "RTE" / "lr2e-3_seed1").exists()
    log = runs / ".partial" / "RTE" / "lr1e-3_seed1" / "train.log"
    wait_for(lambda: p.poll() is not None or len(train_losses(log.read_text() if log.exists() else "")) >= 2, 240,
             "no update logged")
    assert p.poll() is None, p.communicate()
    procs = tree(p.pid)
    assert any("tupe_glue.fairseq_train" in c for c in command_lines(procs)), command_lines(procs)
    resume = "rerun the same command to resume (finished runs are skipped)"
    err = stop_cleanly(p, signal.SIGTERM, f"grid.sh: error: stopped by SIGTERM; {resume}", timeout=60, procs=procs)
    assert "failed" not in err
    assert not path.exists()  # released by its stopped holder
    assert not (runs / "RTE" / "lr1e-3_seed1").exists() and sh([GRID, "--list"], **settings).stdout == "0\tRTE\t1e-3\t1\ttodo\n"
    run_out = (runs / ".grid_logs" / "RTE" / "lr1e-3_seed1.out").read_text()
    assert run_out.rstrip().splitlines()[-1] == f"finetune.sh: error: stopped by SIGTERM; {resume}"
    assert re.search(r"fairseq-train: error: stopped by SIGTERM after update \d+", log.read_text())
    q = sh([GRID], **settings)
    assert "RTE lr1e-3_seed1: finished" in q.stderr
    done = (runs / "RTE" / "lr1e-3_seed1" / "train.log").read_text()
    assert train_losses(done) == train_losses((rte_run[0] / "train.log").read_text()) != []
    assert not list(runs.rglob("*.lock"))  # the rerun's locks (RUNS's, the run's) released at its end


def test_bad_lrs_seeds_and_batches_are_refused_before_any_run(tmp_path, capsys):
    """grid.sh checks every LR and seed and finetune.sh's numbers before the first run (LRS='1e-3,abc' trained the
    good LR first); finetune.sh refuses LR 0 and a batch of 0 (they fine-tuned and reported)."""
    from tupe_glue import finetune

    env = {"RUNS": str(tmp_path / "runs"), "TASKS": "RTE", "LRS": "1e-3,abc", "SEEDS": "1", "GLUE_BIN": str(tmp_path)}
    assert main_sh(["--list"], env) == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("grid.sh: error: LRS must be a list (spaces or commas) of which "
                                                        "each is a number > 0, not 'abc' (in '1e-3,abc')")
    assert main_sh(["--list"], dict(env, LRS="1e-3", SEEDS="1 x")) == 2
    assert "SEEDS must be a list (spaces or commas) of which each is an integer, not 'x' (in '1 x')" in \
        capsys.readouterr().err
    assert main_sh(["--list"], dict(env, LRS="1e-3", SENTENCES_PER_BATCH="0")) == 2
    assert "SENTENCES_PER_BATCH must be a positive whole number, not '0'" in capsys.readouterr().err
    for argv, extra, message in ((["RTE", "0", "1"], {}, "LR must be a positive number like 2e-5, not '0'"),
                                 (["RTE", "1e-3", "1"], {"SENTENCES_PER_BATCH": "0"}, "SENTENCES_PER_BATCH must be"),
                                 (["RTE", "1e-3", "1"], {"EPOCHS": "-1"}, "EPOCHS must be auto or a positive whole number, not '-1'")):
        assert finetune.main(argv, environ=dict(env, CHECKPOINT="x.pt", **extra)) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_fp16_on_a_machine_without_cuda_is_one_line_before_any_run(pretrained, glue_bin, tmp_path, capsys,
                                                                   starts_process):
    """FP16=1 where torch sees no CUDA device ended in fairseq's CUDA traceback; now exit 2 and nothing written."""
    import torch

    from tupe_glue import finetune

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: FP16=1 is allowed here")
    env = {"RUNS": str(tmp_path / "runs"), "GLUE_BIN": str(glue_bin), "CHECKPOINT": str(pretrained / "checkpoint_last.pt"),
           "FP16": "1", "PATH": os.environ["PATH"]}
    assert finetune.main(["RTE", "1e-3", "1"], environ=env) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("finetune.sh: error: FP16=1 needs a GPU, but this machine sees no CUDA device: "
                                    "leave FP16 unset on CPU") and "Traceback" not in err
    assert not (tmp_path / "runs" / "RTE").exists() and not (tmp_path / "runs" / ".partial").exists()


def test_gpu_ids_must_name_devices_this_machine_sees():
    from tupe_glue.grid import check_gpu_ids

    check_gpu_ids("auto", ["0", "1"], lambda: 0)  # auto and none are never refused
    check_gpu_ids("none", [], lambda: 0)
    check_gpu_ids("0 1", ["0", "1"], lambda: 2)
    for setting, count, says in (("0 1", 1, "GPU_IDS='0 1' names 1, but this machine sees 1 CUDA device(s) (0..0)"),
                                 ("0", 0, "GPU_IDS='0' names 0, but this machine sees 0 CUDA device(s): set"),
                                 ("gpu0", 2, "GPU_IDS='gpu0' names gpu0")):
        with pytest.raises(UsageError, match=re.escape(says)):
            check_gpu_ids(setting, setting.split(), lambda n=count: n)


def test_grid_with_gpu_ids_on_a_machine_without_them_runs_nothing(pretrained, glue_bin, tmp_path, capsys,
                                                                  starts_process):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    env = {"CHECKPOINT": str(pretrained / "checkpoint_last.pt"), "GLUE_BIN": str(glue_bin), "RUNS": str(tmp_path / "r"),
           "TASKS": "RTE", "LRS": "1e-3", "SEEDS": "1", "GPU_IDS": "0", "PATH": os.environ["PATH"]}
    assert main_sh([], env) == 2
    assert "grid.sh: error: GPU_IDS='0' names 0, but this machine sees 0 CUDA device(s)" in capsys.readouterr().err
    assert not (tmp_path / "r" / "RTE").exists()


def test_grid_refuses_a_repeated_seed_lr_or_task(tmp_path, capsys):
    env = {"RUNS": str(tmp_path / "runs"), "TASKS": "RTE", "LRS": "1e-3", "SEEDS": "1 2 1", "GLUE_BIN": str(tmp_path)}
    assert main_sh(["--list"], env) == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("grid.sh: error: SEEDS='1 2 1': seed 1 is given twice; give "
                                                        "each seed once")
    assert main_sh(["--list"], dict(env, SEEDS="1", LRS="1e-3,1e-3")) == 2
    assert "LRS='1e-3 1e-3': LR 1e-3 is given twice" in capsys.readouterr().err
    assert main_sh(["--list"], dict(env, SEEDS="1", LRS="1e-3 0.001")) == 2  # two spellings of one LR: one run
    assert "LRS='1e-3 0.001': 1e-3 and 0.001 are one LR (1e-3), given twice; give each LR once" in \
        capsys.readouterr().err
    assert main_sh(["--list"], dict(env, TASKS="RTE,RTE")) == 2
    assert "TASKS='RTE RTE': task RTE is given twice" in capsys.readouterr().err


def test_finetune_stsb_regression_reports_pearson_and_keeps_the_best_checkpoint(pretrained, glue_bin, runs, starts_process):
    """Also: two validations per epoch with --update-freq 2 (48 pairs / batch 8 = 6 batches = 3 updates)."""
    p = sh([FINETUNE, "STS-B", "1e-3", "1"], **run_env(pretrained, glue_bin, runs, KEEP_CHECKPOINTS="1", SENTENCES_PER_BATCH="8",
                                                      EXTRA_ARGS="--update-freq 2"))
    run_dir = runs / "STS-B" / "lr1e-3_seed1"
    result = json.loads((run_dir / "result.json").read_text())
    log = (run_dir / "train.log").read_text()
    assert result["metric"] == "pearson" and result["best_valid"] == best_in_log(log)
    assert -100 <= result["best_valid"]["valid"] <= 100
    cmd = (run_dir / "command.txt").read_text()
    for flag in ("--num-classes 1", "--regression-target", "--criterion glue_sentence_prediction",
                 "--best-checkpoint-metric pearson", "--keep-interval-updates 1", "--update-freq 2"):
        assert flag in cmd, flag
    assert "--no-save" not in cmd
    assert [int(u) for u in re.findall(r"valid on 'valid' subset .*num_updates (\d+)", log)] == [2, 3, 5, 6]
    assert os.listdir(run_dir / "checkpoints") == ["checkpoint_best.pt"]  # KEEP_CHECKPOINTS=1: the best only
    import torch

    state = torch.load(run_dir / "checkpoints" / "checkpoint_best.pt", weights_only=False)
    assert state["cfg"]["model"].classification_head_style == "release"  # the head style travels with it
    best_step = result["best_step"]  # the best checkpoint is the one of the best validation
    assert state["optimizer_history"][-1]["num_updates"] == best_step
    assert "STS-B: 1 class(es), metric pearson on valid" in p.stderr


def test_grid_runs_what_is_missing_and_prints_the_table(rte_run, pretrained, glue_bin, runs, starts_process):
    """2 LRs x 1 seed on RTE; lr 1e-3 is the run above (skipped), lr 5e-4 is new."""
    env = run_env(pretrained, glue_bin, runs, TASKS="RTE", LRS="1e-3 5e-4", SEEDS="1", JOBS="1")
    p = sh([GRID], **env)
    assert "grid.sh: 2 runs (1 task(s) x 2 LR(s) x 1 seed(s)), 1 done, 1 to run, 1 at a time" in p.stderr  # progress
    assert re.search(r"grid.sh: RTE lr5e-4_seed1: finished in \d+ s; 1 of 1 ended", p.stderr)
    scores = {lr: json.loads((runs / "RTE" / f"lr{lr}_seed1" / "result.json").read_text())["best_valid"]["valid"]
              for lr in ("1e-3", "5e-4")}
    row = re.search(r"^\| RTE \| accuracy \| (.*)$", p.stdout, re.M)
    assert row, p.stdout
    assert f"{scores['5e-4']:.2f} (1) | {scores['1e-3']:.2f} (1)" in row.group(1)  # per LR, 1 seed each
    assert re.search(rf"^\| tupe_r_tiny \|.* {max(scores.values()):.2f} \|", p.stdout, re.M)  # best LR
    assert (runs / "glue_results.csv").exists()
    # SLURM: nothing left for this grid; with a second seed, the indices of the new runs
    done = sh([GRID, "--slurm"], **env).stdout
    assert "all 2 runs are done" in done and f"-m tupe_glue.collect {runs} --expected-lrs 1e-3,5e-4 --expected-seeds 1" \
        in done  # the grid's LRs: collect's defaults are the paper's, which would count none of these runs
    out = sh([GRID, "--slurm"], **dict(env, SEEDS="1 2")).stdout
    assert "2 of 4 runs to do" in out and "sbatch --array=1,3 glue/grid.sbatch" in out
    # an array task of a finished run: maps its index to (task, lr, seed) and skips
    q = sh(["bash", GRID_SBATCH], **dict(env, SLURM_ARRAY_TASK_ID="1"))
    assert "array task 1 = RTE lr 5e-4 seed 1" in q.stderr and "already done" in q.stderr


def test_custom_single_sentence_task_is_binarized_finetuned_and_scored(pretrained, glue_bin, runs, spm_dir, tmp_path, starts_process):
    """A folder with SST-2's layout (here: SST-2's fixture rows labelled neg/pos) runs like SST-2."""
    tasks = tmp_path / "tasks" / "Reviews"
    tasks.mkdir(parents=True)
    for fname in ("train.tsv", "dev.tsv"):
        rows = [r.split("\t") for r in (FIXTURES / "SST-2" / fname).read_text().splitlines()[1:]]
        (tasks / fname).write_text("sentence\tlabel\n" + "".join(f"{t}\t{('neg', 'pos')[int(y)]}\n" for t, y in rows))
    sh(["python", "-m", "tupe_preprocess.glue_binarize", "--glue-dir", tasks.parent, "--tasks", "ALL",
        "--spm-model", spm_dir / "spm.model", "--dict", spm_dir / "dict.txt", "--out-dir", glue_bin])
    assert sh(["python", "-m", "tupe_glue.grid", "tasks", "--glue-bin", glue_bin]).stdout.split() == list(PAPER_TASKS) + [
        "Reviews"]  # TASKS=auto: the paper's 8 and the custom task
    p = sh([FINETUNE, "Reviews", "1e-3", "1"], **run_env(pretrained, glue_bin, runs, EPOCHS="1"))
    assert "Reviews: 2 class(es), metric accuracy on valid, 1 epochs" in p.stderr
    result = json.loads((runs / "Reviews" / "lr1e-3_seed1" / "result.json").read_text())
    assert result["metric"] == "accuracy" and set(result["best_valid"]) == {"valid"}
    q = sh(["python", "-m", "tupe_glue.collect", runs, "--expected-lrs", "1e-3", "--seeds", "1"])
    row = re.search(r"^\| Reviews \| accuracy \| (.*)$", q.stdout, re.M)
    assert row and f"| {result['best_valid']['valid']:.2f} (1) |" in row.group(0), q.stdout


def test_unreadable_result_is_moved_aside_and_the_run_redone(tmp_path, glue_bin, starts_process):
    run = tmp_path / "RTE" / "lr2e-5_seed1"
    run.mkdir(parents=True)
    (run / "result.json").write_text("")  # e.g. a full disk
    from tupe_glue.grid import Job

    assert not Job(0, "RTE", "2e-5", "1").done(str(tmp_path))
    p = sh([FINETUNE, "RTE", "2e-5", "1"], check=False, CHECKPOINT=str(tmp_path / "none.pt"), GLUE_BIN=str(glue_bin),
           RUNS=str(tmp_path))
    assert "unreadable result" in p.stderr and "not valid JSON" in p.stderr
    assert "none.pt: no such file" in p.stderr  # it went on to redo the run (and stopped at the checkpoint)
    aside = list((tmp_path / ".unreadable" / "RTE").iterdir())
    assert len(aside) == 1 and aside[0].name.startswith("lr2e-5_seed1.") and not run.exists()


def test_two_processes_validate_twice_per_epoch(rte_run, tmp_path, starts_process):
    """RTE's command on 2 CPU processes (torchrun + gloo), batch 8: 6 batches = 3 per process = 3 updates
    per epoch; both processes validate together after update 2 of each epoch and at its end; the
    accuracy is over the whole dev set (16 pairs, 8 on each process: a multiple of 100/16)."""
    import shlex

    run_dir, _ = rte_run
    argv = shlex.split((run_dir / "command.txt").read_text())
    args = argv[argv.index("--validations-per-epoch") + 2:]
    args[args.index("--batch-size") + 1] = "8"
    train = tmp_path / "train.sh"  # fairseq_rank.sh runs FAIRSEQ_TRAIN with the rank flags appended
    train.write_text(f'#!/bin/sh\nexec "{BIN}/python" -m tupe_glue.fairseq_train --validations-per-epoch 2 "$@"\n')
    train.chmod(0o755)
    p = sh([BIN / "torchrun", "--standalone", "--nproc-per-node", "2", "--no-python",
            ROOT / "train_scripts" / "fairseq_rank.sh", "2", "cpu", *args,
            "--distributed-world-size", "2", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"],
           FAIRSEQ_TRAIN=str(train))
    log = p.stdout + p.stderr
    assert "warmup_ratio schedule: 3 updates/epoch x 2 epochs -> 6 updates" in log
    steps = [int(u) for u in re.findall(r"valid on 'valid' subset .*num_updates (\d+)", log)]
    assert steps == [2, 3, 5, 6], log[-3000:]  # logged once (rank 0) per validation
    accuracies = [float(a) for a in re.findall(r"valid on 'valid' subset .*? accuracy ([0-9.]+)", log)]
    assert len(accuracies) == 4 and all(abs(a * 16 / 100 - round(a * 16 / 100)) < 1e-3 for a in accuracies)


def test_a_full_disk_while_a_run_saves_its_checkpoint_fails_it_alone_and_the_rerun_matches(rte_run, pretrained,
                                                                                          glue_bin, tmp_path,
                                                                                          starts_process):
    """The disk fills while fairseq-train saves a fine-tuning run's checkpoint (KEEP_CHECKPOINTS=1; ENOSPC injected
    where the OS raises it, as in tests/test_full_disk_pretrain.py): the run (the grid's finetune.sh) ends with one
    line naming the file, exit 1, the half-written file removed and nothing finished-looking; the grid says which
    run failed, exit 1, and a finished run of the grid is kept. Then the disk fills while finetune.sh writes the
    run's log: stopped, one line naming the log, exit 1. The same command with room again trains the run as an
    uninterrupted one (rte_run), loss for loss."""
    import shutil

    from process_tree import assert_none_left, marked
    from test_full_disk_pretrain import SITECUSTOMIZE

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    runs = tmp_path / "runs"
    kept = runs / "RTE" / "lr5e-4_seed1"  # a finished run of the grid: rte_run's, as if its LR were 5e-4
    shutil.copytree(rte_run[0], kept)
    result = json.loads((kept / "result.json").read_text())
    result["lr"], result["inputs"]["lr"] = 5e-4, "5e-4"
    (kept / "result.json").write_text(json.dumps(result))
    before = {f.name: f.read_bytes() for f in kept.iterdir()}
    settings = run_env(pretrained, glue_bin, runs, TASKS="RTE", LRS="1e-3 5e-4", SEEDS="1", JOBS="1",
                       KEEP_CHECKPOINTS="1")
    mark = marked({})
    full = sh([GRID], check=False, FULL_SAVE="checkpoint_best.pt.tmp",
              PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]), **settings, **mark)
    assert_none_left(mark)  # grid.sh's finetune.sh and its fairseq-train ended with it
    partial = runs / ".partial" / "RTE" / "lr1e-3_seed1"
    written = partial / "checkpoints" / "checkpoint_best.pt"
    run_out = (runs / ".grid_logs" / "RTE" / "lr1e-3_seed1.out").read_text()
    assert run_out.rstrip().splitlines()[-1] == (  # the run's line names the file, not only "fairseq-train failed"
        f"finetune.sh: error: RTE lr1e-3_seed1: fairseq-train failed (exit 1): {written}: no space left on its disk "
        "while writing it (the half-written file is removed); free space there, or write to a folder on another "
        f"disk; log {partial / 'train.log'}"), run_out[-3000:]
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert "grid.sh: error: RTE lr1e-3_seed1 failed (exit 1): see " in full.stderr
    assert "| RTE |" in full.stdout + full.stderr  # the table of the finished runs, then the last line:
    assert full.stderr.rstrip().splitlines()[-1] == ("grid.sh: error: 1 of 1 run(s) failed: RTE lr1e-3_seed1; rerun "
                                                     "the same command to resume (finished runs are skipped)")
    assert not list(runs.rglob("*.tmp")) and not list(runs.rglob("*.lock"))  # the half-written file; no lock left
    assert (partial / "checkpoints" / "checkpoint_1_2.pt").is_file()  # the checkpoint saved before: kept
    assert not (runs / "RTE" / "lr1e-3_seed1").exists()  # nothing finished-looking
    assert {f.name: f.read_bytes() for f in kept.iterdir()} == before  # the grid's finished run: kept
    # then the disk fills while finetune.sh writes the run's log (all a run with KEEP_CHECKPOINTS=0 writes while it
    # trains), at its first update's line: the run is stopped, one line, exit 1, no process left, nothing
    # finished-looking
    mark = marked({})
    full = sh([FINETUNE, "RTE", "1e-3", "1"], check=False, FULL_LOG="lr1e-3_seed1/train.log", FULL_LOG_AT="train_inner",
              PYTHONPATH=os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]), **settings, **mark)
    assert_none_left(mark)
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert full.stderr.rstrip().splitlines()[-1] == (
        f"finetune.sh: error: {partial / 'train.log'}: no space left on its disk while writing the run's log; the run "
        "was stopped and the log keeps what was written; free space there and rerun the same command to resume")
    unwritten = (partial / "train.log").read_text()
    assert "begin training epoch 1" in unwritten and "train_inner" not in unwritten  # stopped while it trained
    assert not (runs / "RTE" / "lr1e-3_seed1").exists() and not list(runs.rglob("*.lock"))
    sh([FINETUNE, "RTE", "1e-3", "1"], **settings)  # room again: the run redone (the grid's rerun: its SIGTERM test)
    done = (runs / "RTE" / "lr1e-3_seed1" / "train.log").read_text()
    assert train_losses(done) == train_losses((rte_run[0] / "train.log").read_text()) != []
    assert json.loads((runs / "RTE" / "lr1e-3_seed1" / "result.json").read_text())["best_valid"] == \
        json.loads((rte_run[0] / "result.json").read_text())["best_valid"]


def test_a_full_disk_while_a_run_writes_its_result_is_one_line_and_the_rerun_writes_it_whole(
        rte_run, pretrained, glue_bin, tmp_path, monkeypatch, capsys, starts_process):
    """The disk fills while finetune.sh writes result.json, after its training: one line naming the file, exit 1,
    the half-written file removed, no finished-looking run and no lock left; the rerun writes the uninterrupted
    run's result (rte_run's). fairseq-train is replayed from rte_run's log: this test is about the run's own files,
    in this process (the training's full disk: the test above)."""
    import errno
    import shutil

    from tupe_glue import finetune

    def replay(cmd, log, env, echo=True):
        shutil.copyfile(rte_run[0] / "train.log", log)
        return 0

    dump = json.dump

    def full(obj, f, *args, **kwargs):  # ENOSPC after part of the file was written, as the OS raises it
        if str(getattr(f, "name", "")).endswith("result.json.partial"):
            f.write('{"task": ')
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return dump(obj, f, *args, **kwargs)

    monkeypatch.setattr(finetune, "run_logged", replay)
    monkeypatch.setattr(json, "dump", full)
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', '')}")
    env = dict(run_env(pretrained, glue_bin, tmp_path), PATH=os.environ["PATH"])
    partial = tmp_path / ".partial" / "RTE" / "lr1e-3_seed1"
    assert finetune.main(["RTE", "1e-3", "1"], environ=env) == 1
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == (
        f"finetune.sh: error: {partial / 'result.json'}: no space left on its disk while writing it (the half-written "
        "file is removed); free space there, or write to a folder on another disk"), err[-2000:]
    assert "Traceback" not in err
    assert sorted(os.listdir(partial)) == ["command.txt", "train.log"]  # result.json.partial removed
    assert not (tmp_path / "RTE" / "lr1e-3_seed1").exists() and not list(tmp_path.rglob("*.lock"))
    monkeypatch.setattr(json, "dump", dump)  # room again
    assert finetune.main(["RTE", "1e-3", "1"], environ=env) == 0
    assert json.loads((tmp_path / "RTE" / "lr1e-3_seed1" / "result.json").read_text()) == \
        json.loads((rte_run[0] / "result.json").read_text())


def test_the_slurm_line_carries_every_setting_an_array_job_needs(tmp_path, capsys):
    """An array job reads the environment of its submission, so the printed sbatch line sets every fine-tuning
    setting that is not its default (given to grid.sh alone it would be lost, and the runs made with the
    defaults), each quoted for the shell; the collect line names the grid."""
    import shlex

    checkpoint = tmp_path / "my ckpt" / "model.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"x")
    (tmp_path / "bin" / "RTE-bin").mkdir(parents=True)
    env = dict(CHECKPOINT=str(checkpoint), GLUE_BIN=str(tmp_path / "bin"), RUNS=str(tmp_path / "runs"), TASKS="RTE",
               LRS="1e-3 5e-4", SEEDS="1 2", EPOCHS="3", METRIC_AVERAGING="per_batch", EXTRA_ARGS="--max-update 50")
    assert main_sh(["--slurm"], env) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if " sbatch " in x)
    words = shlex.split(line)
    prefix = dict(w.split("=", 1) for w in words[:words.index("sbatch")])
    assert prefix == {"CHECKPOINT": str(checkpoint), "GLUE_BIN": str(tmp_path / "bin"), "RUNS": str(tmp_path / "runs"),
                      "TASKS": "RTE", "LRS": "1e-3 5e-4", "SEEDS": "1 2", "EPOCHS": "3",
                      "METRIC_AVERAGING": "per_batch", "EXTRA_ARGS": "--max-update 50"}  # no default repeated
    assert words[words.index("sbatch") + 1:] == ["--array=0-3", "glue/grid.sbatch"]
    assert f"-m tupe_glue.collect {tmp_path / 'runs'} --expected-lrs 1e-3,5e-4 --expected-seeds 1,2" in out


def test_an_array_task_the_grid_refuses_runs_nothing(tmp_path, starts_process):
    """grid.sbatch stops at the grid's refusal of its index (an index past the grid): no fine-tuning run starts
    with empty arguments after it."""
    (tmp_path / "bin" / "RTE-bin").mkdir(parents=True)
    p = sh(["bash", GRID_SBATCH], check=False, SLURM_ARRAY_TASK_ID="7", TASKS="RTE", LRS="1e-3", SEEDS="1",
           GLUE_BIN=str(tmp_path / "bin"))
    assert p.returncode == 2 and "job needs an index in 0..0" in p.stderr
    assert "array task" not in p.stderr and "finetune" not in p.stderr.split("job needs")[1]
