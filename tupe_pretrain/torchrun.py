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


def failed_ranks(error) -> str:
    """torchrun's report of failed ranks (a ``ChildFailedError``) in one line, the first failure first: which rank,
    with which exit status (each node's torchrun reports its own ranks: this host's)."""
    import socket

    first, failure = error.get_first_failure()
    others = [f"rank {rank} exit {f.exitcode}" for rank, f in sorted(error.failures.items()) if rank != first]
    return (f"torchrun: error: rank {first} failed (exit {failure.exitcode}, pid {failure.pid} on "
            f"{socket.gethostname()})" + (f"; torchrun ended the others ({', '.join(others)})" if others else ""))


if __name__ == "__main__":
    sys.exit(main())
