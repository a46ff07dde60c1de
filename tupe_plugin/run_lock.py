"""The run's lock kept after ``pretrain.sh`` replaced itself with fairseq-train (tupe_common/lock.py).

``pretrain.sh`` takes the lock of SAVE_DIR, then ``exec``s fairseq-train (or a launcher): the pid, and so the lock,
stays, but its heartbeat thread is gone. Every fairseq-train that loads this plugin and carries locks' tokens in
``TUPE_RUN_LOCKS`` keeps their heartbeat going (a daemon thread) and, at its end, removes the lock its holder handed
to the exec (``tupe_common.lock.at_end_of_exec``): the holder itself on any end, a launcher's rank on a normal
end. Data-loader workers (child processes) do neither.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os

from tupe_common import lock

if os.environ.get(lock.ENV) and multiprocessing.parent_process() is None:
    lock.keep_alive_inherited()

    def _at_exit() -> None:
        from .clean_exit import ended_normally

        if multiprocessing.parent_process() is None:
            lock.at_end_of_exec(ended_normally())

    atexit.register(_at_exit)
