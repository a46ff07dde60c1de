"""A test's view of a command's process tree, for the clean-stop tests (issue 62): start a command as a terminal
would (its own session, SIGINT at its default), wait for what it writes, and check that nothing of its tree is left."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, List, Optional

import psutil


def as_from_a_terminal() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def start(argv: List[str], env, **kwargs) -> subprocess.Popen:
    """``argv`` in a session of its own, the stop signals at their default action as a terminal starts a command (a
    test run in the background passes SIGINT on ignored, and under nohup SIGHUP too: a command keeps a signal it was
    started with ignored), its stdout and stderr piped."""
    return subprocess.Popen([str(a) for a in argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=as_from_a_terminal, **kwargs)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.1)


def tree(pid: int) -> List[psutil.Process]:
    """``pid``'s descendants now."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def command_lines(procs: List[psutil.Process]) -> List[str]:
    """The command line of each process of ``procs`` still running (one that ended, or a zombie not yet reaped,
    has none: reading it would raise)."""
    found = []
    for p in procs:
        try:
            found.append(" ".join(p.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
            continue
    return found


def assert_gone(procs: List[psutil.Process]) -> None:
    """No process of ``procs`` is left (a zombie whose parent has not reaped it yet counts as gone)."""
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {p.cmdline()}")
        except psutil.NoSuchProcess:
            pass
    assert not left, left


def stop_cleanly(p: subprocess.Popen, sig: int, last_line: str, timeout: float,
                 procs: Optional[List[psutil.Process]] = None, group: bool = False) -> str:
    """Send ``sig`` to ``p`` alone (kill PID), or with ``group`` to its whole process group (Ctrl-C; ``scancel``
    signals every process of a job step), and check the clean stop: exit 128 + the signal's number, ``last_line``
    last on stderr, no traceback, and no process of ``procs`` (default: ``p``'s tree before the signal) left.
    Returns stderr."""
    procs = tree(p.pid) if procs is None else procs
    if group:
        os.killpg(p.pid, sig)  # start() made p the leader of its own session and group
    else:
        p.send_signal(sig)
    _, err = p.communicate(timeout=timeout)
    assert p.returncode == 128 + sig, err[-3000:]
    assert err.rstrip().splitlines()[-1] == last_line
    assert "Traceback" not in err
    assert_gone(procs)
    return err


MARK = "TEST_TREE_MARK"  # not a project setting: every child inherits it (a setting not its own is dropped)


def marked(env) -> dict:
    """``env`` with a mark of its own (``MARK``) that every process the command starts inherits, so that
    ``assert_none_left`` finds them after the command ended, a re-parented orphan included."""
    return dict(env, **{MARK: f"{os.getpid()}-{time.monotonic_ns()}"})


def assert_none_left(env) -> None:
    """No process started with ``env``'s mark (``marked``) is running: the command that ended took its whole tree."""
    needle = f"{MARK}={env[MARK]}".encode()
    left = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0") and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {p.cmdline()}")
        except (OSError, psutil.NoSuchProcess):  # ended meanwhile, or another user's
            continue
    assert not left, left
