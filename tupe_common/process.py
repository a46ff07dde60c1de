"""A command run with its output in a log file: ``run_logged`` (a process: the study's parts, ``tupe_glue/finetune.py``'s
runs) or ``call_logged`` (a command's function in this process: the study's locality part, one process start
of torch and fairseq, ~7 s of CPU, fewer); and the one clean stop of every command that runs processes.

A stop (SIGTERM from ``scancel``, a time limit, a pre-emption or ``kill``; SIGINT from Ctrl-C; SIGHUP from a closed
terminal) of a command that :func:`install_stop_handlers` prepared (``tupe_common.errors.exit_main`` does it for
every ``python -m`` entry point): the signal is passed on at once to every child process started here
(:func:`start`, :func:`run`, :func:`run_logged`, ``tupe_common.jobs.run_jobs``), each in its own process group, so the
group (the child's own children: data loaders, a ``torchrun``'s ranks) gets it too; :class:`Stopped` is raised in
the main thread; the children have :data:`GRACE_S` seconds to end (a pre-training saves its checkpoint), then what
is left of their trees is killed (:func:`end_children`). ``exit_main`` ends the command with one line
``PROG: error: stopped by SIGTERM; rerun the same command to resume ...`` and exit 128 + the signal's number
(143, 130, 129). Each child is a command that does the same for its own children (the study's lanes, the grid's
runs), so the whole tree stops, each layer with its own line in its log."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import psutil

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Seconds a child has to end after the signal is passed on: above the 20 s a pre-training takes to finish its
# update and save (tupe_plugin/graceful_stop.py), below SLURM's default KillWait (30 s). TUPE_STOP_GRACE_S changes it.
GRACE_S = 25.0
_WAIT_STEP_S = 0.05


class Stopped(BaseException):
    """A stop signal reached this process (raised in the main thread by the handler of
    :func:`install_stop_handlers`). A BaseException, as KeyboardInterrupt: no ``except Exception`` takes it for a
    failed run."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """The exit status a shell reports for a command this signal ended: 128 + its number."""
        return 128 + self.signum


_children: Dict[int, subprocess.Popen] = {}  # pid -> the live children started here
_lock = threading.RLock()  # re-entered by the handler when the signal comes while this thread holds it
_stopping: Optional[int] = None  # the signal that stops this process, once one came
_owner: Optional[int] = None  # the pid that installed the handlers (a forked worker acts as if it had none)


def stopping() -> Optional[int]:
    """The signal stopping this process (None while none came)."""
    return _stopping


def grace_s() -> float:
    try:
        return max(0.0, float(os.environ.get("TUPE_STOP_GRACE_S", GRACE_S)))
    except ValueError:
        return GRACE_S


def _handle(signum: int, frame) -> None:
    global _stopping
    if os.getpid() != _owner:  # a forked child that kept the handler (_default_in_fork not run): end as by default
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _stopping is not None:  # a second signal (a terminal's and SLURM's both reach us): already stopping
        return
    _stopping = signum
    signal_children(signum)
    raise Stopped(signum)


def install_stop_handlers() -> None:
    """SIGTERM, SIGINT and SIGHUP raise :class:`Stopped` in the main thread after passing the signal on to the
    children; a signal that this process was started with ignored (``nohup``, a background job's SIGINT) stays
    ignored. Only from the main thread (elsewhere: nothing). A process forked from this one (a multiprocessing
    pool's worker) starts with the default action of these signals back (:func:`_default_in_fork`)."""
    global _owner, _fork_hook
    if threading.current_thread() is not threading.main_thread():
        return
    _owner = os.getpid()
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _handle)
    if not _fork_hook:
        os.register_at_fork(after_in_child=_default_in_fork)
        _fork_hook = True


_fork_hook = False


def _default_in_fork() -> None:
    """In a forked child: the stop signals that :func:`_handle` takes get their default action back, so the signal
    ends the child in the kernel, whatever it is doing. A Python handler runs only when the child's main thread
    runs Python code: a pool worker waiting in C for the task queue's lock (``sem_wait``) when ``Pool.terminate()``
    sends it SIGTERM lost it, under load, when the signal came just before the wait or as the wait woke and slept
    again (the C handler only notes it; no EINTR reaches Python), and the pool's ``join`` then waited for ever:
    a stopped C4 binarize hung instead of ending (tests/test_c4_pipeline.py)."""
    if os.getpid() == _owner:
        return
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # never an error in a child about to exec (subprocess)
            if signal.getsignal(sig) is _handle:
                signal.signal(sig, signal.SIG_DFL)


def _tree(pid: int) -> Dict[int, "psutil.Process"]:
    """``pid``'s descendants now, as psutil handles: a handle signals only the process it was made for (psutil
    checks the pid's start time), never another that took a freed pid (``pid_max`` is 32768 on many machines)."""
    import psutil

    try:
        return {c.pid: c for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:  # the process gone
        return {}


def _send(pid: int, sig: int) -> None:
    """``sig`` to the process group that the child ``pid`` leads (the child's own children: data loaders, ranks)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _kill(proc: "psutil.Process") -> None:
    import psutil

    with contextlib.suppress(psutil.Error):  # ended, or its pid now another process's: left alone
        proc.kill()


_trees: Dict[int, Dict[int, "psutil.Process"]] = {}  # a child's pid -> its descendants noted since the stop came


def _note(p: subprocess.Popen) -> None:
    """Add ``p``'s descendants now to those noted, while ``p`` is not reaped (a reaped child's pid may be another's)."""
    if p.returncode is None:
        _trees.setdefault(p.pid, {}).update(_tree(p.pid))


def _live() -> List[subprocess.Popen]:
    """The children started here that were not reaped; the reaped ones are forgotten."""
    with _lock:
        for pid in [pid for pid, p in _children.items() if p.returncode is not None]:
            del _children[pid]
        return list(_children.values())


def signal_children(signum: int, children: Optional[Sequence[subprocess.Popen]] = None) -> None:
    """Send ``signum`` to the process group of every child started here, or of ``children`` (some of them), each
    child's tree noted first."""
    for p in _live() if children is None else children:
        _note(p)
        _send(p.pid, signum)


def end_children(grace: Optional[float] = None, children: Optional[Sequence[subprocess.Popen]] = None) -> None:
    """After :func:`signal_children`: wait up to ``grace`` seconds (:func:`grace_s`) for every child started here
    (or ``children``) to end, then SIGKILL what is left of each child's tree: the processes noted in it (also those
    in groups of their own, orphaned or not, and those of a child that ended and was reaped meanwhile: a background
    job that ignores SIGINT outlives its shell), and its process group while the group is provably still the
    child's (its leader not yet reaped, or a noted member still in it), so a freed pid is never signalled."""
    chosen = None if children is None else {p.pid for p in children}
    children = _live() if children is None else list(children)
    for p in children:
        _note(p)
    deadline = time.monotonic() + (grace_s() if grace is None else grace)
    while any(p.poll() is None for p in children) and time.monotonic() < deadline:
        time.sleep(_WAIT_STEP_S)
    unreaped = set()
    for p in children:
        _note(p)
        if p.returncode is None:
            unreaped.add(p.pid)
    killed = []
    for pgid, noted in list(_trees.items()):
        if chosen is not None and pgid not in chosen:
            continue
        if pgid in unreaped or any(_in_group(proc, pgid) for proc in noted.values()):
            _send(pgid, signal.SIGKILL)
        for proc in noted.values():
            _kill(proc)
        killed += noted.values()
        del _trees[pgid]
    for p in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(5)
    deadline = time.monotonic() + 5  # SIGKILL takes effect a moment later: gone before the caller's last line
    while any(map(_alive, killed)) and time.monotonic() < deadline:
        time.sleep(_WAIT_STEP_S)


def _alive(proc: "psutil.Process") -> bool:
    """Running and not a zombie (an orphan's zombie waits for a reaper that may never come)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _in_group(proc: "psutil.Process", pgid: int) -> bool:
    import psutil

    try:
        return proc.is_running() and os.getpgid(proc.pid) == pgid
    except (psutil.Error, ProcessLookupError):
        return False


def start(cmd: Sequence[str], **popen_args) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **popen_args)`` in a process group of its own, registered to be stopped with this
    process; raises :class:`Stopped` instead once a stop came (a lane about to start its next job)."""
    if _stopping is not None:
        raise Stopped(_stopping)
    p = subprocess.Popen(list(cmd), start_new_session=True, **popen_args)
    with _lock:
        _children[p.pid] = p
    if _stopping is not None:  # the signal came while it started (a lane's thread): it was not among those signalled
        _send(p.pid, _stopping)
    return p


def _forget(p: subprocess.Popen) -> None:
    with _lock:
        _children.pop(p.pid, None)


# How often the main thread looks up from a wait: a stop signal the kernel gave another thread (a lane's, a lock's
# heartbeat) runs its Python handler only when the main thread runs Python code, which a wait with no timeout never does.
WAKE_S = 0.5


def _wait_status(p: subprocess.Popen) -> int:
    """``p.wait()``; in the main thread in steps of ``WAKE_S``, so that a stop signal is acted on at once."""
    if threading.current_thread() is not threading.main_thread():
        return p.wait()
    while True:
        try:
            return p.wait(WAKE_S)
        except subprocess.TimeoutExpired:
            continue


def wait(p: subprocess.Popen) -> int:
    """``p``'s exit status as a shell reports it (128 + N when signal N ended it), once it ended and was forgotten; on
    a stop (:class:`Stopped` in this thread) the children are ended first (:func:`end_children`)."""
    try:
        status = _wait_status(p)
    except BaseException:
        end_children()
        raise
    finally:
        if p.poll() is not None:
            _forget(p)
    return 128 - status if status < 0 else status


def run(cmd: Sequence[str], **popen_args) -> int:
    """:func:`start`, then :func:`wait`: ``subprocess.run(cmd).returncode`` that stops with this process."""
    return wait(start(cmd, **popen_args))


class LogUnwritable(OSError):
    """A run's log could not be written (a full disk or quota): the run was stopped, its log kept as far as written."""

    def __str__(self) -> str:
        from tupe_common.io import FULL

        return (f"{self.filename}: {FULL[self.errno]} while writing the run's log; the run was stopped and the log "
                "keeps what was written; free space there and rerun the same command to resume")


def run_logged(cmd: Sequence[str], log: str, env: Mapping[str, str], echo: bool = True, append: bool = False) -> int:
    """Run ``cmd`` with its stdout and stderr in ``log`` (and on stderr when ``echo``); returns its exit status as
    the shell reports it (128 + N when signal N ended it: an abort at exit is 134). Each line is in the log as soon
    as the child writes it (a Python child unbuffered, the log line-buffered): a run killed with both processes
    (a session's or a job's end) keeps every line written before, such as the validations of the checkpoints a
    resume starts from, which block buffers lost (up to 4 of a study's pre-training validations). A stop of this
    process (:class:`Stopped`) reaches the child, whose last lines (a pre-training's saved checkpoint) still go to
    the log while it ends. A log that cannot be written (a full disk) stops the child (SIGTERM to its group: a run
    whose output is lost is not worth going on with, and its output is read on to its end, so that it never blocks
    on a full pipe) and raises :class:`LogUnwritable` (a full disk's) or the write's error, once the child ended."""
    from tupe_common.io import raise_if_full

    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    f = open(log, "a" if append else "w", encoding="utf-8", buffering=1)
    failed: List[OSError] = []
    try:
        p = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env, PYTHONUNBUFFERED="1"),
                  text=True, errors="replace")

        def copy() -> None:
            for line in p.stdout:
                if failed:
                    continue  # read on, unwritten: the child ends on the signal, not blocked on its output
                try:
                    f.write(line)
                except OSError as e:
                    failed.append(e)
                    _send(p.pid, signal.SIGTERM)
                    continue
                if echo:
                    sys.stderr.write(line)

        pump = threading.Thread(target=copy, daemon=True)  # the main thread waits: a signal's handler runs there
        pump.start()
        try:
            status = wait(p)
        finally:
            pump.join(grace_s() + 10)  # the pipe's end, once every holder of it (the child's tree) ended
    finally:
        with contextlib.suppress(OSError) if failed else contextlib.nullcontext():  # its write's error is the one said
            f.close()
    if failed:
        raise_if_full(failed[0], log, LogUnwritable)
        raise failed[0]
    return status


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


def call_in_fork(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a forked child process; its result, or its exception raised here. For C code that
    holds this process for long (sentencepiece's trainer): a stop signal's Python handler runs only when the main
    thread is back in Python, so a SIGTERM waited until training ended (36 s on a 36 MB sample, minutes on C4's,
    past SLURM's KillWait). This process waits on a pipe, where the signal is handled at once; the child, with the
    signals' default action (:func:`_default_in_fork`), ends with a signal to the group, and is killed when this
    process stops or fails. The result and the exception must pickle."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_call_and_send, args=(send, function, args), daemon=True)
    child.start()
    send.close()
    try:
        try:
            ok, value = receive.recv()
        except EOFError:
            raise RuntimeError(f"the process running {getattr(function, '__name__', function)} ended without a "
                               f"result (exit status {child.exitcode if child.exitcode is not None else 'unknown'}; "
                               "killed by the system for memory?)") from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    if not ok:
        raise value
    return value


def _call_and_send(send: Any, function: Callable[..., Any], args: tuple) -> None:
    try:
        result = (True, function(*args))
    except Exception as e:  # noqa: BLE001  sent to the parent, which raises it
        result = (False, e)
    send.send(result)
    send.close()
