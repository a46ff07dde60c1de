"""Exactly N validations per epoch (tupe_glue.fairseq_train), whatever the parity, --update-freq or processes.

The real fairseq-train runs that count validations are in test_glue_scripts.py (3 updates per epoch,
with and without --update-freq 2); here the arithmetic, on fairseq's own epoch iterator sharded over
two processes (docs/glue_protocol.md §4).
"""
import math

import pytest
from fairseq.data import ListDataset, iterators
from omegaconf import OmegaConf

from tupe_glue.fairseq_train import epoch_position, mid_epoch_updates, split_option


@pytest.mark.parametrize("updates,n,want", [(3, 2, [2]), (4, 2, [2]), (5, 2, [3]), (1, 2, []), (2, 2, [1]),
                                            (7, 3, [3, 5]), (6, 1, []), (2, 4, [1])])
def test_mid_epoch_points(updates, n, want):
    assert mid_epoch_updates(updates, n) == want
    assert len(mid_epoch_updates(updates, n)) + 1 == min(n, updates)  # + the end of the epoch


@pytest.mark.parametrize("update_freq,skip_remainder", [(1, False), (2, False), (3, True)])
def test_every_process_sees_the_same_points(update_freq, skip_remainder):
    """13 batches over 2 processes (7 each: one padded) grouped as fairseq's loop groups them."""
    cfg = OmegaConf.create({"optimization": {"update_freq": [update_freq], "skip_remainder_batch": skip_remainder}})
    seen = []
    for shard in (0, 1):
        epoch_itr = iterators.EpochBatchIterator(dataset=ListDataset(list(range(13))), collate_fn=lambda x: x,
                                                 batch_sampler=[[i] for i in range(13)], num_shards=2, shard_id=shard)
        itr = iterators.GroupedIterator(epoch_itr.next_epoch_itr(shuffle=False), update_freq,
                                        skip_remainder_batch=skip_remainder)
        positions = [epoch_position(cfg, epoch_itr) for _ in itr]
        seen.append(positions)
    rounding = math.floor if skip_remainder else math.ceil
    total = rounding(7 / update_freq)
    assert seen[0] == seen[1] == [(k, total) for k in range(1, total + 1)]


def test_option_parsing(capsys):
    assert split_option(["data", "--validations-per-epoch", "2", "--lr", "1e-5"]) == (2, False, ["data", "--lr", "1e-5"])
    assert split_option(["--validations-per-epoch=3", "--hydra", "data"]) == (3, True, ["data"])
    assert split_option(["data"]) == (1, False, ["data"])
    with pytest.raises(SystemExit) as e:  # a usage error: exit 2, one error line
        split_option(["--validations-per-epoch", "two"])
    assert e.value.code == 2 and "--validations-per-epoch needs a whole number >= 1, not 'two'" in capsys.readouterr().err


def test_hydra_glue_config_validates_twice_per_epoch(pretrained, cls_bin, tmp_path, starts_process):
    """fairseq-hydra-train's entry point through tupe_glue.fairseq_train --hydra, with the shipped glue.yaml."""
    import re

    from conftest import ROOT, run

    p = run(["python", "-m", "tupe_glue.fairseq_train", "--validations-per-epoch", "2", "--hydra",
             "--config-dir", str(ROOT / "tupe_pretrain/config/finetune"), "--config-name", "glue",
             f"task.data={cls_bin}", f"common.user_dir={ROOT / 'tupe_plugin'}",
             f"checkpoint.restore_file={pretrained / 'checkpoint_last.pt'}", "model._name=tupe_roberta_tiny",
             "model.max_positions=64", "task.max_positions=64", "common.fp16=false", "common.cpu=true",
             "optimization.max_epoch=2", "optimization.lr=[0.001]", "dataset.num_workers=0", "checkpoint.no_save=true",
             f"checkpoint.save_dir={tmp_path / 'ft'}", f"hydra.run.dir={tmp_path / 'out'}"], cwd=ROOT)
    log = p.stdout + p.stderr
    # 320 sentences / batch 32 = 10 updates per epoch: after update 5 of each epoch and at its end
    assert [int(u) for u in re.findall(r"valid on 'valid' subset .*num_updates (\d+)", log)] == [5, 10, 15, 20]
    assert re.search(r"valid on 'valid' subset \| .*accuracy [0-9.]+", log)


def test_an_over_long_training_example_stops_the_run_unless_skipped(cls_bin, tmp_path, starts_process):
    """fairseq's trainer dropped training examples longer than the model's positions with a warning only (validation
    refuses them): the fine-tuning silently saw fewer examples. Training now follows validation's rule."""
    import numpy as np
    from fairseq.data import data_utils

    from conftest import ROOT, run

    def sizes(split):  # the examples' lengths with the <s> that fine-tuning prepends
        dataset = data_utils.load_indexed_dataset(str(cls_bin / "input0" / split), None)  # held: sizes map its file
        return np.array(dataset.sizes) + 1

    train, limit = sizes("train"), int(sizes("valid").max())  # validation fits: only training has over-long ones
    over = int((train > limit).sum())
    assert 0 < over < len(train)
    cmd = ["python", "-m", "tupe_glue.fairseq_train", "--validations-per-epoch", "2", str(cls_bin),
           "--user-dir", str(ROOT / "tupe_plugin"), "--task", "sentence_prediction", "--num-classes", "2",
           "--init-token", "0", "--separator-token", "2", "--arch", "tupe_roberta_tiny", "--max-positions", str(limit),
           "--criterion", "sentence_prediction", "--batch-size", "32", "--max-epoch", "1", "--optimizer", "adam",
           "--lr", "1e-4", "--cpu", "--no-save", "--num-workers", "0", "--log-format", "simple",
           "--save-dir", str(tmp_path / "ft")]
    p = run(cmd, check=False)
    assert p.returncode != 0
    assert (f"OverLongInputs: {over} of the {len(train)} examples of train are longer than the model's positions "
            f"(max_positions={limit}") in p.stderr and "TRUNCATE=1" in p.stderr
    assert "num_updates" not in p.stdout + p.stderr  # refused before any update
    p = run(cmd + ["--skip-invalid-size-inputs-valid-test"])
    assert f"{over:,} samples have invalid sizes and will be skipped" in p.stdout + p.stderr
    assert "num_updates" in p.stdout + p.stderr
