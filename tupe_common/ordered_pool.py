"""Worker processes that map a function over a stream of items and give the results back in the items' order,
each worker with a pipe of its own.

    with OrderedPool(4, encode_chunk, initializer=setup, initargs=(model,)) as pool:
        for result in pool.imap(chunks, window=8):   # at most 8 items sent and not yet given back
            write(result)

Why not ``multiprocessing.Pool``: its workers share one task queue, and a worker waiting for work holds that queue's
lock. A stop signal sent to every process of a run (Ctrl-C in a terminal, SLURM's ``scancel``) kills such a worker
with the lock held, and ``Pool.terminate`` takes that lock first: the stop waited for ever. Here a worker holds
nothing another process waits for, so any signal may end any worker at any moment: a stop kills the workers left
(SIGKILL, which no state of a process can miss) and waits for them.

The workers end a stop signal at its default action, quietly (no traceback per worker on Ctrl-C; a signal the run
was started with ignored, ``nohup``, stays ignored); a worker that died makes :meth:`OrderedPool.imap` raise
:class:`WorkerDied`; an exception in the function is raised again in the caller. A worker whose parent was killed
reads the end of its pipe and exits (the parent's ends of every pipe are closed in each forked worker).
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import signal
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

from tupe_common.process import STOP_SIGNALS


class WorkerDied(ChildProcessError):
    """A worker process ended while it had an item (the out-of-memory killer, a signal to it alone): an OSError, so
    a command's ``exit_main`` says it in one error line (exit 1)."""


def _serve(conn: Connection, close: Sequence[Connection], func: Callable[[Any], Any],
           initializer: Optional[Callable[..., None]], initargs: Sequence[Any]) -> None:
    for other in close:  # the parent's ends, inherited by a fork: the parent's death must read as the pipe's end
        other.close()
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            item = conn.recv()
        except EOFError:  # the parent ended, or closed the pool
            return
        try:
            conn.send((True, func(item)))
        except Exception as error:  # noqa: BLE001 (given to the caller, which raises it)
            conn.send((False, error))


class OrderedPool:
    """``workers`` processes running ``func`` (a module-level function) on the items of :meth:`imap`, after
    ``initializer(*initargs)``; ``context``: a multiprocessing start method (``fork`` where the platform has it)."""

    def __init__(self, workers: int, func: Callable[[Any], Any], initializer: Optional[Callable[..., None]] = None,
                 initargs: Sequence[Any] = (), context: Optional[str] = None):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        method = context or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        ctx = mp.get_context(method)
        self._conns: List[Connection] = []
        self._procs: List[Any] = []
        for _ in range(workers):
            ours, theirs = ctx.Pipe()
            self._conns.append(ours)
            close = list(self._conns) if method == "fork" else []
            proc = ctx.Process(target=_serve, args=(theirs, close, func, initializer, tuple(initargs)), daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)

    def imap(self, items: Iterable[Any], window: int = 0) -> Iterator[Any]:
        """``func(item)`` for each item, in order; at most ``window`` items (default: twice the workers) sent and not
        yet given back, one per worker at a time. An item's error is raised in its turn, after the results of every
        item before it."""
        window = max(window or 2 * len(self._conns), len(self._conns))
        source, sent, given = iter(items), 0, 0
        idle = collections.deque(range(len(self._conns)))
        busy: Dict[int, int] = {}  # worker -> the index of its item
        ready: Dict[int, Any] = {}  # item index -> its result, until its turn
        exhausted = False
        while True:
            while idle and not exhausted and sent - given < window:
                try:
                    item = next(source)
                except StopIteration:
                    exhausted = True
                    break
                worker = idle.popleft()
                self._conns[worker].send(item)
                busy[worker], sent = sent, sent + 1
            if given in ready:
                ok, value = ready.pop(given)
                if not ok:  # in its turn: every result before it was given, so the caller knows which item failed
                    raise value
                yield value
                given += 1
                continue
            if not busy:
                return
            for conn in wait([self._conns[w] for w in busy]):
                worker = self._conns.index(conn)
                try:
                    ok, value = conn.recv()
                except EOFError:
                    proc = self._procs[worker]
                    proc.join(5)
                    raise WorkerDied(f"a worker process (pid {proc.pid}) ended with exit code {proc.exitcode} while "
                                     "it worked (-9: killed, often by the out-of-memory killer); rerun the same "
                                     "command to resume, with fewer workers if memory ran out") from None
                ready[busy.pop(worker)] = ok, value
                idle.append(worker)

    def close(self) -> None:
        """End the workers after their current item (they read the end of their pipes) and wait for them."""
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            proc.join()

    def terminate(self) -> None:
        """Kill the workers at once (a stop, an error) and wait for them."""
        for proc in self._procs:
            if proc.exitcode is None:
                proc.kill()
        for proc in self._procs:
            proc.join()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> "OrderedPool":
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.close() if kind is None else self.terminate()
