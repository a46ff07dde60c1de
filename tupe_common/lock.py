"""One run per folder: the lock a run holds in the folder it writes, for as long as it runs.

    with hold(folder_lock(save_dir), "pretrain.sh", "SAVE_DIR"):   # LockHeld (a UsageError: exit 2) if taken
        ...                                                          # the run

The lock is a small file (``FOLDER/.run.lock``; a fine-tuning run's is beside its folder) holding JSON: the
holder's pid, host, the pid's start time (``/proc``: a reused pid is not taken for the holder), when it started,
the command, and a token. It is made whole in a private file and then hard-linked onto its name: ``link`` is
create-exclusive on every POSIX file system, NFS (v2/v3, where ``O_EXCL`` was not) and Lustre included, so of two
runs starting at once exactly one gets it and no reader ever sees half a record. Its modification time is its
heartbeat: a daemon thread touches it every ``HEARTBEAT_S`` seconds (60; ``TUPE_RUN_LOCK_HEARTBEAT_S`` in tests) while
the holder runs.

A second run into the folder is refused at once (``LockHeld``: one line naming the holder's pid and host, the lock
and what to do) unless the holder is gone:

- on this host, the recorded pid is not running (or runs another program: its start time differs);
- on another host, where a pid cannot be checked, the heartbeat is older than ``STALE_S`` (10 minutes). The age
  is measured against the folder's own clock (the modification time of a file just made there, which an NFS
  server stamps), so the clients' clocks do not matter on NFS; on Lustre, where clients stamp times, a clock
  skew up to minutes is absorbed by the 10 minutes (keep the nodes' clocks in sync with NTP).

A lock whose holder is gone is taken over, with a line that says so (``taking over ...``).

A process never refuses itself: holding a lock it holds already (the study's part, then pre-training into the
same folder in the same process) nests, and only the outermost release removes the file. A process whose
environment carries the lock's token (``TUPE_RUN_LOCKS``, set for the holder's children: the fairseq-train a
study part starts) is part of the holder's run and is let through too. Release removes the file on a normal end
and on a clean stop (an exception, Ctrl-C: the ``with`` block ends); a killed holder leaves it, and the next run
takes it over by the rules above.

``pretrain.sh`` replaces itself with fairseq-train, or srun (``exec``): the pid, and so the lock, stays the same, but
the thread does not survive. :func:`handed_to_exec` marks the record so, and passes the token in the environment;
the plugin (``tupe_plugin/run_lock.py``, imported by every fairseq-train of ``--user-dir tupe_plugin``) then
keeps the heartbeat going and removes the lock when the run ends. With torchrun, ``pretrain.sh`` stays the holder:
it starts torchrun as a child (:func:`handed_to_children`: the token, no ``exec`` mark), waits for it and releases
the lock at its end, a stop's included. Readers (``study.sh --report``, ``--archive``,
``--list``, ``--plan``, ``tupe_glue.collect``) take no lock and work beside one. Standard library only.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Callable, Dict, Optional

from tupe_common.errors import UsageError

LOCK_NAME = ".run.lock"
HEARTBEAT_S = float(os.environ.get("TUPE_RUN_LOCK_HEARTBEAT_S") or 60)  # the holder touches its lock this often
STALE_S = 600.0  # on another host, a heartbeat older than this is a gone holder's
ENV = "TUPE_RUN_LOCKS"  # JSON {token: lock path} of the locks whose run this process is part of

Say = Callable[[str], None]


class LockHeld(UsageError):
    """Another run holds the lock of the folder: exit 2, nothing changed."""


def folder_lock(folder: str) -> str:
    """The lock file of a run that writes ``folder``."""
    return os.path.join(folder, LOCK_NAME)


def locked(path: str) -> str:
    """The folder the lock ``path`` keeps to one run, for messages: the one it is in (:func:`folder_lock`), or the
    one it stands beside (``FOLDER.lock``: a fine-tuning run's, whose folder is made afresh)."""
    if os.path.basename(path) != LOCK_NAME and path.endswith(".lock"):
        return path[:-len(".lock")]
    return os.path.dirname(path)


def host() -> str:
    return socket.gethostname()


def start_ticks(pid: int) -> Optional[int]:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None (no /proc, no such pid).
    ``exec`` keeps it, so the exec'd fairseq-train is still the lock's holder."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int, started: Optional[int]) -> bool:
    """``pid`` runs on this host, and is the process that started at ``started`` (when recorded)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    now = start_ticks(pid)
    return started is None or now is None or now == started


def read_record(path: str) -> Optional[dict]:
    """The lock's record, or None when the file is gone; an unreadable file is ``{}``."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folder_now(folder: str) -> float:
    """The folder's file system's clock: the modification time of a file made there now (an NFS server stamps
    it), else this host's clock."""
    probe = os.path.join(folder, f".run.lock.clock.{host()}.{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            return os.fstat(fd).st_mtime
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError:
        return time.time()


def heartbeat_age(path: str) -> Optional[float]:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, folder_now(os.path.dirname(path) or ".") - mtime)


def gone(record: dict, path: str) -> Optional[str]:
    """Why the holder of ``record`` is gone (the reason, for the take-over line), or None while it runs."""
    age = heartbeat_age(path)
    if record.get("host") == host() and isinstance(record.get("pid"), int):
        if pid_alive(record["pid"], record.get("pid_start")):
            return None
        if pid_alive(record["pid"], None):
            return f"pid {record['pid']} is now another process on this host (started after the lock was taken)"
        return f"pid {record['pid']} is not running on this host"
    if age is not None and age > STALE_S:
        return f"its heartbeat is {age / 60:.0f} minutes old, over the {STALE_S / 60:.0f} minutes of a live run"
    return None


def _inherited() -> Dict[str, str]:
    try:
        data = json.loads(os.environ.get(ENV) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _set_inherited(tokens: Dict[str, str]) -> None:
    if tokens:
        os.environ[ENV] = json.dumps(tokens)
    else:
        os.environ.pop(ENV, None)


class RunLock:
    """A held lock (``hold``); ``release()`` or the end of its ``with`` block lets it go."""

    def __init__(self, path: str, token: str, owned: bool):
        self.path, self.token, self.owned = path, token, owned
        self.released = False

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if not self.owned:
            return
        with _LOCK:
            held = _HELD.get(self.path)
            if held is None:
                return
            held["depth"] -= 1
            if held["depth"] > 0:
                return
            del _HELD[self.path]
            tokens = _inherited()
            tokens.pop(self.token, None)
            _set_inherited(tokens)
        remove_if_mine(self.path, self.token)
        _remove_empty(held["made"])


_LOCK = threading.Lock()
_HELD: Dict[str, dict] = {}  # lock path -> {"token", "depth"}: the locks this process holds
_thread: Optional[threading.Thread] = None


def remove_if_mine(path: str, token: str) -> bool:
    """Remove the lock ``path`` if it still holds ``token`` (not a later run's that took it over)."""
    record = read_record(path)
    if record is not None and record.get("token") == token:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            pass
    return False


def touch_if_mine(path: str, token: str) -> bool:
    """Refresh the heartbeat of ``path`` if it still holds ``token``."""
    record = read_record(path)
    if record is None or record.get("token") != token:
        return False
    try:
        os.utime(path)
        return True
    except OSError:
        return False


def keep_alive(locks: Callable[[], Dict[str, str]], every: float = HEARTBEAT_S) -> threading.Thread:
    """A daemon thread touching the locks ``locks()`` returns ({token: path}) every ``every`` seconds."""
    def beat() -> None:
        while True:
            time.sleep(every)
            for token, path in list(locks().items()):
                touch_if_mine(path, token)

    thread = threading.Thread(target=beat, name="run-lock-heartbeat", daemon=True)
    thread.start()
    return thread


def _held_tokens() -> Dict[str, str]:
    with _LOCK:
        return {held["token"]: path for path, held in _HELD.items()}


def _create(path: str, record: dict) -> bool:
    """Make the lock whole under a private name, then link it onto ``path``: False if ``path`` exists."""
    tmp = f"{path}.{host()}.{os.getpid()}.{record['token'][:8]}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: create-exclusive
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.write("\n")
        return True
    finally:
        os.unlink(tmp)


def _take_away(path: str, token: Optional[str]) -> None:
    """Move the gone holder's lock away, and delete it if it is still that one (two runs taking it over at once:
    one moves it; a lock made meanwhile by another run is put back)."""
    aside = f"{path}.{host()}.{os.getpid()}.stale"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    record = read_record(aside) or {}
    if record.get("token") != token:
        try:
            os.link(aside, path)  # a live run's lock: back, unless yet another run has one there now
        except OSError:
            pass
    os.unlink(aside)


def describe(record: dict, path: str) -> str:
    age = heartbeat_age(path)
    beat = "" if age is None else f", heartbeat {age:.0f} s ago"
    return (f"pid {record.get('pid', '?')} on {record.get('host', '?')}, started {record.get('started', '?')}"
            f"{beat}")


def _canonical(path: str) -> str:
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))


def hold(path: str, prog: str, setting: str = "", say: Optional[Say] = None) -> RunLock:
    """Take the lock ``path`` for this process's run (``prog``: the command, for the lines; ``setting``: the
    setting that names the folder, for the advice), or raise :class:`LockHeld`. Re-entrant; see the module."""
    path = _canonical(path)
    if say is None:
        def say(line: str) -> None:
            sys.stderr.write(f"{prog}: {line}\n")
    with _LOCK:
        held = _HELD.get(path)
        if held is not None:
            held["depth"] += 1
            return RunLock(path, held["token"], owned=True)
    made, folder = [], os.path.dirname(path)  # the folders made for the lock: removed with it if left empty
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        return _hold(path, prog, setting, say, made)
    except BaseException:
        _remove_empty(made)
        raise


def _remove_empty(folders) -> None:
    """Remove ``folders`` (innermost first) that are empty: a refused or finished run that wrote nothing else
    leaves nothing."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


def _is_ours(found: dict) -> bool:
    """The lock ``found`` is this process's run's (its own, or its parent's handed down)."""
    return found.get("token") in _inherited() or (found.get("host") == host() and found.get("pid") == os.getpid())


def _why_gone(found: dict, path: str, setting: str) -> str:
    """Why the holder of the lock ``found`` at ``path`` is gone, or :class:`LockHeld` while it runs."""
    if not found:  # unreadable: a gone holder's after its heartbeat's period, else refused
        age = heartbeat_age(path)
        if age is not None and age <= STALE_S:
            raise LockHeld(f"{locked(path)} is in use: its lock {path} is unreadable and "
                           f"{age:.0f} s old; if no run writes there, remove {path} and rerun")
        return "its lock is unreadable and old"
    why = gone(found, path)
    if why is None:
        other = f", or use another {setting}" if setting else ""
        raise LockHeld(f"{locked(path)} is in use by another run ({describe(found, path)}; lock "
                       f"{path}): wait for it to end or stop it{other}; if that run is gone (a lost node), "
                       f"remove {path} and rerun")
    return why


def refuse_if_held(path: str, setting: str = "") -> None:
    """:class:`LockHeld` at once if a live run other than this one's holds the lock ``path``; writes nothing (a
    command checks this before its slow start, then takes the lock with :func:`hold`)."""
    path = _canonical(path)
    found = read_record(path)
    if found is not None and not _is_ours(found):
        _why_gone(found, path, setting)


def _hold(path: str, prog: str, setting: str, say: Say, made) -> RunLock:
    for _ in range(5):
        token = uuid.uuid4().hex
        record = {"pid": os.getpid(), "host": host(), "pid_start": start_ticks(os.getpid()),
                  "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "command": prog,
                  "token": token}
        if _create(path, record):
            global _thread
            with _LOCK:
                _HELD[path] = {"token": token, "depth": 1, "made": made}
                tokens = _inherited()
                tokens[token] = path
                _set_inherited(tokens)
                if _thread is None:
                    _thread = keep_alive(_held_tokens)
            return RunLock(path, token, owned=True)
        found = read_record(path)
        if found is None:
            continue  # released meanwhile: try again
        if _is_ours(found):
            return RunLock(path, str(found.get("token")), owned=False)  # this process's run: never refused
        why = _why_gone(found, path, setting)
        say(f"taking over {path}: the run that held it ({describe(found, path)}) is gone: {why}")
        _take_away(path, found.get("token"))
    raise LockHeld(f"{path}: could not take the lock (other runs are taking it at the same moment): rerun")


def handed_to_exec(lock: RunLock, environ: Dict[str, str]) -> Dict[str, str]:
    """Before ``exec``: the lock's record says its holder's program ends it (``"exec": true``: the plugin of the
    exec'd fairseq-train keeps its heartbeat and removes it at the end, tupe_plugin/run_lock.py), and ``environ``
    is returned with the token (``TUPE_RUN_LOCKS``) for that process."""
    record = read_record(lock.path) or {}
    if record.get("token") == lock.token:
        record["exec"] = True
        tmp = f"{lock.path}.{os.getpid()}.exec.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.write("\n")
        os.replace(tmp, lock.path)
    return handed_to_children(lock, environ)


def handed_to_children(lock: RunLock, environ: Dict[str, str]) -> Dict[str, str]:
    """``environ`` with the token of ``lock`` (``TUPE_RUN_LOCKS``): the processes its holder starts are part of its
    run (never refused by it; their plugin touches its heartbeat too). The holder, alive, releases it."""
    tokens = dict(_inherited())
    tokens[lock.token] = lock.path
    return {**environ, ENV: json.dumps(tokens)}


def at_end_of_exec(ended_normally: bool) -> None:
    """In a process that carries locks' tokens (``TUPE_RUN_LOCKS``), at its end: remove each lock whose holder
    handed it to an exec (``"exec": true``) when this process is that holder (any end), or, on a normal end, one
    of the processes a launcher started under it (torchrun, srun: every rank is past fairseq's last barrier)."""
    for token, path in _inherited().items():
        record = read_record(path) or {}
        if record.get("token") != token or not record.get("exec"):
            continue
        if ended_normally or (record.get("pid") == os.getpid() and record.get("host") == host()):
            remove_if_mine(path, token)


def keep_alive_inherited() -> Optional[threading.Thread]:
    """Keep the heartbeat of the locks in ``TUPE_RUN_LOCKS`` going from this process (the exec'd fairseq-train)."""
    return keep_alive(_inherited) if _inherited() else None
