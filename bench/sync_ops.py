"""Which ops of some code would make the host wait for the GPU (a device-to-host synchronisation), found on CPU.

On CUDA the host queues kernels and runs ahead of the device, until it needs something only the device knows:
a value (``.item()``, ``if tensor:``) or the size of a result that depends on values (``x[mask]``). Then it
waits for every queued kernel, and the device idles while the host queues the next ones. On CPU nothing waits,
but the same ops run, so a dispatch mode can name them:

    with SyncOps() as syncs:
        step()
    syncs.ops  # [SyncOp(op="aten.index.Tensor[bool]", site="tupe_plugin/criterions/electra.py:52"), ...]

Each op is named with its site: the innermost frame outside torch, and for an op of the backward pass the
forward call that made its graph node (anomaly mode keeps that trace; its NaN checks stay off). What this
cannot see: copies to the host (``.cpu()``, ``.to("cpu")``: no copy on CPU) and syncs that depend on where a
tensor lives; ``bench/sync_count.py`` counts every sync with CUDA's own sync debug mode on a GPU.
"""
from __future__ import annotations

import os
import traceback
import warnings
from collections import Counter
from typing import Iterable, List, NamedTuple, Optional, Set, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# Ops (overload packets) that sync on CUDA whatever their arguments, and why.
ALWAYS_SYNC = {
    aten._local_scalar_dense: "the host reads a value: .item(), bool(t) (`if t:`), int(t), float(t)",
    aten.nonzero: "output size = number of nonzeros (nonzero_static, with a fixed size, does not sync)",
    aten.masked_select: "output size = number of selected elements",
    aten._unique: "output size = number of distinct values",
    aten._unique2: "output size = number of distinct values",
    aten.unique_dim: "output size = number of distinct values",
    aten.unique_consecutive: "output size = number of runs",
    aten.unique_dim_consecutive: "output size = number of runs",
    aten.bincount: "output size = largest value + 1",
    aten.equal: "returns a Python bool",
    # the CUDA kernel checks the probabilities (no inf, nan or negative, some row sums to 0) with .item()
    # (ATen/native/Distributions.cpp), below the dispatcher where this mode cannot see it
    aten.multinomial: "its CUDA kernel reads the probability checks with .item()",
}
# repeat_interleave with a tensor of repeats (not the int overload): output size = sum of the repeats, unless
# output_size is given.
REPEAT_INTERLEAVE = aten.repeat_interleave
# Indexing with a bool/uint8 mask (x[mask], x[mask] = v, and their backward): the kernel turns the mask into
# positions with nonzero, whose output size is the number of True entries. (CUDA turns ``x[mask] = 0`` with a
# Python number into masked_fill, without a sync; it is recorded all the same: write masked_fill.)
INDEXING = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}
# Tensor methods that read a CPU tensor's memory with no aten op at all (so the dispatch mode does not see
# them; a function mode does): on a GPU tensor they copy it to the host first.
HOST_READS = {"tolist", "numpy"}

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_THIS)) + os.sep


class SyncOp(NamedTuple):
    op: str  # e.g. "aten.nonzero.default", "aten.index.Tensor[bool]", "Tensor.tolist"
    site: str  # "path:line" of the code that asked for it (repository-relative, or from site-packages)


def _site(frames: Iterable[Tuple[str, int]]) -> str:
    """The innermost frame that is neither torch nor this file, as ``path:line``."""
    for filename, line in reversed(list(frames)):
        path = os.path.abspath(filename)
        if path.startswith(_TORCH_DIR) or path == _THIS:
            continue
        if "site-packages" + os.sep in path:  # first: the venv may live inside the repository
            path = path.split("site-packages" + os.sep, 1)[1]
        elif path.startswith(_ROOT):
            path = path[len(_ROOT):]
        return f"{path}:{line}"
    return "?"


def _stack_site() -> str:
    return _site((f.filename, f.lineno) for f in traceback.extract_stack())


def _forward_site(node) -> Optional[str]:
    """The forward call that created the backward ``node`` (from anomaly mode's trace), if recorded."""
    try:
        trace = node.metadata.get("traceback_")
    except (AttributeError, RuntimeError):
        return None
    if not trace:
        return None
    frames = []
    for entry in trace:  # traceback.format_stack() entries: '  File "path", line N, in fn\n    code\n'
        head = entry.strip().split("\n", 1)[0]
        if head.startswith('File "'):
            filename, rest = head[len('File "'):].split('", line ', 1)
            frames.append((filename, int(rest.split(",", 1)[0])))
    return _site(frames)


def _has_bool_index(indices) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def sync_reason(func, args, kwargs) -> Optional[str]:
    """The name under which ``func`` (an aten op overload called with ``args``) is recorded, or None when
    it does not sync on CUDA."""
    packet = func.overloadpacket
    if packet in ALWAYS_SYNC:
        return str(func)
    if packet is REPEAT_INTERLEAVE and func._overloadname != "self_int" and kwargs.get("output_size") is None:
        return f"{func}[no output_size]"
    if packet in INDEXING and len(args) > 1 and _has_bool_index(args[1]):
        return f"{func}[bool]"
    return None


class _DispatchRecorder(TorchDispatchMode):
    def __init__(self, ops: List[SyncOp]):
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = sync_reason(func, args, kwargs)
        if name is not None:
            node = torch._C._current_autograd_node()  # not None inside a backward pass
            site = _forward_site(node) if node is not None else None
            self.ops.append(SyncOp(name, f"backward of {site}" if site else _stack_site()))
        return func(*args, **kwargs)


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self, ops: List[SyncOp]):
        super().__init__()
        self.ops = ops

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in HOST_READS and args and isinstance(args[0], torch.Tensor):
            self.ops.append(SyncOp(f"Tensor.{func.__name__}", _stack_site()))
        return func(*args, **(kwargs or {}))


class SyncOps:
    """Context manager: ``ops`` lists every sync-forcing op run inside it, in order, with its site."""

    def __init__(self):
        self.ops: List[SyncOp] = []
        self._modes = []

    def __enter__(self) -> "SyncOps":
        with warnings.catch_warnings():  # "Anomaly Detection has been enabled": on purpose, see above
            warnings.simplefilter("ignore")
            anomaly = torch.autograd.detect_anomaly(check_nan=False)  # keeps each node's forward trace
            self._modes = [anomaly, _FunctionRecorder(self.ops), _DispatchRecorder(self.ops)]
            for mode in self._modes:
                mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    def kinds(self) -> Set[Tuple[str, str]]:
        """The distinct (op, site) pairs."""
        return {(o.op, o.site) for o in self.ops}

    def counts(self) -> Counter:
        """How many times each (op, site) pair ran."""
        return Counter((o.op, o.site) for o in self.ops)


def record(fn, *args, **kwargs) -> List[SyncOp]:
    """The sync-forcing ops of one call ``fn(*args, **kwargs)``."""
    with SyncOps() as syncs:
        fn(*args, **kwargs)
    return syncs.ops
