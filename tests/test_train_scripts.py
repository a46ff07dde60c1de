"""train_scripts/: the real pretrain.sh and pretrain.sbatch on tiny data, on CPU (gloo).

Multi-process runs go through the same path as on GPUs (torchrun or srun -> python -m tupe_pretrain.rank ->
fairseq-train with explicit rank and env:// rendezvous); srun and scontrol are small stand-ins written
below, so the SLURM script runs without SLURM.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import sys
from typing import Dict, List

import pytest
import torch

from conftest import BIN, ROOT, call_in_process, train_losses

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process

SCRIPTS = ROOT / "train_scripts"
PRETRAIN = SCRIPTS / "pretrain.sh"
# tiny TUPE-R, 64 tokens; 16 sentences per update (2 processes x 8, or 1 process x 8 x update-freq 2)
TINY = {"SIZE": "tiny", "TOKENS_PER_SAMPLE": "64", "GPUS": "0", "MAX_SENTENCES": "8", "SENTENCES_PER_UPDATE": "16",
        "WARMUP": "5", "LR": "2e-3", "LOG_INTERVAL": "1", "NUM_WORKERS": "0", "SEED": "1"}
LAUNCHER_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER", "NNODES",
                 "NPROC_PER_NODE", "VENV", "DRY_RUN", "EXTRA_ARGS", "SAVE_DIR", "DATA")


def script_env(**overrides: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.update(overrides)
    return env


def sh(cmd: List[str], check: bool = True, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=script_env(**env), capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


def dry_run(check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """``DRY_RUN=1 pretrain.sh`` in this process: the function the shell file runs (tupe_pretrain/pretrain.py
    ``main``, given the environment ``sh`` gives the script) with its output captured; the status and output of a
    finished process, without a process start (about 4 s of CPU). The shell file itself runs in
    test_help_lists_every_variable and in every test that trains."""
    from tupe_pretrain import pretrain

    return call_in_process(lambda: pretrain.main([], environ=script_env(**env, DRY_RUN="1")),
                           ["DRY_RUN=1", "pretrain.sh", *(f"{k}={v}" for k, v in env.items())], check)


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


# ---- help, dry runs, errors (no training) ------------------------------------------------------------


def test_help_lists_every_variable():
    out = sh([PRETRAIN, "--help"]).stdout
    for var in ("VARIANT", "SIZE", "DATA", "SAVE_DIR", "GPUS", "MAX_SENTENCES", "UPDATE_FREQ", "TOKENS_PER_SAMPLE",
                "TOTAL_UPDATES", "WARMUP", "LR", "EXTRA_ARGS", "TENSORBOARD_DIR", "SENTENCES_PER_UPDATE"):
        assert re.search(rf"^  {var} ", out, re.M), var
    assert "torchrun" in out and "pretrain.sbatch" in out
    assert "srun" in sh(["bash", SCRIPTS / "pretrain.sbatch", "--help"]).stdout
    assert "Usage" in sh([SCRIPTS / "fairseq_rank.sh", "--help"]).stdout


def test_gpus_on_a_machine_without_them_is_one_line_and_nothing_written(lm_bin, tmp_path, starts_process):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    save = tmp_path / "ckpt"
    p = sh([PRETRAIN], check=False, DATA=str(lm_bin), GPUS="2", SAVE_DIR=str(save))
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == (
        "pretrain.sh: error: GPUS=2 but this machine sees 0 CUDA device(s): set GPUS=auto, or run on a node with the "
        "GPUs (DRY_RUN=1 prints the command without this check)")
    assert "Traceback" not in p.stderr and not save.exists()


def test_dry_run_prints_settings_batch_and_the_paper_command(lm_bin, tmp_path):
    save = tmp_path / "ckpt"
    p = dry_run(DATA=str(lm_bin), GPUS="0", NPROC_PER_NODE="2", SAVE_DIR=str(save))
    err = p.stderr
    assert re.search(r"^  VARIANT=tupe-r +\[auto\]$", err, re.M)  # each variable with its default
    assert re.search(r"^  UPDATE_FREQ=8 +\[auto\]$", err, re.M)
    assert "effective batch size: 256 = 2 process(es) x MAX_SENTENCES 16 x UPDATE_FREQ 8" in err
    cmd = err.split("pretrain.sh: command:\n")[1].splitlines()[0]
    assert cmd.startswith(f"{BIN}/torchrun --standalone --nproc-per-node 2 --no-python ")
    assert f"--no-python {sys.executable} -m tupe_pretrain.rank 2 cpu {lm_bin} " in cmd
    for flag in ("--arch tupe_r_base", "--tokens-per-sample 512", "--max-positions 512", "--mask-prob 0.15",
                 "--batch-size 16 --update-freq 8", "--lr 1e-4", "--warmup-updates 10000",
                 "--total-num-update 1000000 --max-update 1000000", "--lr-scheduler polynomial_decay --power 1",
                 "--end-learning-rate 0", "--adam-betas '(0.9,0.999)' --adam-eps 1e-6", "--weight-decay 0.01",
                 "--clip-norm 1.0", "--dropout 0.1 --attention-dropout 0.1", f"--save-dir {save} ",
                 f"--tensorboard-logdir {save}/tensorboard", "--distributed-world-size 2",
                 "--ddp-backend legacy_ddp --distributed-backend gloo", "--cpu"):
        assert flag in cmd, flag
    assert "--fp16" not in cmd and not save.exists()  # a dry run creates nothing
    assert "--data-buffer-size 0" in cmd  # no prefetch thread alive at exit (status 134 otherwise)

    gpu = dry_run(DATA=str(lm_bin), GPUS="8", VARIANT="bert-a").stderr
    assert "effective batch size: 256 = 8 process(es) x MAX_SENTENCES 16 x UPDATE_FREQ 2" in gpu
    gpu_cmd = gpu.split("pretrain.sh: command:\n")[1]
    for flag in ("-m tupe_pretrain.rank 8 gpu", "--arch bert_a_base", "--fp16", "--distributed-backend nccl",
                 "--ddp-backend pytorch_ddp", f"--save-dir {ROOT}/checkpoints/bert_a_base"):
        assert flag in gpu_cmd, flag
    assert "--cpu" not in gpu_cmd

    # DATA may be a folder with data_path.txt (python -m tupe_preprocess.c4 layout writes one)
    layout = tmp_path / "data-bin"
    layout.mkdir()
    (layout / "data_path.txt").write_text(f"{lm_bin}:{lm_bin}\n")
    c4 = dry_run(DATA=str(layout), GPUS="0").stderr
    assert f"fairseq-train {lm_bin}:{lm_bin} --user-dir" in c4


def test_a_variant_in_the_registrys_spelling_is_read_with_dashes(lm_bin):
    """VARIANT=learned_gaussian (the registry's, the arch's spelling) is learned-gaussian, as every interface writes it."""
    err = dry_run(DATA=str(lm_bin), GPUS="0", VARIANT="learned_gaussian", SIZE="tiny").stderr
    assert re.search(r"^  VARIANT=learned-gaussian +\[auto\]$", err, re.M)
    assert "--arch learned_gaussian_tiny " in err.split("pretrain.sh: command:\n")[1]


def test_an_arch_alone_sets_the_variant_said_and_recorded(lm_bin):
    err = dry_run(DATA=str(lm_bin), GPUS="0", ARCH="bert_a_tiny").stderr
    assert re.search(r"^  VARIANT=bert-a +\[auto\]$", err, re.M) and "--arch bert_a_tiny " in err


def test_an_arch_typo_is_one_line_before_anything_is_written(lm_bin, tmp_path):
    """It failed inside fairseq 40 s in, after SAVE_DIR/settings.json was written. The function pretrain.sh runs
    (``python -m tupe_pretrain.pretrain``, what its last line execs) in a process forked from the tests' warm
    interpreter (conftest.run): the fresh one spent ~5 s importing torch and fairseq for this one line; the shell
    file itself runs in every test that trains."""
    import sys

    from conftest import run

    save = tmp_path / "ckpt"
    p = run([sys.executable, "-m", "tupe_pretrain.pretrain"], cwd=ROOT, check=False, timeout=300,
            env=script_env(DATA=str(lm_bin), GPUS="0", ARCH="tupe_r_tyni", SAVE_DIR=str(save)))
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith(
        "pretrain.sh: error: ARCH=tupe_r_tyni is not a registered architecture (the closest: tupe_r_tiny"), p.stderr
    assert "Traceback" not in p.stderr and not save.exists()


def test_the_old_name_batch_size_still_sets_the_batch_with_a_warning(lm_bin):
    err = dry_run(DATA=str(lm_bin), GPUS="0", BATCH_SIZE="32").stderr
    assert "warning: BATCH_SIZE is a deprecated name of SENTENCES_PER_UPDATE: set SENTENCES_PER_UPDATE=32" in err
    assert "effective batch size: 32 = 1 process(es) x MAX_SENTENCES 16 x UPDATE_FREQ 2" in err


@pytest.mark.parametrize("env, message", [
    ({"NPROC_PER_NODE": "3"}, "SENTENCES_PER_UPDATE=256 is not divisible by 3 process(es) x MAX_SENTENCES=16 = 48"),
    ({"SIZE": "huge"}, "SIZE must be base, large or tiny, not 'huge'"),
    ({"VARIANT": "xl"}, "VARIANT must be one of"),
    # every number and choice by its kind, before the run's record is written (fairseq refused them after it)
    ({"DROPOUT": "abc"}, "DROPOUT must be a fraction in [0, 1), not 'abc'"),
    ({"MASK_PROB": "1.5"}, "MASK_PROB must be a fraction in [0, 1), not '1.5'"),
    ({"SAMPLE_BREAK_MODE": "docs"}, "SAMPLE_BREAK_MODE must be one of none, complete, complete_doc, eos, not 'docs'"),
    ({"LR": "0"}, "LR must be auto or a number > 0, not '0'"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "started under a launcher with WORLD_SIZE=2, but"),
    ({"ARCH": "tupe_r_tiny", "VARIANT": "bert-a"}, "ARCH=tupe_r_tiny is of variant tupe-r, not VARIANT=bert-a"),
    ({"ARCH": "bert_a_large", "SIZE": "base"}, "ARCH=bert_a_large is of size large, not SIZE=base"),
    ({"ARCH": "bert_a_tyni"}, "ARCH=bert_a_tyni is not a registered architecture (the closest: bert_a_tiny"),
    ({"END_LR": "1"}, "END_LR=1 is above LR=1e-4"),
])
def test_bad_settings_are_refused(lm_bin, env, message):
    p = dry_run(check=False, **{"DATA": str(lm_bin), "GPUS": "0", **env})
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_world_size_mismatch_with_the_launcher_is_refused(lm_bin, tmp_path):
    """torchrun around the script: 2 processes, but the script builds a 1-process command -> every rank
    refuses instead of training 2 independent copies into one save dir."""
    p = sh(["torchrun", "--standalone", "--nproc-per-node", "2", "--no-python", PRETRAIN], check=False,
           DATA=str(lm_bin), GPUS="0", SAVE_DIR=str(tmp_path / "ckpt"))
    assert p.returncode != 0
    # every rank refuses; torchrun stops the other rank once one has failed, so it may not have said so yet
    assert p.stderr.count("started under a launcher with WORLD_SIZE=2, but NNODES x NPROC_PER_NODE = 1 x 1 = 1") >= 1
    assert not (tmp_path / "ckpt").exists()
    # the per-rank wrapper checks the launcher's world size against the one the command was built for
    q = sh([SCRIPTS / "fairseq_rank.sh", "2", "cpu", str(lm_bin)], check=False, WORLD_SIZE="3", RANK="0",
           LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    assert q.returncode == 2
    assert "torchrun started 3 processes but the command was built for world size 2" in q.stderr


# ---- real training -----------------------------------------------------------------------------------


def test_two_processes_match_one_process_with_update_freq_2(lm_bin, tmp_path):
    """2 ranks x 8 sentences (all-reduce over gloo) vs 1 rank x 8 sentences x update-freq 2: the same 16
    sentences per update (rank r takes batches r, r+2, ...; update-freq takes them in pairs), the same
    masks (seeded per sample) and, with dropout off, the same gradients up to float summation order.
    Tolerance 2e-3 on the logged losses: they are printed with 3 decimals (rounding alone gives up to
    1e-3), and the order of float sums differs (all-reduce vs accumulation). With dropout 0.1 the second
    micro-batch of update-freq draws other dropout masks than rank 1 (both ranks start from the per-update
    seed), so the curves differ by about 1e-2; that is why dropout is off here."""
    common = dict(TINY, DATA=str(lm_bin), TOTAL_UPDATES="20", DROPOUT="0", ATTENTION_DROPOUT="0")
    two = sh([PRETRAIN], NPROC_PER_NODE="2", SAVE_DIR=str(tmp_path / "two"), **common)
    one = sh([PRETRAIN], SAVE_DIR=str(tmp_path / "one"), **common)
    assert "world size 2 = 1 node(s) x 2 process(es) on cpu, launcher torchrun" in two.stderr
    assert "effective batch size: 16 = 2 process(es) x MAX_SENTENCES 8 x UPDATE_FREQ 1" in two.stderr
    assert "effective batch size: 16 = 1 process(es) x MAX_SENTENCES 8 x UPDATE_FREQ 2" in one.stderr
    log2, log1 = two.stdout + two.stderr, one.stdout + one.stderr
    assert "distributed init (rank 0): env://" in log2 and "bsz=16" in log2
    # 20 updates of 16 of the 600 lines stop in the middle of epoch 1, and the 2 ranks still exit 0 without an abort
    # at exit (tupe_plugin/clean_exit.py; tests/test_clean_exit.py)
    assert "done training" in log2 and "epoch 001 | loss" in log2 and "| num_updates 20 |" in log2, log2[-3000:]
    assert "terminate called" not in log2 and "aborted at exit" not in log2, log2[-3000:]
    losses2, losses1 = train_losses(log2), train_losses(log1)
    assert len(losses2) == len(losses1) == 20
    diff = max(abs(a - b) for a, b in zip(losses1, losses2))
    assert diff <= 2e-3, (diff, losses1, losses2)
    assert losses2[-1] < losses2[0] - 0.3
    assert (tmp_path / "two" / "checkpoint_last.pt").exists()
    assert any((tmp_path / "two" / "tensorboard" / "train_inner").iterdir())  # TensorBoard on by default


FAKE_SRUN = r"""#!/usr/bin/env bash
# Stand-in for SLURM's srun: --ntasks copies of the command with SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS.
ntasks=1 per_node=1
while [[ "${1:-}" == -* ]]; do
  case "$1" in
    --ntasks) ntasks=$2; shift 2 ;;
    --ntasks-per-node) per_node=$2; shift 2 ;;
    --nodes|--cpus-per-task) shift 2 ;;
    *) shift ;;
  esac
done
echo "srun ntasks=$ntasks per_node=$per_node" >> "$FAKE_SLURM_LOG"
pids=()
for ((i = 0; i < ntasks; i++)); do
  SLURM_PROCID=$i SLURM_LOCALID=$(( i % per_node )) SLURM_NTASKS=$ntasks "$@" &
  pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
"""
FAKE_SCONTROL = r"""#!/usr/bin/env bash
echo "scontrol $*" >> "$FAKE_SLURM_LOG"
[[ "$1 $2" == "show hostnames" ]] && echo localhost
exit 0
"""


@pytest.fixture(scope="module")
def killed_run(lm_bin, tmp_path_factory):
    """pretrain.sbatch (2 tasks via the srun stand-in) stopped by SLURM's time-limit signal (USR1) after a
    few checkpoints, then submitted again: returns (save dir, first log, second log, fake SLURM log)."""
    d = tmp_path_factory.mktemp("sbatch")
    fake_bin = d / "bin"
    fake_bin.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake_bin / name).write_text(text)
        (fake_bin / name).chmod(0o755)
    save, slurm_log = d / "ckpt", d / "slurm.log"
    env = script_env(**TINY, DATA=str(lm_bin), SAVE_DIR=str(save), TOTAL_UPDATES="1000",
                     SAVE_INTERVAL_UPDATES="5", SLURM_JOB_ID="4242", SLURM_NNODES="1", SLURM_NTASKS_PER_NODE="2",
                     SLURM_JOB_NODELIST="localhost", MASTER_PORT=free_port(), FAKE_SLURM_LOG=str(slurm_log))
    env["PATH"] = f"{fake_bin}:{env['PATH']}"
    first = d / "first.log"
    with open(first, "w") as out:
        job = subprocess.Popen(["bash", str(SCRIPTS / "pretrain.sbatch")], cwd=ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not re.search(r"Saved checkpoint \S+ \(epoch \d+ @ (1\d|[2-9]\d) updates", first.read_text()):
            assert job.poll() is None, first.read_text()[-4000:]
            assert time.time() < deadline, first.read_text()[-4000:]
            time.sleep(0.2)
        # what SLURM sends before the time limit: the signal the script asks for (#SBATCH --signal=B:NAME@SECONDS;
        # B: to the batch shell, whose trap this is)
        asked = re.search(r"^#SBATCH --signal=B:([A-Z0-9]+)@\d+$", (ROOT / "train_scripts" / "pretrain.sbatch").read_text(),
                          re.M)
        assert asked, "pretrain.sbatch asks SLURM for no signal to its batch shell"
        job.send_signal(getattr(signal, "SIG" + asked.group(1)))
        assert job.wait(timeout=60) == 0, first.read_text()[-4000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    env["MASTER_PORT"] = free_port()
    return save, env, first.read_text(), slurm_log


def test_killed_sbatch_run_resumes_where_it_stopped(killed_run):
    save, env, first_log, slurm_log = killed_run
    assert "srun ntasks=2 per_node=2" in slurm_log.read_text()
    assert "scontrol requeue 4242" in slurm_log.read_text()  # the job requeues itself before the time limit
    assert "rendezvous localhost:" in first_log  # master address from the allocation (scontrol show hostnames)
    assert "distributed init (rank 0): env://" in first_log
    assert not re.search(r"done training", first_log)
    # resubmission: the same job again, told to stop 4 updates after the checkpoint it resumes from
    at = sh(["python", SCRIPTS / "check_resume.py", save]).stderr
    m = re.search(r"resuming from \S+checkpoint_last.pt @ (\d+) updates", at)
    assert m, at
    n = int(m.group(1))
    p = subprocess.run(["bash", str(SCRIPTS / "pretrain.sbatch")], cwd=ROOT, capture_output=True, text=True,
                       env=dict(env, EXTRA_ARGS=f"--max-update {n + 4}"), timeout=180)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    assert re.search(rf"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ {n} updates\)", log), log[-4000:]
    updates = [int(x) for x in re.findall(r"train_inner \|.*?num_updates=(\d+)", log)]
    assert updates == [n + 1, n + 2, n + 3, n + 4]
    lrs = [float(x) for x in re.findall(r"train_inner \|.*?lr=([0-9.e-]+)", log)]
    assert lrs[0] > 1.9e-3  # the schedule continues (decay from 2e-3 over 1000 updates), no new warmup
    # same data position, same parameters, same per-update seed: the same loss as before the stop
    before = {int(u): float(loss) for loss, u in re.findall(r"train_inner \|.*?loss=([0-9.]+).*?num_updates=(\d+)",
                                                      first_log)}
    after = {u: loss for u, loss in zip(updates, train_losses(log))}
    if n + 1 in before:  # logged by the first job unless it stopped right after saving
        assert abs(before[n + 1] - after[n + 1]) <= 1e-3, (before[n + 1], after[n + 1])


def test_damaged_last_checkpoint_is_replaced_by_the_newest_intact_one(killed_run, tmp_path):
    save, _, _, _ = killed_run
    d = tmp_path / "ckpt"
    shutil.copytree(save, d, ignore=shutil.ignore_patterns("tensorboard"))
    interval = sorted(d.glob("checkpoint_*_*.pt"), key=lambda p: int(p.stem.split("_")[-1]))
    assert interval, sorted(os.listdir(d))
    last = d / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # killed while fairseq copied it
    p = sh(["python", SCRIPTS / "check_resume.py", d])
    newest = int(interval[-1].stem.split("_")[-1])
    assert f"resuming from a copy of {interval[-1]} @ {newest} updates" in p.stderr
    assert (d / "checkpoint_last.pt.damaged").exists()
    assert last.read_bytes() == interval[-1].read_bytes()
    last.unlink()  # checkpoints but no checkpoint_last.pt: refuse to start over them
    q = sh(["python", SCRIPTS / "check_resume.py", d], check=False)
    assert q.returncode == 2 and "refusing to start from scratch" in q.stderr


def test_missing_or_moved_data_is_named_before_training(lm_bin, tmp_path):
    p = dry_run(check=False, DATA="/nonexistent", GPUS="0")
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == \
        "c4_data: error: data folder /nonexistent does not exist"
    # data_path.txt entries are relative to its folder: a copied data-bin reads its own shards
    data_bin = tmp_path / "copy" / "data-bin"
    shutil.copytree(lm_bin, data_bin / "shard0")
    (data_bin / "data_path.txt").write_text("shard0\n")
    c4 = dry_run(DATA=str(data_bin), GPUS="0").stderr
    assert f"fairseq-train {data_bin}/shard0 --user-dir" in c4
    assert "train: 0 of 600 lines (0.00%) are longer than a block" in c4  # the over-length count, at start
    p = dry_run(check=False, DATA=str(data_bin), GPUS="0", TOKENS_PER_SAMPLE="16")
    assert p.returncode == 1 and "MAX_SKIP_FRACTION" in p.stderr.strip().splitlines()[-1]


def test_a_save_dir_belongs_to_its_settings_and_mid_epoch_stops_exit_cleanly(lm_bin, tmp_path):
    """A run that stops at --max-update in the middle of an epoch exits 0 (with --data-buffer-size > 0
    fairseq's prefetch thread can still be inside torch code at exit: abort, status 134; the repeated
    runs that make a rare abort visible are tests/test_clean_exit.py's). Then a rerun with another LR
    into the same SAVE_DIR is refused, naming it; ON_SETTINGS_CHANGE=continue accepts it."""
    common = dict(TINY, DATA=str(lm_bin), TENSORBOARD_DIR="none", SENTENCES_PER_UPDATE="8", MAX_SENTENCES="8",
                  NUM_WORKERS="1", TOTAL_UPDATES="2")
    save = str(tmp_path / "ck0")
    p = sh([PRETRAIN], check=False, SAVE_DIR=save, **common)  # 600 lines, 8 per update: 2 updates stop in epoch 1
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-3000:]
    # fairseq closes the epoch's stats when --max-update stops it: 2 of its ~75 updates ran
    assert "done training" in log and "epoch 001 |" in log and "| num_updates 2 |" in log
    p = sh([PRETRAIN], check=False, SAVE_DIR=save, **{**common, "LR": "1e-3"})
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and "LR: '2e-3' in the run, '1e-3' now" in last and "ON_SETTINGS_CHANGE=continue" in last
    p = sh([PRETRAIN], SAVE_DIR=save, ON_SETTINGS_CHANGE="continue", **{**common, "LR": "1e-3", "TOTAL_UPDATES": "3"})
    assert "continuing" in p.stderr and "TOTAL_UPDATES: '2' in the run, '3' now" in p.stderr
    # the same rerun again: the run is finished, so nothing is trained or rewritten
    before = (tmp_path / "ck0" / "checkpoint_last.pt").read_bytes()
    p = sh([PRETRAIN], SAVE_DIR=save, ON_SETTINGS_CHANGE="continue", **{**common, "LR": "1e-3", "TOTAL_UPDATES": "3"})
    assert "is at 3 of TOTAL_UPDATES=3 updates: the run is finished, nothing to do" in p.stderr
    assert "done training" not in p.stderr + p.stdout
    assert (tmp_path / "ck0" / "checkpoint_last.pt").read_bytes() == before


def test_data_loader_workers_of_past_epochs_do_not_pile_up(lm_bin, tmp_path):
    """NUM_WORKERS=1 on sharded data (a new dataset every epoch, as the C4 pipeline's data-bin): fairseq's persistent
    workers of each past epoch stayed alive (one more process per epoch: 5 at epoch 4) until the plugin collected
    the past epochs' data loaders at each epoch's start; now at most the train and the valid loader's workers (and
    one starting) run beside fairseq-train."""
    import psutil

    data = tmp_path / "data-bin"
    for shard in ("shard0", "shard1"):
        (data / shard).mkdir(parents=True)
        for f in lm_bin.iterdir():
            (data / shard / f.name).symlink_to(f)
    env = script_env(**dict(TINY, MAX_SENTENCES="64", SENTENCES_PER_UPDATE="64", NUM_WORKERS="1", TOTAL_UPDATES="100"),
                     DATA=f"{data / 'shard0'}:{data / 'shard1'}", SAVE_DIR=str(tmp_path / "ckpt"),
                     EXTRA_ARGS="--max-epoch 4 --no-save")
    p = subprocess.Popen([str(PRETRAIN)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    most = 0
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True)
    out: list = []
    reader.start()
    while p.poll() is None:
        try:
            most = max(most, len(psutil.Process(p.pid).children()))
        except psutil.Error:
            pass
        time.sleep(0.05)
    reader.join(10)
    log = "".join(out)
    assert p.returncode == 0, log[-3000:]
    assert re.search(r"epoch 004 \| loss", log), log[-3000:]
    assert 1 <= most <= 3, most
