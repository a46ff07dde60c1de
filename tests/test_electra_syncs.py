"""The recorder of the ops that force a device-to-host sync on a GPU (tests/sync_ops.py) can fail, and
``bench/sync_count.py`` counts what it records."""
from __future__ import annotations

import inspect
import sys

import pytest
import torch

from conftest import ROOT
from sync_ops import SyncOps, record

HERE = "tests/test_electra_syncs.py:"


def line_after() -> str:
    """``HERE`` with the number of the caller's next line."""
    return HERE + str(inspect.currentframe().f_back.f_lineno + 1)


# ---- the recorder can fail ------------------------------------------------------------------------------

x = torch.randn(4, 3)
mask = torch.tensor([True, False, True, True])
rows = torch.tensor([0, 2, 3])


@pytest.mark.parametrize("fn, ops", [
    (lambda: x.sum().item(), ["aten._local_scalar_dense.default"]),
    (lambda: bool(mask.any()), ["aten._local_scalar_dense.default"]),  # `if tensor:`
    (lambda: int(mask.sum()), ["aten._local_scalar_dense.default"]),
    (lambda: mask.sum().tolist(), ["Tensor.tolist"]),  # no aten op on CPU: seen by the function mode
    (lambda: x[mask], ["aten.index.Tensor[bool]"]),
    (lambda: x.clone().__setitem__(mask, 0.0), ["aten.index_put_.default[bool]"]),
    (lambda: mask.nonzero(), ["aten.nonzero.default"]),
    (lambda: torch.masked_select(x, mask[:, None]), ["aten.masked_select.default"]),
    (lambda: torch.unique(rows), ["aten._unique2.default"]),
    (lambda: rows.repeat_interleave(rows), ["aten.repeat_interleave.Tensor[no output_size]"]),
    (lambda: torch.multinomial(x.softmax(-1), 1), ["aten.multinomial.default"]),
    (lambda: torch.equal(x, x), ["aten.equal.default"]),
    # what the ELECTRA step uses instead: sizes known on the host
    (lambda: x.index_select(0, rows), []),
    (lambda: x[rows], []),  # integer indices
    (lambda: x.flatten().scatter(0, rows, x[0]), []),
    (lambda: x.masked_fill(mask[:, None], 0.0), []),
    (lambda: torch.nonzero_static(mask, size=4), []),
    (lambda: rows.repeat_interleave(rows, output_size=5), []),
    (lambda: torch.searchsorted(x.cumsum(-1), x[:, :1].contiguous()), []),
    (lambda: (x.sum(), mask.sum(), x.argmax(-1)), []),  # reductions stay on the device
])
def test_the_recorder_names_the_ops_that_sync(fn, ops):
    got = record(fn)
    assert [o.op for o in got] == ops
    assert all(o.site.startswith(HERE) for o in got), got  # the line of the lambda above


def test_the_recorder_gives_the_backward_of_a_boolean_index_its_forward_line():
    w = torch.randn(4, 3, requires_grad=True)
    with SyncOps() as syncs:
        forward = line_after()
        y = w[mask]
        y.sum().backward()
    assert [(o.op, o.site) for o in syncs.ops] == [
        ("aten.index.Tensor[bool]", forward), ("aten.index_put.default[bool]", "backward of " + forward)]


def test_sync_count_without_cuda_counts_the_recorded_ops():
    sys.path.insert(0, str(ROOT / "bench"))
    from sync_count import sync_count

    two = sync_count(lambda: (x.sum().item(), x[mask]), cuda=False)
    assert two.count == 2 and len(two.sites) == 2 and two.how == "sync-forcing ops recorded on CPU"
    assert sync_count(lambda: x.index_select(0, rows), cuda=False).count == 0
