"""A command run with its output in a log file: ``run_logged`` (a process: the study's parts, ``glue/finetune.py``'s
runs) or ``call_logged`` (a command's function in this process: the study's locality part, one process start
of torch and fairseq, ~7 s of CPU, fewer)."""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from typing import Callable, Mapping, Sequence


def run_logged(cmd: Sequence[str], log: str, env: Mapping[str, str], echo: bool = True, append: bool = False) -> int:
    """Run ``cmd`` with its stdout and stderr in ``log`` (and on stderr when ``echo``); returns its exit status as
    the shell reports it (128 + N when signal N ended it: an abort at exit is 134). Each line is in the log as soon
    as the child writes it (a Python child unbuffered, the log line-buffered): a run killed with both processes
    (a session's or a job's end) keeps every line written before, such as the validations of the checkpoints a
    resume starts from, which block buffers lost (up to 4 of a study's pre-training validations)."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "a" if append else "w", encoding="utf-8", buffering=1) as f:
        p = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(env, PYTHONUNBUFFERED="1"), text=True, errors="replace")
        try:
            for line in p.stdout:
                f.write(line)
                if echo:
                    sys.stderr.write(line)
            status = p.wait()
        except KeyboardInterrupt:  # Ctrl-C reached us (a terminal's reaches the child too): never leave it running
            stop(p)
            raise
    return 128 - status if status < 0 else status


def stop(p: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process ``p``: SIGTERM, then SIGKILL if it is still there after ``grace_s``."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def call_logged(command: Callable[[], int], log: str, append: bool = False) -> int:
    """``command()`` in this process with what it writes to ``sys.stdout``/``sys.stderr`` (its prints, its log
    lines, an error line) in ``log``, as :func:`run_logged` writes a process's output; its exit status (a
    ``SystemExit``'s code too). The root logger starts without handlers, as in a new process (so the command's
    ``logging.basicConfig`` takes effect, into the log), and has its own handlers and level back afterwards.
    Output written to the file descriptors by C code is not captured."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "a" if append else "w", encoding="utf-8") as f, contextlib.redirect_stdout(f), \
            contextlib.redirect_stderr(f):
        for handler in handlers:
            root.removeHandler(handler)
        try:
            status = command()
        except SystemExit as e:  # argparse's exit 2, a command's sys.exit(N)
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in handlers:
                root.addHandler(handler)
            root.setLevel(level)
    return status
