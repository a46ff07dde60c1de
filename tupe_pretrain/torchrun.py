"""``torchrun`` whose stop ends with its exit status, not a traceback: ``python -m tupe_pretrain.torchrun ARGS`` runs
torch's own ``torchrun ARGS`` (``torch.distributed.run.main``) in this process.

torchrun turns SIGTERM, SIGINT and SIGHUP into a ``SignalException``: its agent ends the ranks with the same signal
(``LocalElasticAgent._shutdown``), then re-raises it, and the torchrun script ends in Python's traceback of it,
printed after rank 0's line that says where the run resumes from (tupe_plugin/graceful_stop.py). Here that one
exception, once the agent has ended the ranks, is exit 128 + the signal's number, quietly: ``pretrain.py``, which
started this process and waited for it, says the last line. A rank that failed (``ChildFailedError``, after the
rank's own error) is one line naming it, exit 1; any other error (a rendezvous that timed out) is torchrun's own,
traceback included.

Started by ``pretrain.py`` (``TUPE_TORCHRUN_PARENT``: its pid), it gets SIGTERM when that process dies (Linux's
PR_SET_PDEATHSIG): a ``kill -9`` of pretrain.sh leaves no torchrun training on without the holder of SAVE_DIR's lock.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Tuple

from tupe_common.fairseq_exit import ERROR_FILE_ENV

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

PARENT = "TUPE_TORCHRUN_PARENT"  # the pid of the pretrain.py that waits for this process


def end_with_parent() -> None:
    """SIGTERM to this process when the process of :data:`PARENT` dies (Linux; elsewhere nothing)."""
    parent = os.environ.get(PARENT)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def wrapped(cmd: List[str], environ: Mapping[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """torchrun's command ``cmd`` as this module runs it (a stop: its exit status; a failed rank: one line), and its
    environment, ended with this process (:data:`PARENT`): for :func:`supervise` and the study's pre-trainings."""
    return [sys.executable, "-m", "tupe_pretrain.torchrun", *cmd[1:]], {**environ, PARENT: str(os.getpid())}


def supervise(save_dir: str, cmd: List[str], environ: Dict[str, str], say: Callable[[str], None]) -> int:
    """pretrain.py's torchrun: run torchrun's command ``cmd`` as a child (:func:`wrapped`) and wait for it: its exit
    status. A stop (SIGTERM from scancel or kill, Ctrl-C's SIGINT, SIGHUP)
    is passed on to torchrun, which ends the ranks (rank 0 says at which update, tupe_plugin/graceful_stop.py);
    once they ended, the last line says what stopped the run and the checkpoint the rerun resumes from, and the
    exit status is 128 + the signal's number (``tupe_common.process``). This process stays the holder of SAVE_DIR's
    lock (its heartbeat thread lives on) and releases it at the end, a stop's included. A rank that failed: the last
    line repeats its reason (``ERROR_FILE_ENV``) and the checkpoint the rerun resumes from. ``say``: a line on
    stderr with the caller's name."""
    import tempfile

    from tupe_common import process
    from tupe_pretrain.check_resume import resume_from
    from tupe_tools.errors import fairseq_error

    argv, env = wrapped(cmd, environ)
    fd, error_file = tempfile.mkstemp(prefix="tupe-rank-error-", suffix=".txt")  # not in SAVE_DIR: its disk may be full
    os.close(fd)
    try:
        try:
            status = process.run(argv, env={**env, ERROR_FILE_ENV: error_file})
        except process.Stopped as stop:  # the ranks and torchrun ended (or were killed after the grace)
            status, name = stop.status, stop.name
        else:  # torchrun alone was signalled (kill of its pid): it ended the ranks and exited 128 + N
            name = {128 + s: f"{s.name} (sent to torchrun)" for s in process.STOP_SIGNALS}.get(status)
        with open(error_file, encoding="utf-8", errors="replace") as f:
            reason = fairseq_error(f.read())  # a rank's own line (a full disk names the file), else ''
    finally:
        os.remove(error_file)
    sys.stdout.flush()
    if name:
        say(f"error: stopped by {name}; {resume_from(save_dir)}")
    elif status:  # torchrun failed (a rank: its line above names it); the last line says why and how to go on
        say(f"error: {reason or f'torchrun ended with exit {status}: the error is above'}; {resume_from(save_dir)}")
    return status


def main() -> int:
    end_with_parent()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    sys.argv[0] = "torchrun"  # its usage and error lines name the command the user knows
    try:
        torchrun()
    except SignalException as e:  # after the agent's shutdown of the ranks
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a second one (scancel's, after pretrain.py's)
            signal.signal(sig, signal.SIG_IGN)                     # would raise torch's exception again: we end
        return 128 + int(e.sigval)
    except ChildFailedError as e:  # a rank failed (its own lines say why), the agent ended the others
        sys.stderr.write(failed_ranks(e) + "\n")
        return 1
    return 0


def failed_ranks(error: "ChildFailedError") -> str:
    """torchrun's report of failed ranks (a ``ChildFailedError``) in one line, the first failure first: which rank,
    with which exit status (each node's torchrun reports its own ranks: this host's)."""
    import socket

    first, failure = error.get_first_failure()
    others = [f"rank {rank} exit {f.exitcode}" for rank, f in sorted(error.failures.items()) if rank != first]
    return (f"torchrun: error: rank {first} failed (exit {failure.exitcode}, pid {failure.pid} on "
            f"{socket.gethostname()})" + (f"; torchrun ended the others ({', '.join(others)})" if others else ""))


if __name__ == "__main__":
    sys.exit(main())
