"""A clean stop of a one-process ``fairseq-train`` (``pretrain.sh`` execs it; so do the study's pre-trainings):
SIGTERM (``scancel``, a time limit, a pre-emption, ``kill``), SIGINT (Ctrl-C) or SIGHUP (the terminal or ssh
session closed) lets the update under way finish, saves ``checkpoint_last.pt`` at it, and exits 143 / 130 / 129 with
one line naming the update and how to resume::

    fairseq-train: error: stopped by SIGTERM after update 7: saved ckpt/checkpoint_last.pt at update 7; rerun the
    same command to resume from it

The hook into fairseq's loop is the least it offers: the handler only notes the signal; ``fairseq_cli.train``'s
``should_stop_early`` (looked up by ``validate_and_save`` after every update) then answers "stop", so fairseq's own
stop path saves the checkpoint (``checkpoint_utils.save_checkpoint``: ``checkpoint_last.pt`` with the data position,
as ``--max-update`` or ``--stop-time-hours`` would), and ``validate_and_save`` returns into our wrapper, which says
the line and raises ``SystemExit`` (no "done training", no ``TUPE_DONE_FILE`` record: ``tupe_plugin.clean_exit``).
A signal during the save itself is honoured by saving once more when the save had already been decided.
A signal before the first update (loading data, building the model) stops at once: nothing was written.
A run is stopped so only in one process: with several (``torchrun``, fairseq's own spawn) the ranks could not agree
on the update to stop at, so the signal keeps its default there (torchrun passes it on and the ranks end; they
resume from the last checkpoint saved), after rank 0's one line naming the update it reached and the checkpoint a
rerun resumes from::

    fairseq-train: error: stopped by SIGTERM at update 12 (several processes end as they are): rerun the same
    command to resume from ckpt/checkpoint_last.pt at update 10

``--no-save`` runs (fine-tuning) stop the same way, saving nothing.
The same per-epoch wrapper ends the past epochs' data-loader workers (a garbage collection; see ``hook``).
Installed when ``tupe_plugin`` is imported by a training entry point (``--user-dir``), and at the first epoch of any
other caller of ``fairseq_cli.train``.
"""
from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import threading
from typing import Dict, Optional, Tuple

from tupe_common.fairseq_exit import TRAIN_PROG

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
TRAINING_ENTRIES = ("fairseq_cli.train", "fairseq_cli.hydra_train")  # python -m of fairseq's own
# set to True by a module run as __main__ that trains with fairseq (tupe_pretrain.fairseq_train, tupe_glue.fairseq_train)
TRAINS_FLAG = "TRAINS_WITH_FAIRSEQ"
logger = logging.getLogger("tupe_plugin.graceful_stop")

stopped_by: Optional[int] = None  # the signal that stops this run, once one came
_in_loop = False  # the training loop has begun: a stop waits for the update under way
_forced_at: Optional[int] = None  # the update at which should_stop_early answered "stop" for the signal
_owner: Optional[int] = None
_previous: Dict[int, object] = {}


def _several_processes() -> bool:
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def _rank0_of_several() -> bool:
    """The process that says a several-process stop's line (and so follows its checkpoints)."""
    return _several_processes() and sys.modules["torch.distributed"].get_rank() == 0


def _say(line: str) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.write(f"{TRAIN_PROG}: {line}\n")
        sys.stderr.flush()
    except OSError:  # the terminal is gone (SIGHUP after it closed: EIO): the run saves and stops all the same
        _to_devnull()


def _to_devnull() -> None:
    """stdout and stderr to /dev/null, so that what the run still writes (fairseq's lines, the flush at exit) cannot
    fail it once its terminal closed."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


def _handle(signum: int, frame) -> None:
    global stopped_by
    if os.getpid() != _owner or _several_processes():  # a data-loader worker, or a rank of several: as before
        if os.getpid() == _owner and _in_loop:
            _say_several(signum)
        previous = _previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            return previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if stopped_by is not None:  # a second signal (a terminal's and a runner's): already stopping
        return
    stopped_by = signum
    name = signal.Signals(signum).name
    if not _in_loop:
        _say(f"error: stopped by {name} before the first update; nothing was saved by this run: rerun the same "
             "command to start it (or resume from an earlier checkpoint_last.pt)")
        raise SystemExit(128 + signum)
    _say(f"{name}: stopping after the update under way, then saving checkpoint_last.pt")


def _say_several(signum: int) -> None:
    """Rank 0 of several names the update at which the stop found it and the checkpoint a rerun resumes from, once
    (a runner, torchrun or srun, passes the same signal on again); the ranks then end as they are (they could not
    agree on an update to finish)."""
    global stopped_by
    with _said_lock:  # the handler and the watching thread may both come
        first = stopped_by is None
        if first:
            stopped_by = signum
    if not first:  # the other one says it: the handler, which ends the process next, waits for the line
        _said.wait(2)
        return
    try:
        if not _rank0_of_several():
            return
        name = signal.Signals(signum).name
        if _saved is None:
            _say(f"error: stopped by {name} at update {_updates} (several processes end as they are); no checkpoint "
                 "was saved by this run yet: rerun the same command to start it (or resume from an earlier "
                 "checkpoint_last.pt)")
        else:
            _say(f"error: stopped by {name} at update {_updates} (several processes end as they are): rerun the same "
                 f"command to resume from {_saved[0]} at update {_saved[1]}")
    finally:
        _said.set()


_said_lock = threading.Lock()
_said = threading.Event()  # the line of several processes written (or none to write): the process may end
_wakeup: Optional[Tuple[socket.socket, socket.socket]] = None


def _watch_signals() -> None:
    """With several processes: a thread that hears a stop signal at once, through Python's wakeup fd (written by the
    C-level handler as the signal comes), and says the line. The main thread runs Python's handler only between
    bytecodes, so one waiting inside a collective (its peer already ended by the same signal) would never say it.
    Once per process; not where another wakeup fd is set."""
    global _wakeup
    if _wakeup is not None or threading.current_thread() is not threading.main_thread():
        return
    r, w = socket.socketpair()
    w.setblocking(False)
    previous = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    if previous != -1:  # someone else's: put it back, no watch
        signal.set_wakeup_fd(previous)
        r.close()
        w.close()
        return
    _wakeup = (r, w)

    def listen() -> None:
        while True:
            for signum in r.recv(64):
                if signum in SIGNALS and _in_loop:
                    _say_several(signum)

    threading.Thread(target=listen, name="tupe-stop-watch", daemon=True).start()


def install() -> None:
    """The handlers of the stop signals (SIGNALS) in this (main) process; once."""
    global _owner
    if _owner == os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    _owner = os.getpid()
    for sig in SIGNALS:
        previous = signal.getsignal(sig)
        if previous == signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: stays ignored
            continue
        _previous[sig] = previous
        signal.signal(sig, _handle)


def _training_entry() -> bool:
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    return (os.path.basename(sys.argv[0] if sys.argv else "") in ("fairseq-train", "fairseq-hydra-train")
            or name in TRAINING_ENTRIES or getattr(main, TRAINS_FLAG, False) is True)


def stop_line(signum: int, updates: int, saved: Optional[str]) -> str:
    name = signal.Signals(signum).name
    if saved is None:
        return (f"error: stopped by {name} after update {updates}; this run saves no checkpoint (--no-save): "
                "rerun the same command to run it again")
    return (f"error: stopped by {name} after update {updates}: saved {saved} at update {updates}; rerun the same "
            "command to resume from it")


def hook(train_cli) -> None:
    """Wrap ``train_cli`` (``fairseq_cli.train``)'s ``train``, ``should_stop_early`` and ``validate_and_save``; once."""
    if getattr(train_cli.validate_and_save, "graceful_stop", False):
        return
    train, should_stop_early, validate_and_save = (train_cli.train, train_cli.should_stop_early,
                                                   train_cli.validate_and_save)

    def train_epoch(cfg, trainer, task, epoch_itr):
        global _in_loop, _saved
        install()
        last = _last_checkpoint(cfg)
        if _saved is None and last and os.path.exists(last):  # a resumed run: what it loaded
            _saved = (last, trainer.get_num_updates())
        _in_loop = True
        if _several_processes():
            _watch_signals()
        # The past epochs' data loaders sit in reference cycles, and with NUM_WORKERS > 0 each keeps its persistent
        # worker processes (fairseq's default) until Python's rare full collection: with sharded data (a new
        # dataset every epoch, as the C4 pipeline's data-bin) they piled up, one set per epoch, each up to the
        # dataset's size in memory (a 2,400-update study run on 2 CPUs: 7 workers of up to 2 GB, then the OOM
        # killer). Collecting here ends them before this epoch's start.
        gc.collect()
        return train(cfg, trainer, task, epoch_itr)

    def stop_early(cfg, valid_loss):
        global _forced_at
        if stopped_by is not None and _in_loop and not _several_processes():
            _forced_at = _updates
            return True
        return should_stop_early(cfg, valid_loss)

    def validate_then_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch):
        global _updates, _saved
        _updates = trainer.get_num_updates()
        last = _last_checkpoint(cfg) if _rank0_of_several() else None  # only its line names the checkpoint
        before = _mtime(last)
        result = validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)
        if last and _mtime(last) != before:  # fairseq saved this update's checkpoint
            _saved = (last, _updates)
        if stopped_by is None or _several_processes():
            return result
        from fairseq import checkpoint_utils

        if _forced_at != _updates:  # the signal came after the stop was decided: fairseq did not save for it
            checkpoint_utils.save_checkpoint(cfg.checkpoint, trainer, epoch_itr, None)
        saved = None if cfg.checkpoint.no_save else os.path.join(cfg.checkpoint.save_dir, "checkpoint_last.pt")
        if cfg.checkpoint.no_last_checkpoints and saved:
            saved = f"a checkpoint (--no-last-checkpoints) in {cfg.checkpoint.save_dir}"
        _say(stop_line(stopped_by, _updates, saved))
        raise SystemExit(128 + stopped_by)

    validate_then_save.graceful_stop = True
    # should_stop_early keeps its state on the function it finds by name (fairseq's own `best`, `num_runs`): on ours
    train_cli.train, train_cli.should_stop_early, train_cli.validate_and_save = (train_epoch, stop_early,
                                                                                 validate_then_save)


_updates = 0
_saved: Optional[Tuple[str, int]] = None  # checkpoint_last.pt and the update it holds, once saved or loaded


def _last_checkpoint(cfg) -> Optional[str]:
    if cfg.checkpoint.no_save or cfg.checkpoint.no_last_checkpoints:
        return None
    return os.path.join(cfg.checkpoint.save_dir, f"checkpoint_last{cfg.checkpoint.checkpoint_suffix}.pt")


def _mtime(path: Optional[str]) -> Optional[int]:
    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def train_module():
    """``fairseq_cli.train`` when this process has loaded it (fairseq-train, fairseq-hydra-train: a process that
    trains), else None (an export, an analysis, a test importing the plugin)."""
    train_cli = sys.modules.get("fairseq_cli.train")
    return train_cli if hasattr(train_cli, "validate_and_save") else None


def install_if_training() -> None:
    """At import (``--user-dir``): hook ``fairseq_cli.train`` when it is loaded, and install the handlers at once
    when this process is a training entry point (a Ctrl-C while it loads data is one line too)."""
    train_cli = train_module()
    if train_cli is None:
        return
    hook(train_cli)
    if _training_entry():
        install()
