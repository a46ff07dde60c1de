"""Count the device-to-host synchronisations of one call, e.g. one training step, for the GPU check.

    sys.path.insert(0, "bench"); from sync_count import sync_count
    syncs = sync_count(lambda: task.train_step(sample, model, criterion, optimizer, 0))
    syncs.count, syncs.sites  # e.g. 2, ["tupe_plugin/modules/encoder.py:43", ...]

On CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronising CUDA call warn ("called a
synchronizing CUDA operation"; warnings of the backward pass are replayed when it returns); each warning is
one sync, its site the Python line that made it (for the backward: the ``backward()`` call). Without CUDA,
the ops that would sync on a GPU, as bench/sync_ops.py records them (copies to the host excepted).
Run the call once before counting: the first call of some kernels syncs while it sets up (cuBLAS, autotuning).
"""
from __future__ import annotations

import warnings
from typing import Callable, List, NamedTuple, Optional

import torch

SYNC_WARNING = "called a synchronizing CUDA operation"


class SyncCount(NamedTuple):
    count: int
    sites: List[str]  # one per sync, "path:line"
    how: str  # "cuda sync debug mode" or "sync-forcing ops recorded on CPU"


def sync_count(step_fn: Callable[[], object], cuda: Optional[bool] = None) -> SyncCount:
    """The syncs of one ``step_fn()``: counted by CUDA when ``cuda`` (default: when CUDA is available),
    else the sync-forcing ops it runs, recorded by bench/sync_ops.py."""
    if cuda if cuda is not None else torch.cuda.is_available():
        return _cuda_syncs(step_fn)
    return _recorded_syncs(step_fn)


def _cuda_syncs(step_fn) -> SyncCount:
    torch.cuda.synchronize()  # before the mode: this one is not the step's
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every occurrence, not once per line
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step_fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    sites = [f"{w.filename}:{w.lineno}" for w in caught if SYNC_WARNING in str(w.message)]
    return SyncCount(len(sites), sites, "cuda sync debug mode")


def _recorded_syncs(step_fn) -> SyncCount:
    from sync_ops import SyncOps  # bench/sync_ops.py: this folder is on the path (python bench/X.py, or the tests')

    with SyncOps() as syncs:
        step_fn()
    return SyncCount(len(syncs.ops), [f"{o.site} ({o.op})" for o in syncs.ops], "sync-forcing ops recorded on CPU")
