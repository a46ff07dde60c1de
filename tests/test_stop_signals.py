"""Every stop is clean (issue 62): SIGTERM, SIGINT and SIGHUP on a command that runs processes
(``tupe_common.errors.exit_main`` with ``tupe_common.process``) stop its whole process tree, end with one line
saying what stopped it and how to resume, and exit 128 + the signal's number; the long entry points (finetune.sh,
study.sh --lanes, pretrain.sh) are walked through the same stop with real runs."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, run, train_losses
from process_tree import assert_gone, command_lines, start, tree, wait_for

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process

# A runner of two jobs (tupe_common.jobs.run_jobs), each a shell with a grandchild; the second job ignores SIGTERM,
# so only the grace period's SIGKILL ends it.
RUNNER = """
import sys
from tupe_common.errors import exit_main, RESUME_RUNS
from tupe_common.jobs import Job, run_jobs, stderr_say

def main():
    jobs = [Job("polite", ["bash", "-c", "sleep 300 & wait"], sys.argv[1] + "/polite.log"),
            Job("stubborn", ["bash", "-c", "trap '' TERM INT HUP; sleep 300 & sleep 300"], sys.argv[1] + "/stubborn.log")]
    run_jobs(jobs, 2, {"PATH": "/usr/bin:/bin"}, stderr_say("runner"))
    return 0

exit_main(main, "runner", RESUME_RUNS)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_ends_every_job_and_its_children_with_one_line(tmp_path, sig):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TUPE_STOP_GRACE_S="1")
    p = start([sys.executable, "-c", RUNNER, str(tmp_path)], env)
    wait_for(lambda: len([c for c in tree(p.pid) if c.name() == "sleep"]) == 3, 30, "the jobs did not start")
    procs = tree(p.pid)
    started = time.monotonic()
    p.send_signal(sig)  # the runner alone (kill PID): it passes the signal on
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - started < 10
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig, err
    assert err.splitlines()[-1] == (f"runner: error: stopped by {name}; rerun the same command to resume (finished "
                                    "runs are skipped)")
    assert "Traceback" not in err and "failed" not in err
    assert_gone(procs)


# The kernel gives a signal sent to a process to any thread that does not block it: here a thread of the command's
# own (as a lane's thread, or the run lock's heartbeat) takes it, while the main thread waits for a child or a job.
OTHER_THREAD = """
import os, signal, sys, threading, time
from tupe_common import process
from tupe_common.errors import exit_main, RESUME_RUNS
from tupe_common.jobs import Job, run_jobs, stderr_say

def children():
    found = []
    for task in os.listdir("/proc/self/task"):  # the main thread's child, or a job's (started by a lane's thread)
        try:
            found += open(f"/proc/self/task/{task}/children").read().split()
        except OSError:  # a thread that ended meanwhile
            pass
    return found

def deliver():
    while not children():  # the child or the job started (it was a fixed 1.5 s from here)
        time.sleep(0.02)
    time.sleep(0.5)  # and the main thread waits for it by then (it waits right after the start)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread only

def main():
    threading.Thread(target=deliver, daemon=True).start()
    if sys.argv[1] == "child":
        return process.run(["sleep", "300"])
    run_jobs([Job("one", ["sleep", "300"], None)], 1, {"PATH": "/usr/bin:/bin"}, stderr_say("runner"))
    return 0

exit_main(main, "runner", RESUME_RUNS)
"""


@pytest.mark.parametrize("waits_for", ["child", "jobs"])
def test_a_signal_another_thread_received_stops_the_wait_at_once(waits_for):
    """A wait with no timeout never runs Python code in the main thread, so a handler whose signal another thread
    took would run only when the child ended (300 s here): the main thread waits in steps (process.WAKE_S)."""
    p = start([sys.executable, "-c", OTHER_THREAD, waits_for], dict(os.environ, PYTHONPATH=str(ROOT)))
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert err.splitlines()[-1].startswith("runner: error: stopped by SIGTERM; rerun the same command"), err


# A process forked after the stop handlers were installed (a multiprocessing pool's worker) busy in C code that never
# looks at Python's signal flags: here a sum over 10**12 ones, as a worker blocked in the task queue's sem_wait is
# when the signal came just before the wait (the C4 binarizer's pool then hung in Pool.terminate()'s join).
FORKED_CHILD = """
import itertools, os, signal, sys, time
from tupe_common import process
process.install_stop_handlers()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, b"x")
    sum(itertools.repeat(1, 10 ** 12))
    os._exit(0)
os.read(r, 1)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print(os.WIFSIGNALED(status) and os.WTERMSIG(status))
"""


def test_a_forked_child_ends_on_the_signal_even_inside_c_code():
    """The stop signals have their default action back in a forked child: SIGTERM ends it at once, also while it
    runs C code (a Python handler would wait for that code to return: here hours)."""
    p = subprocess.run([sys.executable, "-c", FORKED_CHILD], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0 and p.stdout.strip() == str(int(signal.SIGTERM)), (p.stdout, p.stderr)


IN_FORK = """
import ctypes, multiprocessing, os, signal, threading, time
from tupe_common import process
process.install_stop_handlers()
threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
start = time.monotonic()
try:
    process.call_in_fork(ctypes.CDLL(None).sleep, 100)  # C code that would hold a handler up for 100 s
except process.Stopped as e:
    print(e.signum, round(time.monotonic() - start), len(multiprocessing.active_children()))
"""


def test_call_in_fork_returns_raises_and_a_stop_ends_it_at_once(starts_process):
    """tupe_common.process.call_in_fork (sentencepiece's trainer runs so, tupe_preprocess/c4_spm.py): the child's
    result, its exception raised here, and a SIGTERM while the child runs C code for 100 s: Stopped in about a
    second, the child killed (a Python handler in the process running that code waited for it: a stopped C4 run took
    36 s, on C4's sample minutes, past SLURM's KillWait)."""
    from tupe_common.process import call_in_fork

    assert call_in_fork(pow, 2, 10) == 1024
    with pytest.raises(ValueError, match="not a number"):
        call_in_fork(float, "not a number")
    p = subprocess.run([sys.executable, "-c", IN_FORK], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0 and p.stdout.split() == [str(int(signal.SIGTERM)), "1", "0"], (p.stdout, p.stderr)


def test_the_torchrun_that_pretrain_waits_for_ends_when_pretrain_is_killed():
    """pretrain.sh holds SAVE_DIR's lock while its torchrun runs: a kill -9 of pretrain.sh must not leave torchrun
    training on (tupe_pretrain/torchrun.py asks Linux for SIGTERM at its parent's death)."""
    child = ("from tupe_pretrain.torchrun import end_with_parent; end_with_parent(); import sys, time; "
             "print('ready', flush=True); time.sleep(120)")
    parent = start(["bash", "-c", f'TUPE_TORCHRUN_PARENT=$$ {sys.executable} -c "{child}" & wait'],
                   dict(os.environ, PYTHONPATH=str(ROOT)))
    assert parent.stdout.readline().strip() == "ready"
    (torchrun,) = tree(parent.pid)
    parent.kill()
    parent.wait(10)
    wait_for(lambda: not torchrun.is_running() or torchrun.status() == "zombie", 10, "the child outlived its parent")


def test_the_orphans_of_a_child_reaped_during_the_stop_are_ended_too():
    """A child that ends at the signal and is reaped (its lane's wait) before the stop ends the children: what it
    left behind (a background job that ignores SIGINT outlives its shell) was forgotten with it and kept running
    (one full-suite run's SIGINT case); the tree noted at the signal is ended still."""
    from tupe_common import process

    # SIGINT at its default in the shell: a test run started in the background (`make test &`, nohup) has it ignored,
    # which the shell would keep, and it then waited for its sleep's 300 s
    p = process.start(["bash", "-c", "sleep 300 & wait"], stdout=subprocess.DEVNULL,
                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: [c for c in tree(p.pid) if c.name() == "sleep"], 10, "the job did not start")
    orphan = tree(p.pid)
    process.signal_children(signal.SIGINT)  # the shell ends; its background sleep ignores SIGINT
    assert process.wait(p) == 128 + signal.SIGINT  # reaped and forgotten, as a lane's thread does
    assert any(c.is_running() for c in orphan)
    process.end_children(grace=0.2)
    assert_gone(orphan)


# ---- pre-training in one process: pretrain.sh execs fairseq-train, whose plugin stops it (tupe_plugin/graceful_stop.py)

BIN = Path(sys.executable).parent
TINY = {"SIZE": "tiny", "TOKENS_PER_SAMPLE": "64", "GPUS": "0", "MAX_SENTENCES": "8", "SENTENCES_PER_UPDATE": "8",
        "WARMUP": "5", "LR": "2e-3", "LOG_INTERVAL": "1", "NUM_WORKERS": "0", "SEED": "1", "TENSORBOARD_DIR": "none",
        "SAVE_INTERVAL_UPDATES": "1000", "TOTAL_UPDATES": "1000"}
LAUNCHER_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LAUNCHER", "NNODES",
                 "NPROC_PER_NODE", "VENV", "DRY_RUN", "EXTRA_ARGS", "SAVE_DIR", "DATA", "TUPE_DONE_FILE")


def script_env(**overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **overrides)
    return env


def logged_updates(text: str) -> list:
    return [int(u) for u in re.findall(r"train_inner \|.*?num_updates=(\d+)", text)]


def test_sigterm_saves_the_update_it_finished_and_the_rerun_resumes_from_it(lm_bin, tmp_path):
    """pretrain.sh (fairseq-train in one process) stopped by SIGTERM after its first updates: exit 143 within 20 s,
    checkpoint_last.pt at the update its last line names, and the same command resumes from it, logging the losses
    of an uninterrupted run.

    While it trains, SAVE_DIR's lock (one pre-training for both checks; it was test_run_lock's own run): the lock a
    run killed with SIGKILL left (a dead pid) is taken over with a line; the lock is the first's pid across its exec into
    fairseq-train, whose plugin keeps its heartbeat; a second pretrain.sh into the same SAVE_DIR exits 2 at once
    naming the first's pid and host, and writes nothing (one event file per TensorBoard folder); the lock is
    removed at the stopped run's end and at the rerun's normal end."""
    import torch

    from tupe_common import lock

    save = tmp_path / "ckpt"
    path = save / lock.LOCK_NAME
    env = script_env(**dict(TINY, TENSORBOARD_DIR="auto"), DATA=str(lm_bin), SAVE_DIR=str(save),
                     TUPE_RUN_LOCK_HEARTBEAT_S="0.2")  # TensorBoard on: the refused run must write no event file
    env.pop(lock.ENV, None)
    # a run killed with SIGKILL (no handler runs) once its lock is handed to fairseq-train's exec, before it trains
    # (the lock's own files written by then: no temporary one left): its lock stays
    killed = start([str(ROOT / "train_scripts" / "pretrain.sh")], env, cwd=ROOT)
    wait_for(lambda: killed.poll() is not None or (lock.read_record(str(path)) or {}).get("exec"), 60,
             "the first run handed no lock to fairseq-train")
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=30)
    assert (lock.read_record(str(path)) or {}).get("pid") == killed.pid
    p = start([str(ROOT / "train_scripts" / "pretrain.sh")], env, cwd=ROOT)
    out = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)  # fairseq logs on stdout
    reader.start()
    wait_for(lambda: len(logged_updates("".join(out))) >= 2 or p.poll() is not None, 120, "no update logged")
    assert p.poll() is None, p.stderr.read()[-3000:]
    record = lock.read_record(str(path)) or {}
    assert record.get("pid") == p.pid and record.get("host") == lock.host() and record.get("exec"), record
    # the second: what pretrain.sh execs (python -m tupe_pretrain.pretrain), a fresh interpreter that logs its
    # imports: refused before it imports torch (it imported torch, through tupe_core, before the lock: ~4 s of CPU)
    started = time.monotonic()
    second = subprocess.run([sys.executable, "-m", "tupe_pretrain.pretrain"], cwd=ROOT, timeout=120, text=True,
                            capture_output=True, env=dict(env, PYTHONPROFILEIMPORTTIME="1"))
    took = time.monotonic() - started
    assert not [line for line in second.stderr.splitlines() if line.endswith("| torch")], "imported torch first"
    assert (lock.read_record(str(path)) or {}).get("pid") == p.pid  # still the first's, after the refusal
    refused = second.stderr.strip().splitlines()[-1]
    assert second.returncode == 2, second.stderr[-2000:]
    assert refused.startswith(f"pretrain.sh: error: {save} is in use by another run (pid {p.pid} on {lock.host()}, "
                              "started ") and f"lock {path}" in refused and "SAVE_DIR" in refused, refused
    assert took < 10, took  # before any data check or training
    beat = path.stat().st_mtime
    wait_for(lambda: path.stat().st_mtime > beat, 10, "the exec'd fairseq-train keeps no heartbeat (every 0.2 s here)")
    assert p.poll() is None, p.stderr.read()[-3000:]
    stopped_at = time.monotonic()
    p.send_signal(signal.SIGTERM)
    err = p.stderr.read()
    p.wait(30)
    took = time.monotonic() - stopped_at
    reader.join(10)
    assert p.returncode == 143 and took < 20, (p.returncode, took, err[-3000:])
    last = err.rstrip().splitlines()[-1]
    m = re.fullmatch(rf"fairseq-train: error: stopped by SIGTERM after update (\d+): saved {save}/checkpoint_last.pt "
                     r"at update \1; rerun the same command to resume from it", last)
    assert m, last
    n = int(m.group(1))
    assert "Traceback" not in err and "done training" not in "".join(out)
    assert f"taking over {path}: the run that held it (pid {killed.pid} on {lock.host()}" in err
    folders = list((save / "tensorboard").iterdir())  # train_inner, valid: one event file each, none of the second's
    assert folders and all(len(list(d.glob("events.out.tfevents.*"))) == 1 for d in folders), folders
    assert not path.exists() and not list(save.glob(".run.lock*"))  # removed by its stopped holder
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == n
    # the rerun (the same command, told to stop 2 updates later) resumes from it: what pretrain.sh execs (python -m
    # tupe_pretrain.pretrain) forked from the tests' warm interpreter (conftest.run), which has torch imported (the
    # fresh one imported it, through tupe_core, before exec'ing fairseq-train: ~4 s); fairseq-train is exec'd afresh
    again = run([sys.executable, "-m", "tupe_pretrain.pretrain"], cwd=ROOT, check=False, timeout=180,
                env=dict(env, EXTRA_ARGS=f"--max-update {n + 2}"))
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-3000:]
    assert re.search(rf"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ {n} updates\)", log), log[-3000:]
    assert logged_updates(log) == [n + 1, n + 2]
    assert not path.exists() and not list(save.glob(".run.lock*"))  # released at the normal end
    # an uninterrupted run of the same command to update n + 2 logs the same losses at n + 1 and n + 2
    whole = run([sys.executable, "-m", "tupe_pretrain.pretrain"], cwd=ROOT, check=False, timeout=180,
                env=dict(env, SAVE_DIR=str(tmp_path / "whole"), TENSORBOARD_DIR="none", EXTRA_ARGS=f"--max-update {n + 2}"))
    assert whole.returncode == 0, (whole.stdout + whole.stderr)[-3000:]
    uninterrupted = whole.stdout + whole.stderr
    assert logged_updates(uninterrupted)[-2:] == [n + 1, n + 2]
    assert train_losses(log) == train_losses(uninterrupted)[-2:], (train_losses(log), train_losses(uninterrupted))


def test_sigterm_with_several_processes_names_the_checkpoint_the_rerun_resumes_from(lm_bin, tmp_path):
    """pretrain.sh with 2 processes (torchrun, which pretrain.py starts and waits for), SIGTERM to every process of
    the job as scancel sends it, after a few checkpoints: the ranks end as they are (no agreed update to finish),
    rank 0 says once at which update and from which checkpoint a rerun resumes, torchrun prints no traceback of the
    signal, pretrain.sh's last line names that checkpoint, exit 143, no process is left, SAVE_DIR's lock is
    released, and the saved checkpoint holds that update."""
    import torch

    save = tmp_path / "ckpt"
    env = script_env(**dict(TINY, SAVE_INTERVAL_UPDATES="3", MAX_SENTENCES="4"), DATA=str(lm_bin), SAVE_DIR=str(save),
                     NPROC_PER_NODE="2", MASTER_PORT=str(free_port()))
    p = start([str(ROOT / "train_scripts" / "pretrain.sh")], env, cwd=ROOT)
    out = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    reader.start()
    wait_for(lambda: p.poll() is not None or re.search(r"Saved checkpoint \S+ \(epoch \d+ @ ([6-9]|\d\d+) updates",
                                                       "".join(out)), 180, "no checkpoint saved")
    assert p.poll() is None, p.stderr.read()[-3000:]
    procs = tree(p.pid)
    assert any("tupe_pretrain.torchrun" in c for c in command_lines(procs))  # a child, not exec'd
    for pid in [p.pid] + [c.pid for c in procs]:  # scancel: every process of the job
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    err = p.stderr.read()
    p.wait(60)
    reader.join(10)
    said = re.findall(r"fairseq-train: error: stopped by SIGTERM at update (\d+) \(several processes end as they "
                      rf"are\): rerun the same command to resume from {save}/checkpoint_last.pt at update (\d+)",
                      err + "".join(out))
    assert len(said) == 1, err[-3000:]
    reached, resume = map(int, said[0])
    assert resume <= reached and resume % 3 == 0
    assert p.returncode == 143, err[-3000:]
    assert "Traceback" not in err + "".join(out), err[-3000:]
    assert err.rstrip().splitlines()[-1] == (f"pretrain.sh: error: stopped by SIGTERM; rerun the same command to "
                                             f"resume from {save}/checkpoint_last.pt at update {resume}")
    assert_gone(procs)
    assert not (save / ".run.lock").exists()  # its holder, alive to the end, released it
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == resume


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ctrl_c_saves_the_update_it_finished(lm_bin, tmp_path):
    """SIGINT (Ctrl-C) to pretrain.sh's whole process group, as the terminal sends it: fairseq-train finishes its
    update, saves checkpoint_last.pt at it and exits 130 with the line; SAVE_DIR's lock is released. (SIGHUP takes
    the same path: the closed terminal's test below.)"""
    sig = signal.SIGINT
    import torch

    save = tmp_path / "ckpt"
    p = start([str(ROOT / "train_scripts" / "pretrain.sh")], script_env(**TINY, DATA=str(lm_bin), SAVE_DIR=str(save)),
              cwd=ROOT)
    out = []
    reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    reader.start()
    wait_for(lambda: len(logged_updates("".join(out))) >= 2 or p.poll() is not None, 120, "no update logged")
    assert p.poll() is None, p.stderr.read()[-3000:]
    os.killpg(p.pid, sig)  # start() made it the leader of its own session, as a terminal's shell does
    err = p.stderr.read()
    p.wait(30)
    reader.join(10)
    assert p.returncode == 128 + sig, (p.returncode, err[-3000:])
    m = re.fullmatch(rf"fairseq-train: error: stopped by {sig.name} after update (\d+): saved {save}/checkpoint_last.pt "
                     r"at update \1; rerun the same command to resume from it", err.rstrip().splitlines()[-1])
    assert m, err[-3000:]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == int(m.group(1))
    assert not list(save.glob(".run.lock*"))


def test_sighup_after_the_terminal_closed_still_saves(lm_bin, tmp_path):
    """pretrain.sh writing to a terminal (a pty) that then closes, and the SIGHUP that follows (a closed ssh session):
    writing the stop line fails (EIO), and the run saves checkpoint_last.pt and exits 129 all the same (the line
    failing inside the signal handler was raised into fairseq's loop: no save, exit 1; before that, SIGHUP had its
    default action: no save, no line, the lock left)."""
    import pty

    import torch

    from process_tree import as_from_a_terminal

    save = tmp_path / "ckpt"
    master, slave = pty.openpty()
    p = subprocess.Popen([str(ROOT / "train_scripts" / "pretrain.sh")], cwd=ROOT, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, start_new_session=True, preexec_fn=as_from_a_terminal,
                         env=script_env(**TINY, DATA=str(lm_bin), SAVE_DIR=str(save)))  # SIGHUP not ignored (nohup)
    os.close(slave)
    seen, deadline = b"", time.time() + 120
    while len(logged_updates(seen.decode(errors="replace"))) < 2:
        assert time.time() < deadline and p.poll() is None, seen[-3000:]
        try:
            seen += os.read(master, 65536)
        except OSError:
            break
    os.close(master)  # the terminal is gone: its writes now fail
    os.killpg(p.pid, signal.SIGHUP)
    assert p.wait(60) == 129
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] >= 2
    assert not list(save.glob(".run.lock*"))
