"""tupe_common.ordered_pool: results in the items' order whatever order the workers finish in, an error or a dead
worker raised in the caller, and a stop that ends every worker at once (the binarizers' stop tests walk it with
real signals: tests/test_c4_pipeline.py, tests/test_glue_preprocess.py)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tupe_common.ordered_pool import OrderedPool, WorkerDied

pytestmark = pytest.mark.usefixtures("starts_process")  # the workers are processes


def slow_square(x: int) -> int:
    time.sleep(0.02 * (x % 3))  # items finish out of order
    if x == -1:
        raise ValueError("no negative items")
    if x == -2:
        os.kill(os.getpid(), signal.SIGKILL)  # a worker the out-of-memory killer ends
    return x * x


def pid(_: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def test_results_come_in_the_items_order_and_the_workers_share_the_work():
    with OrderedPool(3, slow_square) as pool:
        assert list(pool.imap(range(20), window=5)) == [x * x for x in range(20)]
    with OrderedPool(2, pid) as pool:
        assert len(set(pool.imap(range(8)))) == 2


def test_an_error_in_the_function_is_raised_in_the_caller_and_the_workers_end():
    pool = OrderedPool(2, slow_square)
    with pytest.raises(ValueError, match="no negative items"), pool:
        list(pool.imap([1, 2, -1, 4]))
    assert all(p.exitcode is not None for p in pool._procs)


def slow_first(x: int) -> int:
    time.sleep(0.3 if x == 1 else 0)
    if x < 0:
        raise ValueError(f"item {x}")
    return x


def test_an_error_is_raised_in_its_items_turn():
    """Item 1 (0.3 s) is given before item -1's error (at once, in the other worker), so the caller knows which item
    failed (the binarizer names its file and line)."""
    given = []
    with pytest.raises(ValueError, match="item -1"), OrderedPool(2, slow_first) as pool:
        for result in pool.imap([1, -1, 2]):
            given.append(result)
    assert given == [1]


def test_a_worker_that_died_is_named_and_a_stop_kills_the_rest_at_once():
    pool = OrderedPool(2, slow_square)
    with pytest.raises(WorkerDied, match=r"a worker process \(pid \d+\) ended with exit code -9 while it worked "
                                         r"\(-9: killed, .*\); rerun the same command to resume"):
        with pool:
            list(pool.imap([1, -2, 3]))
    assert all(p.exitcode is not None for p in pool._procs)
    busy = OrderedPool(2, time.sleep)
    results = busy.imap([300, 300])
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with busy:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            previous = signal.signal(signal.SIGALRM, signal.default_int_handler)  # the stop, mid-wait
            try:
                next(results)
            finally:
                signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 10 and [p.exitcode for p in busy._procs] == [-9, -9]
