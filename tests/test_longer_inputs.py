"""The longer-inputs stage (tupe_study.longer_inputs) on a tiny ALiBi model pre-trained by the real fairseq-train:
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
    from tupe_study.longer_inputs import measure

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
    # block by block (tupe_study.valid_se): the scored blocks in the split's order, summing back to the logged loss
    per = json.loads((alibi_run / "longer" / "seed1.blocks.json").read_text())
    assert per["block"] == sorted(per["block"]) and len(per["block"]) == 12 and sum(per["masked"]) == measured["masked"]
    assert sum(per["bits"]) / sum(per["masked"]) == pytest.approx(at_t, abs=1e-5)
    assert measured["per_block_total_bits"] == pytest.approx(at_t, abs=1e-5)  # summed in another order
    assert abs(measured["per_block_total_bits"] - logged) < 0.002


def test_longer_blocks_are_whole_sentences_carrying_the_masks_of_t(alibi_run, lm_bin):
    from fairseq.data import data_utils

    from tupe_study.longer_inputs import block_slices, longer_blocks, masked_lm_task, pretraining_validation
    from tupe_study.valid_se import count_blocks
    from tupe_tools.analysis.attention_maps import load_hub

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


@pytest.fixture(scope="module")
def rope_study(lm_bin, tmp_path_factory) -> Path:
    """A study folder (OUT) whose one finished pre-training is a tiny RoPE model pre-trained with blocks of T = 32 and
    positions for 4T (2 updates: the stage measures what it is given), its data the C4 step's layout."""
    out = tmp_path_factory.mktemp("rope_study") / "study"
    save = out / "pretrain" / "rope" / "seed1"
    run(["fairseq-train", str(lm_bin), *PRETRAIN_ARGS, "--arch", "rope_tiny", "--tokens-per-sample", str(T),
         "--max-positions", str(4 * T), "--max-update", "2", "--batch-size-valid", "4", "--max-valid-steps", "1",
         "--save-dir", str(save)])
    (save / "pretrain.done").write_text("2026-12-01T00:00:00Z\n")
    (out / "c4" / "data-bin").mkdir(parents=True)
    (out / "c4" / "data-bin" / "data_path.txt").write_text(f"{lm_bin}\n")
    return out


def rope_plan(out: Path, **env: str):
    from tupe_study.plan import Plan

    return Plan.from_environ({"OUT": str(out), "PRESET": "tiny", "TASKS": "none", "VARIANTS": "rope alibi",
                              "TOKENS_PER_SAMPLE": str(T), "LOC_LENGTH": str(T), "LENGTH_FACTORS": "1 2 4", **env})


def test_the_longer_stage_measures_a_rope_model_with_each_rope_scaling(rope_study, monkeypatch):
    """ROPE_SCALINGS: a RoPE model's plain record, then one per scaling beside it, each the same checkpoint rescaled
    beyond T only (at T the plain loss); a rerun skips what is written, a stop resumes with what is missing; a
    model that is not RoPE gets none; the report's table has a row per scaling."""
    from tupe_study import longer_inputs, stages
    from tupe_study.report_markdown import _longer_lines
    from tupe_study.report_tables import variant_row
    from tupe_study.runs import load_study

    plan = rope_plan(rope_study, ROPE_SCALINGS="yarn linear yarn")  # each once, in the order given
    assert stages.rope_scalings(plan, "rope") == ["yarn", "linear"] and stages.rope_scalings(plan, "alibi") == []
    assert stages.rope_scalings(rope_plan(rope_study, ROPE_SCALINGS="none"), "rope") == []
    assert not stages.longer_done(plan, "rope", 1)
    stages.run_longer(plan, "rope", 1)
    d = rope_study / "longer" / "rope"
    assert sorted(p.name for p in d.iterdir()) == ["seed1.blocks.json", "seed1.json", "seed1.rope-linear.json",
                                                   "seed1.rope-yarn.json"]  # the scoring at T: the plain one's
    plain = json.loads((d / "seed1.json").read_text())
    for scaling in ("linear", "yarn"):
        scaled = json.loads((d / f"seed1.rope-{scaling}.json").read_text())
        assert scaled["rope_scaling"] == scaling and plain["rope_scaling"] is None
        assert scaled["lengths"][str(T)] == pytest.approx(plain["lengths"][str(T)], abs=1e-6)  # within T: RoPE's
        assert all(scaled["lengths"][str(L)] != plain["lengths"][str(L)] for L in (2 * T, 4 * T))
        assert scaled["masked"] == plain["masked"] and scaled["blocks"] == plain["blocks"]
    assert stages.longer_done(plan, "rope", 1)

    calls = []
    monkeypatch.setattr(longer_inputs, "measure", lambda *a, **k: calls.append(k.get("rope_scaling")))
    stages.run_longer(plan, "rope", 1)
    assert calls == []  # a rerun: every record written
    (d / "seed1.rope-linear.json").rename(d / "kept")
    assert not stages.longer_done(plan, "rope", 1)
    stages.run_longer(plan, "rope", 1)
    assert calls == ["linear"]  # after a stop: only what is missing
    (d / "kept").rename(d / "seed1.rope-linear.json")
    assert stages.longer_done(rope_plan(rope_study, ROPE_SCALINGS="none"), "rope", 1)

    (variant,) = load_study(str(rope_study), [("rope", [1])], [])
    row = variant_row(variant, [], 2, None, [])
    assert row[f"rope_linear_loss_len{4 * T}"] == pytest.approx(
        json.loads((d / "seed1.rope-linear.json").read_text())["lengths"][str(4 * T)])
    table = "\n".join(_longer_lines([variant], [row]))
    assert "`rope+yarn`, `rope+linear`" not in table and "`rope+linear`, `rope+yarn`: the checkpoint of the model" in table
    rows = [line for line in table.splitlines() if line.startswith("| rope")]
    assert [r.split(" | ")[0] for r in rows] == ["| rope", "| rope+linear", "| rope+yarn"]  # the registry's order
    assert rows[1].count("|") == rows[0].count("|") and rows[1].split(" | ")[1] == rows[0].split(" | ")[1]


def test_a_bad_rope_scalings_is_refused_in_one_line_naming_its_choices(tmp_path, monkeypatch, capsys):
    from tupe_study.__main__ import main

    for name, value in dict(OUT=str(tmp_path / "s"), PRESET="tiny", TASKS="none", ROPE_SCALINGS="linear dynamic").items():
        monkeypatch.setenv(name, value)
    assert main(["--list"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "study.sh: error: ROPE_SCALINGS must be a list (spaces or commas) of which each is one of linear, ntk, yarn, "
        "not 'dynamic' (in 'linear dynamic')"]
    assert not (tmp_path / "s").exists()
