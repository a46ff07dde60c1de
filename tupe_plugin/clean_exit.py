"""A clean end for ``fairseq-train``: process groups destroyed while Python is still whole, and a record
that the run finished, for the scripts that judge its exit status.

Why: fairseq never calls ``torch.distributed.destroy_process_group``. Its gloo groups (the default one
and the copy ``get_global_group`` caches) live until the interpreter clears its modules at exit, and
their worker threads (``pt_gloo_runloop``) can still hold the work of the last collectives then. When
such a thread drops the last reference to a tensor that Python created, it must take the GIL; during
interpreter finalization that ends the thread (``pthread_exit``) inside C++ code that cannot unwind, and
the process aborts: "terminate called without an active exception", SIGABRT, exit status 134 (torchrun:
exitcode -6), after training and the final checkpoint are done. It depends on thread timing: rare in
whole runs, but 6 of 40 2-process runs of fairseq's ending alone (collectives on the cached group, then
``distributed_main``'s barrier) aborted on a busy 2-core machine. Destroying the groups in an ``atexit``
hook, which runs before finalization, joins those threads while the GIL can still be taken (0 of 40).
The default group can outlive the hook (``torch.distributed.nn.functional``, once imported, keeps it as a
default argument), but fairseq runs its collectives on the cached group: its threads are idle by then.

The hook is registered when ``tupe_plugin`` is imported (``--user-dir``). It acts only on a normal end
(no uncaught exception: after a failure, destroying an NCCL group can hang on peers still inside a
collective) and only in the main process (not in data-loader workers). On a normal end it also writes
one line to the file named by ``TUPE_DONE_FILE`` when that is set (not when a signal stopped the run:
``tupe_plugin.graceful_stop``): ``train_scripts/fairseq_rank.sh`` and
``glue/finetune.sh`` read it to count an abort at exit (status 134) after a finished run as done, with a
warning, in case another thread (e.g. fairseq's ``--data-buffer-size`` prefetcher) aborts the exit.
"""
from __future__ import annotations

import atexit
import gc
import multiprocessing
import os
import sys

from tupe_common.fairseq_exit import DONE_FILE_ENV


def ended_normally() -> bool:
    """True unless the interpreter is exiting on an uncaught exception (which sets ``sys.last_value``)."""
    return getattr(sys, "last_exc", None) is None and getattr(sys, "last_value", None) is None


def destroy_process_groups() -> bool:
    """Destroy every torch.distributed process group of this process, and free them now (their
    destructors join the gloo worker threads). Returns whether there were any."""
    dist = sys.modules.get("torch.distributed")  # never imported here: a run without it has no groups
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    fairseq_utils = sys.modules.get("fairseq.distributed.utils")
    cached = getattr(fairseq_utils, "get_global_group", None)
    if cached is not None and hasattr(cached, "_global_group"):
        del cached._global_group  # fairseq's cached all-ranks group: the last reference to it
    dist.destroy_process_group()
    gc.collect()  # groups held only in reference cycles (trainer, model wrappers) are freed here too
    return True


def record_done(path: str) -> None:
    """One line in ``path``: this process reached the end of its run."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"finished: pid {os.getpid()}, {' '.join(sys.argv[:1])}\n")


def at_exit() -> None:
    """The ``atexit`` hook: on a normal end of the main process, destroy the process groups and record it."""
    if multiprocessing.parent_process() is not None or not ended_normally():
        return
    destroy_process_groups()
    from . import graceful_stop

    done_file = os.environ.get(DONE_FILE_ENV)
    if done_file and graceful_stop.stopped_by is None:  # a run a signal stopped (and saved) has not finished
        record_done(done_file)


atexit.register(at_exit)
