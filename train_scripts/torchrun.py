"""``torchrun`` whose stop ends with its exit status, not a traceback: ``python -m train_scripts.torchrun ARGS`` runs
torch's own ``torchrun ARGS`` (``torch.distributed.run.main``) in this process.

torchrun turns SIGTERM, SIGINT and SIGHUP into a ``SignalException``: its agent ends the ranks with the same signal
(``LocalElasticAgent._shutdown``), then re-raises it, and the torchrun script ends in Python's traceback of it,
printed after rank 0's line that says where the run resumes from (tupe_plugin/graceful_stop.py). Here that one
exception, once the agent has ended the ranks, is exit 128 + the signal's number, quietly: ``pretrain.py``, which
started this process and waited for it, says the last line. Any other error (a rank that failed:
``ChildFailedError``'s report; a rendezvous that timed out) is torchrun's own, traceback included.
"""
from __future__ import annotations

import signal
import sys


def main() -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    sys.argv[0] = "torchrun"  # its usage and error lines name the command the user knows
    try:
        torchrun()
    except SignalException as e:  # after the agent's shutdown of the ranks
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a second one (scancel's, after pretrain.py's)
            signal.signal(sig, signal.SIG_IGN)                     # would raise torch's exception again: we end
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
