"""ELECTRA's training step makes the host wait for the device no more than fairseq's MLM step: the ops that
force a device-to-host sync on a GPU (bench/sync_ops.py), recorded on CPU in one real ``task.train_step``;
the recorder itself; ``bench/sync_count.py``."""
from __future__ import annotations

import argparse
import inspect
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from fairseq import utils
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.data import indexed_dataset
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))  # bench/sync_ops.py, which bench/sync_count.py uses on a GPU
from sync_ops import SyncOps, record  # noqa: E402
from tupe_plugin.build_task import numbered_dictionary  # noqa: E402
from tupe_plugin.criterions.electra import ElectraCriterion  # noqa: E402
from tupe_plugin.tasks.electra import ElectraConfig, ElectraTask  # noqa: E402

ELECTRA_FILES = ("tupe_plugin/models/electra.py", "tupe_plugin/models/electra_checkpoint.py",
                 "tupe_plugin/tasks/electra.py", "tupe_plugin/criterions/electra.py")
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


# ---- one real training step of each objective ------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A fairseq data folder made in-process: the tests' 44-symbol dictionary, 40 lines of 6 to 40 tokens."""
    d = tmp_path_factory.mktemp("syncs")
    dictionary = numbered_dictionary(44)
    dictionary.save(str(d / "dict.txt"))
    g = torch.Generator().manual_seed(0)
    builder = indexed_dataset.make_builder(str(d / "train.bin"), impl="mmap", vocab_size=len(dictionary) + 1)
    for _ in range(40):
        n = int(torch.randint(5, 40, (1,), generator=g))
        builder.add_item(torch.cat([torch.randint(4, 44, (n,), generator=g), torch.tensor([dictionary.eos()])]))
    builder.finalize(str(d / "train.idx"))
    return d


def setup(objective: str, data: Path, arch: str):
    """(task, model, criterion, optimizer, batch of 8 padded sequences) as fairseq-train builds them."""
    cfg = dict(data=str(data), tokens_per_sample=64, sample_break_mode="complete", seed=1,
               leave_unmasked_prob=0.15, random_token_prob=0.0)
    if objective == "electra":
        task = ElectraTask.setup_task(ElectraConfig(**cfg))
    else:
        task = MaskedLMTask.setup_task(MaskedLMConfig(**cfg))
    task.load_dataset("train")
    args = argparse.Namespace(arch=arch, max_positions=64)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    model = task.build_model(args)
    criterion = ElectraCriterion(task) if objective == "electra" else MaskedLmLoss(MaskedLmConfig(tpu=False), task)
    optimizer = FairseqAdam(FairseqAdamConfig(lr=[1e-3], adam_betas="(0.9, 0.98)"), list(model.parameters()))
    dataset = task.datasets["train"]
    batch = dataset.collater([dataset[i] for i in range(8)])
    pad = task.source_dictionary.pad()
    assert batch["net_input"]["src_tokens"].eq(pad).any()  # padded: the encoder's padding path runs too
    return task, model, criterion, optimizer, batch


def step_syncs(objective: str, data: Path, arch: str) -> SyncOps:
    task, model, criterion, optimizer, batch = setup(objective, data, arch)
    with SyncOps() as syncs:
        loss, _, _ = task.train_step(batch, model, criterion, optimizer, update_num=0)
    assert torch.isfinite(loss) and any(p.grad is not None for p in model.parameters())
    return syncs


@pytest.mark.parametrize("arch", ["tupe_r_tiny", "bert_a_tiny", "pam_sequential_tiny"])
def test_the_electra_step_syncs_nowhere_the_mlm_step_does_not(data, arch):
    """Generator, sampling, discriminator, loss, metrics and backward: every sync-forcing op is one the MLM
    step of the same encoder makes at the same line (the encoder's own), no more often (the generator and the
    discriminator share one padding check), none in ELECTRA's code."""
    electra, mlm = step_syncs("electra", data, arch), step_syncs("mlm", data, arch)
    assert any(op == "aten.index.Tensor[bool]" and site.startswith("fairseq/models/roberta/model.py:")
               for op, site in mlm.kinds())  # the recorder ran: RobertaLMHead's features[masked_tokens]
    assert not [o for o in electra.ops if o.site.split(":")[0].removeprefix("backward of ") in ELECTRA_FILES], electra.ops
    assert electra.kinds() <= mlm.kinds(), sorted(electra.kinds() - mlm.kinds())
    assert not electra.counts() - mlm.counts(), (electra.counts(), mlm.counts())


def test_the_task_batches_carry_the_masked_positions_and_the_model_reads_them_as_the_mask(data):
    task, model, criterion, _, batch = setup("electra", data, "tupe_r_tiny")
    target, pad = batch["target"], task.source_dictionary.pad()
    positions = batch["masked_positions"]
    assert positions.equal(torch.nonzero(target.ne(pad).flatten()).squeeze(1)) and len(positions) > 8
    model.eval()
    outputs = []
    for sample in (batch, {k: v for k, v in batch.items() if k != "masked_positions"}):  # given, computed
        torch.manual_seed(5)
        outputs.append(criterion(model, sample))
    (loss, size, log), (loss2, size2, log2) = outputs
    assert size == size2 == len(positions) and isinstance(size, int)
    torch.testing.assert_close(loss, loss2, rtol=0, atol=0)
    assert {k: float(v) for k, v in log.items()} == {k: float(v) for k, v in log2.items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: counts the syncs with CUDA's sync debug mode")
def test_cuda_electra_step_syncs_no_more_than_the_mlm_step(data):
    """On the GPU (make gpu-check): CUDA's own count of the syncs of one step (after a warm-up step)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from sync_count import sync_count

    def count(objective: str):
        task, model, criterion, optimizer, batch = setup(objective, data, "tupe_r_tiny")
        model.cuda()
        batch = utils.move_to_cuda(batch)
        task.train_step(batch, model, criterion, optimizer, update_num=0)  # warm-up: cuBLAS set-up
        return sync_count(lambda: task.train_step(batch, model, criterion, optimizer, update_num=1), cuda=True)

    electra, mlm = count("electra"), count("mlm")
    assert mlm.count >= 3, mlm  # the LM head's and the loss's boolean indexing, and its backward
    assert not [s for s in electra.sites if s.split(":")[0].endswith(ELECTRA_FILES)], electra
    assert not Counter(electra.sites) - Counter(mlm.sites), (electra, mlm)


@pytest.mark.parametrize("refused", [True, False])
def test_the_shared_padding_check_keeps_the_left_padding_rule(data, monkeypatch, refused):
    """The one padding check of both encoders keeps the encoder's rule: a left-padded batch of a variant with an
    encoding that declares it cannot take left padding is refused before the generator runs; TUPE-R itself reads
    each token's position, so the batch runs, both encoders with the positions of the one check."""
    from tupe_core.base import REFUSED
    from tupe_core.encoder_stack import LeftPaddingError
    from tupe_core.tupe import Tupe

    if refused:
        monkeypatch.setattr(Tupe, "left_padding", REFUSED)
    task, model, criterion, _, batch = setup("electra", data, "tupe_r_tiny")
    pad = task.source_dictionary.pad()
    tokens, target = batch["net_input"]["src_tokens"], batch["target"]
    shifts = tokens.eq(pad).sum(dim=1)  # right padding moved to the left, row by row
    left = {"src_tokens": torch.stack([t.roll(int(s)) for t, s in zip(tokens, shifts)]),
            "target": torch.stack([t.roll(int(s)) for t, s in zip(target, shifts)])}
    sample = {**batch, "net_input": {**batch["net_input"], "src_tokens": left["src_tokens"]}, "target": left["target"]}
    del sample["masked_positions"]
    calls = []
    model.generator.register_forward_pre_hook(lambda *_: calls.append(1))
    if refused:
        with pytest.raises(LeftPaddingError, match="left-padded input"):
            criterion(model, sample)
        assert not calls
    else:
        seen = []  # the position_ids each encoder's attention term gets
        for encoder in (model.generator.sentence_encoder, model.encoder.sentence_encoder):
            encoder.positions.register_forward_pre_hook(lambda _, args: seen.append(args[1:]))
        criterion(model, sample)
        assert calls == [1] and len(seen) == 2 and seen[0][0] is seen[1][0]  # one check, its positions twice
        assert torch.equal(seen[0][0], left["src_tokens"].ne(pad).cumsum(1).sub(1).clamp(min=0))
        calls.clear()
    criterion(model, batch)  # the right-padded batch runs
    assert calls == [1]


def test_reduce_metrics_reads_the_device_once_and_sums_every_batch():
    """After the update, the logged sums of two batches' device tensors come to the host in one copy (not one
    per count), and each metric is its plain formula."""
    import math

    from fairseq.logging import metrics

    from tupe_plugin.criterions.electra import COUNTS

    def batch(masked: int, tokens: int, loss: float, gen: float, disc: float, counts):
        return {"loss": torch.tensor(loss), "gen_loss": torch.tensor(gen), "disc_loss": torch.tensor(disc),
                "_masked": masked, "_tokens": torch.tensor(tokens),
                **{k: torch.tensor(c) for k, c in zip(COUNTS[2:], counts)}}

    logs = [batch(6, 40, 30.0, 12.0, 0.5, (3, 36, 2, 4, 5)), batch(4, 30, 20.0, 8.0, 0.25, (1, 27, 1, 2, 3))]
    with metrics.aggregate() as agg, SyncOps() as syncs:
        ElectraCriterion.reduce_metrics(logs)
    assert [o.op for o in syncs.ops] == ["Tensor.tolist"], syncs.ops
    m, ln2 = agg.get_smoothed_values(), math.log(2)
    assert m["loss"] == round(50.0 / 10 / ln2, 4) and m["gen_loss"] == round(20.0 / 10 / ln2, 4)
    assert m["disc_loss"] == round(0.75 / 70 / ln2, 4)
    assert m["gen_acc"] == round(100 * 4 / 10, 2) and m["disc_acc"] == round(100 * 63 / 70, 2)
    assert m["disc_precision"] == round(100 * 3 / 6, 2) and m["disc_recall"] == round(100 * 3 / 8, 2)
    assert m["replace_rate"] == round(100 * 8 / 70, 3)
