"""The longer-inputs stage (study.longer_inputs) on a tiny ALiBi model pre-trained by the real fairseq-train:
its loss at T is the validation loss fairseq logged for the checkpoint (the same blocks, batches and masks,
here a subset of the split: --max-valid-steps), and its 2T / 4T blocks are fairseq's own blocks of whole
sentences, as long as whole sentences allow, carrying the very tokens masked at T."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import PRETRAIN_ARGS, run

pytestmark = pytest.mark.usefixtures("starts_process")  # every test here starts a process

T = 32


@pytest.fixture(scope="module")
def alibi_run(lm_bin, tmp_path_factory) -> Path:
    """ALiBi (measured beyond T) pre-trained with blocks of T = 32 and positions for 4T, validated on the first
    2 + 1 batches of 4 blocks (fairseq stops after max-valid-steps + 1) every 10 updates."""
    save = tmp_path_factory.mktemp("longer")
    p = run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "alibi_tiny", "--tokens-per-sample", str(T),
             "--max-positions", str(4 * T), "--max-update", "20", "--save-interval-updates", "10",
             "--validate-interval-updates", "10", "--batch-size-valid", "4", "--max-valid-steps", "2",
             "--save-dir", str(save)])
    (save / "train.log").write_text(p.stdout + p.stderr)
    return save


def last_logged_valid_loss(log: str) -> float:
    return float(re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", log)[-1])


@pytest.fixture(scope="module")
def measured(alibi_run, lm_bin) -> dict:
    from study.longer_inputs import measure

    return measure(str(alibi_run / "checkpoint_last.pt"), str(lm_bin), [T, 2 * T, 4 * T],
                   str(alibi_run / "longer" / "seed1.json"))


def test_loss_at_t_is_the_logged_validation_loss(alibi_run, measured):
    logged = last_logged_valid_loss((alibi_run / "train.log").read_text())
    at_t = measured["lengths"][str(T)]
    # 3 decimals in the log; the old stage (one stream cut into blocks) was 0.06-0.35 bits off
    assert abs(at_t - logged) < 0.002, (at_t, logged)
    assert measured["logged_valid_loss"] == pytest.approx(logged, abs=1e-9)  # the checkpoint's val_loss
    assert measured["difference_from_logged"] == pytest.approx(at_t - logged, abs=1e-12)
    assert measured["valid_batches"] == 3 and measured["blocks"][str(T)] == 12  # (2 + 1) batches of 4 blocks
    assert measured["task"]["tokens_per_sample"] == T and measured["task"]["sample_break_mode"] == "complete"
    assert measured["task"]["mask_prob"] == 0.15 and measured["task"]["seed"] == 1
    assert measured["not_beyond"] is None and measured["positions"] == 4 * T
    # the same targets at every length: a loss of the same size, and a number at each
    assert all(abs(measured["lengths"][str(L)] - at_t) < 1.0 for L in (2 * T, 4 * T))
    assert 0 < measured["masked_bos"] < measured["masked"]
    assert json.loads((alibi_run / "longer" / "seed1.json").read_text()) == measured
    # block by block (study.valid_se): the scored blocks in the split's order, summing back to the logged loss
    per = json.loads((alibi_run / "longer" / "seed1.blocks.json").read_text())
    assert per["block"] == sorted(per["block"]) and len(per["block"]) == 12 and sum(per["masked"]) == measured["masked"]
    assert sum(per["bits"]) / sum(per["masked"]) == pytest.approx(at_t, abs=1e-5)
    assert measured["per_block_total_bits"] == pytest.approx(at_t, abs=1e-5)  # summed in another order
    assert abs(measured["per_block_total_bits"] - logged) < 0.002


def test_longer_blocks_are_whole_sentences_carrying_the_masks_of_t(alibi_run, lm_bin):
    from fairseq.data import data_utils

    from study.longer_inputs import block_slices, longer_blocks, masked_lm_task, pretraining_validation
    from study.valid_se import count_blocks
    from tupe_plugin.analysis.attention_maps import load_hub

    hub = load_hub(str(alibi_run / "checkpoint_last.pt"), str(lm_bin))
    cfg, d = hub.cfg, hub.task.source_dictionary
    val = pretraining_validation(cfg, masked_lm_task(cfg, d, T), hub.model.max_positions())
    split = data_utils.load_indexed_dataset(str(lm_bin / "valid"), d)
    sentences = np.array(split.sizes, dtype=np.int64)  # a copy: the sizes are a view of the split's open index
    ends = np.concatenate([[0], np.cumsum(sentences)])  # where each sentence starts and ends in the split
    n = int(ends[-1])
    assert len(val.inputs) == n

    # at T: the stream holds exactly what fairseq's batches fed the model (epoch 1's masks), and some is masked
    slices_t = block_slices(masked_lm_task(cfg, d, T))
    counted = count_blocks(str(lm_bin), T)  # what the study's prep writes to OUT/c4/valid_blocks.json
    assert counted["blocks"] == len(slices_t) and counted["tokens"] == n and counted["sentences"] == len(sentences)
    assert counted["masked_estimate"] == round(0.15 * (n + len(slices_t)))
    for b in val.batches:
        for row, i in enumerate(b["id"].tolist()):
            s, e = slices_t[i]
            assert b["net_input"]["src_tokens"][row, 1:e - s + 1].tolist() == val.inputs[s:e].tolist()
            assert b["target"][row, 1:e - s + 1].tolist() == val.targets[s:e].tolist()
    assert (val.inputs == d.index("<mask>")).mean() > 0.05

    previous_longest = T
    for L in (2 * T, 4 * T):
        slices = block_slices(masked_lm_task(cfg, d, L))
        sizes = slices[:, 1] - slices[:, 0]
        assert slices[0, 0] == 0 and slices[-1, 1] == n and (slices[1:, 0] == slices[:-1, 1]).all()  # all, in order
        assert set(slices.flatten().tolist()) <= set(ends.tolist())  # whole sentences
        assert sizes.max() <= L - 1  # after <s>, at most L tokens
        # complete packing: a block ends only where its next sentence would not fit
        first_of_next = {int(s): int(ends[np.searchsorted(ends, s) + 1] - s) for s in slices[1:, 0]}
        assert all(size + first_of_next[int(e)] > L - 1 for size, e in zip(sizes[:-1], slices[:-1, 1]))
        assert sizes.max() > previous_longest - 1  # really longer blocks than the previous length's
        previous_longest = L

        blocks = longer_blocks(val, slices, d.bos(), d.pad())
        assert all(x[0] == d.bos() and len(x) == len(y) <= L for x, y in blocks)
        got = np.concatenate([x[1:] for x, _ in blocks]), np.concatenate([y[1:] for _, y in blocks])
        scored = val.targets != d.pad()
        # the blocks run at L hold every target of T, read as at T, and no other target
        assert sum(int((y != d.pad()).sum()) for _, y in blocks) == int(scored.sum())
        held = np.concatenate([np.arange(s, e) for s, e in slices if scored[s:e].any()])
        assert got[0].tolist() == val.inputs[held].tolist() and got[1].tolist() == val.targets[held].tolist()
