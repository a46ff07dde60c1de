"""Every stop is clean (issue 62): SIGTERM, SIGINT and SIGHUP on a command that runs processes
(``tupe_common.errors.exit_main`` with ``tupe_common.process``) stop its whole process tree, end with one line
saying what stopped it and how to resume, and exit 128 + the signal's number; the long entry points (finetune.sh,
study.sh --lanes, pretrain.sh) are walked through the same stop with real runs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT

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


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.05)


def tree(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def assert_tree_gone(procs: list) -> None:
    """No process of the stopped tree is left (zombies of reaped parents are none)."""
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {p.cmdline()}")
        except psutil.NoSuchProcess:
            pass
    assert not left, left


def start(argv, env, **kwargs) -> subprocess.Popen:
    # SIGINT's default action, as under a terminal (a caller in the background would pass it on ignored)
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **kwargs)


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
    assert_tree_gone(procs)
