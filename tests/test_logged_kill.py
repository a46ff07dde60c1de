"""A run killed together with the process that logs it keeps every line written before the kill
(tupe_common.process.run_logged): block buffers, the child's stdout pipe and the log file's, lost the last
validations of a study's pre-training killed at a session's end (BERT-R seed 1 of the 2026-12-02 rerun: 4 of 23), and
the resume, starting from the checkpoints saved after them, never logged them again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

CHILD = ("import pathlib, sys, time\n"
         "for i in range(5): print(f'valid {i}')\n"
         "pathlib.Path(sys.argv[1]).write_text('saved')\n"  # the checkpoint after the lines
         "time.sleep(120)\n")
PARENT = ("import sys\nfrom tupe_common.process import run_logged\n"
          "run_logged([sys.executable, '-c', sys.argv[1], sys.argv[2]], sys.argv[3], {'PATH': '/usr/bin:/bin'}, "
          "echo=False)\n")


@pytest.mark.usefixtures("starts_process")
def test_lines_written_before_a_kill_of_both_processes_are_in_the_log(tmp_path):
    log, saved = tmp_path / "train.log", tmp_path / "saved"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a user's environment: buffered
    env["PYTHONPATH"] = str(ROOT)
    job = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(saved), str(log)], env=env,
                           start_new_session=True)
    try:
        deadline = time.time() + 60
        while not saved.exists():
            assert job.poll() is None and time.time() < deadline
            time.sleep(0.05)
        deadline = time.time() + 10  # for the parent to read the lines: they reach the file then, or never (old code)
        while len(log.read_text().splitlines()) < 5 and time.time() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the session's end: both at once
        job.wait()
    assert log.read_text().splitlines() == [f"valid {i}" for i in range(5)]
