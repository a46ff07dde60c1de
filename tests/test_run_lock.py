"""One run per folder (tupe_common/lock.py): the lock's rules in this process (fast). Two real pretrain.sh into one
SAVE_DIR at once (the second refused at once, exit 2, one line naming the holder's pid and host; no lock left after
the first): tests/test_stop_signals.py, on the pre-training its one-process stop test runs. Fine-tuning's:
tests/test_glue_scripts.py; the study's: tests/test_study.py."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tupe_common import lock


def dead_pid() -> int:
    """A pid no process has: above the kernel's largest."""
    with open("/proc/sys/kernel/pid_max", encoding="utf-8") as f:
        return int(f.read()) + 1


def plant(path: Path, **record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"started": "2026-01-01T00:00:00Z", "token": "planted", **record}))


# ---- the rules, in this process ---------------------------------------------------------------------------------


def test_a_process_never_refuses_itself_and_release_removes_the_lock(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    outer = lock.hold(str(path), "test")
    record = json.loads(path.read_text())
    assert record["pid"] == os.getpid() and record["host"] == lock.host() and record["started"].endswith("Z")
    assert json.loads(os.environ[lock.ENV])[record["token"]] == str(path)  # what its children inherit
    with lock.hold(str(path), "test"):  # the study's part, then pre-training into the same folder
        pass
    assert path.exists()  # the inner release leaves the outer's lock
    outer.release()
    assert not path.exists() and record["token"] not in os.environ.get(lock.ENV, "")


def test_a_child_of_the_holder_is_let_through(tmp_path, monkeypatch):
    path = tmp_path / lock.LOCK_NAME
    plant(path, pid=1, host=lock.host())  # pid 1 runs: a live holder
    monkeypatch.setenv(lock.ENV, json.dumps({"planted": str(path)}))  # its token, as a child of it inherits
    held = lock.hold(str(path), "test")
    held.release()
    assert path.exists()  # the holder's, not the child's, to remove


def test_a_live_holder_refuses_and_a_gone_one_is_taken_over_with_a_line(tmp_path):
    path, said = tmp_path / lock.LOCK_NAME, []
    plant(path, pid=1, host=lock.host())
    with pytest.raises(lock.LockHeld, match=rf"is in use by another run \(pid 1 on {lock.host()}, .*lock {path}\): "
                                            "wait for it to end or stop it, or use another SAVE_DIR; if that run"):
        lock.hold(str(path), "test", "SAVE_DIR", said.append)
    gone = dead_pid()
    plant(path, pid=gone, host=lock.host())
    lock.hold(str(path), "test", say=said.append).release()
    assert said == [f"taking over {path}: the run that held it (pid {gone} on {lock.host()}, started "
                    f"2026-01-01T00:00:00Z, heartbeat 0 s ago) is gone: pid {gone} is not running on this host"]
    assert not path.exists()


def test_the_early_check_refuses_a_live_holder_only_and_takes_nothing(tmp_path, monkeypatch):
    """refuse_if_held (what pre-training asks before its slow start): LockHeld for a live holder, with hold's
    line; nothing for no lock, a gone holder or this process's run; never a lock made or taken over."""
    path = tmp_path / "save" / lock.LOCK_NAME
    lock.refuse_if_held(str(path), "SAVE_DIR")
    assert not path.parent.exists()  # no lock, no folder made
    path.parent.mkdir()
    plant(path, pid=1, host=lock.host())
    with pytest.raises(lock.LockHeld) as early:
        lock.refuse_if_held(str(path), "SAVE_DIR")
    with pytest.raises(lock.LockHeld) as late:
        lock.hold(str(path), "test", "SAVE_DIR")
    assert str(early.value) == str(late.value) and "or use another SAVE_DIR" in str(early.value)
    monkeypatch.setenv(lock.ENV, json.dumps({"planted": str(path)}))  # a child of the holder
    lock.refuse_if_held(str(path), "SAVE_DIR")
    monkeypatch.delenv(lock.ENV)
    plant(path, pid=dead_pid(), host=lock.host())
    before = path.read_text()
    lock.refuse_if_held(str(path), "SAVE_DIR")
    assert path.read_text() == before  # a gone holder's lock is left for hold to take over, with its line


def test_another_hosts_lock_is_judged_by_its_heartbeat(tmp_path):
    """A pid of another host cannot be checked: its lock holds while its heartbeat is fresh, and is taken over
    once it is older than STALE_S (10 minutes)."""
    path, said = tmp_path / lock.LOCK_NAME, []
    plant(path, pid=os.getpid(), host="another-node")  # the same pid on another host is another process
    with pytest.raises(lock.LockHeld, match=f"pid {os.getpid()} on another-node"):
        lock.hold(str(path), "test", say=said.append)
    old = time.time() - lock.STALE_S - 60
    os.utime(path, (old, old))
    lock.hold(str(path), "test", say=said.append).release()
    assert len(said) == 1 and "is gone: its heartbeat is 11 minutes old, over the 10 minutes of a live run" in said[0]


def test_the_heartbeat_thread_touches_the_lock(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    with lock.hold(str(path), "test") as held:
        old = time.time() - 100
        os.utime(path, (old, old))
        lock.keep_alive(lambda: {held.token: held.path}, every=0.05)
        deadline = time.time() + 5
        while path.stat().st_mtime < old + 50 and time.time() < deadline:
            time.sleep(0.05)
        assert path.stat().st_mtime > old + 50


# Two pretrain.sh into one SAVE_DIR (the second refused while the first trains, the lock kept across the exec into
# fairseq-train, its heartbeat, a dead pid's lock taken over, the lock removed at the end): with the one-process stop
# in tests/test_stop_signals.py, test_sigterm_saves_the_update_it_finished_and_the_rerun_resumes_from_it (one
# pre-training for both).


def test_a_reused_pid_is_a_gone_holder(tmp_path):
    """The holder's pid runs again, but as another process (started at another time than the record's): the lock
    is taken over with a line; the same pid with its own start time holds."""
    path, said = tmp_path / lock.LOCK_NAME, []
    other = os.getppid()  # a live process that is not the holder whose start the record keeps
    started = lock.start_ticks(other)
    assert started is not None
    plant(path, pid=other, host=lock.host(), pid_start=started)
    with pytest.raises(lock.LockHeld):
        lock.hold(str(path), "test", say=said.append)
    plant(path, pid=other, host=lock.host(), pid_start=started + 1)  # the pid was reused since
    lock.hold(str(path), "test", say=said.append).release()
    assert said and said[0].endswith(f"is gone: pid {other} is now another process on this host (started after the "
                                     "lock was taken)"), said


def _take(path: str, start, results, refused) -> None:
    start.wait()
    try:
        held = lock.hold(path, "test", say=lambda line: None)
        results.put("held")
        deadline = time.monotonic() + 20
        while refused.value < 3 and time.monotonic() < deadline:  # hold it until the others have tried
            time.sleep(0.05)
        held.release()
    except lock.LockHeld:
        results.put("refused")
        with refused.get_lock():
            refused.value += 1


def test_runs_taking_one_lock_at_the_same_moment_get_it_once(tmp_path, starts_process):
    """Four processes take one folder's lock at the same moment (a barrier): exactly one holds it, the others are
    refused (none takes over a live holder's lock), and nothing is left after the holder's release."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    start, results, refused = ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
    path = str(tmp_path / lock.LOCK_NAME)
    procs = [ctx.Process(target=_take, args=(path, start, results, refused)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(30)
    said = sorted(results.get(timeout=5) for _ in procs)
    assert said == ["held", "refused", "refused", "refused"], said
    assert not os.path.exists(path)
