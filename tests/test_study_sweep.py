"""The LR sweep (tupe_study.sweep: the rule, its widening, the second declaration), the flatness check (tupe_study.flatness)
and the one spelling of a number (tupe_common.numbers), in-process; the sweep through study.sh is in
tests/test_study.py (it reuses the tiny study's prepared data)."""
from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import ROOT
from tupe_study import flatness, runs, sweep
from tupe_common.numbers import same_number, short


def test_short_spelling_is_the_shorter_and_keeps_the_value():
    cases = {0.001: "1e-3", 0.0005: "5e-4", 3e-4: "3e-4", 0.01: "0.01", 0.0015: "0.0015", 2.0: "2", 1e5: "1e5",
             1.5e-5: "1.5e-5", 0.1: "0.1"}
    for value, text in cases.items():
        assert short(value) == text and float(text) == value
    assert short(float("1e-3")) == short(float("0.001"))  # one folder for one value
    assert same_number("1e-3", "0.001") and not same_number("1e-3", "1e-4") and same_number("none", "none")


def test_widening_goes_one_grid_step_beyond_the_edge():
    grid = [3e-4, 1e-3, 3e-3]
    assert sweep.widened(grid, 3e-3) == 9e-3  # 3e-3 * (3e-3 / 1e-3)
    assert sweep.widened(grid, 3e-4) == pytest.approx(9e-5)  # 3e-4 / (1e-3 / 3e-4), 3 digits
    assert sweep.widened(grid, 1e-3) is None  # inside: tuned
    assert sweep.widened([1e-3], 1e-3) is None


def test_lowest_mean_ties_to_the_smaller_lr_and_a_diverged_run_is_the_worst():
    assert sweep.lowest_mean({1e-3: {1: 8.0, 2: 9.0}, 3e-3: {1: 8.6, 2: 8.2}}) == 3e-3  # 8.5 vs 8.4
    assert sweep.lowest_mean({1e-3: {1: 8.0, 2: 9.0}, 3e-3: {1: 9.0, 2: 8.0}}) == 1e-3  # a tie: the smaller
    # one diverged seed makes its LR the worst, however good the other seed
    assert sweep.lowest_mean({1e-3: {1: 9.0, 2: 9.0}, 3e-3: {1: 6.0, 2: math.nan}}) == 1e-3
    assert sweep.lowest_mean({1e-3: {1: 9.0}, 3e-3: {1: None}}) == 1e-3
    # equal in the logged decimals (6.0002 both), unequal as float means (6.0001999999999995 and 6.0002): a tie
    assert sweep.lowest_mean({3e-3: {1: 6.0, 2: 6.0004}, 1e-3: {1: 6.0002, 2: 6.0002}}) == 1e-3
    assert sweep.lowest_mean({3e-3: {1: 6.0, 2: 6.0003}, 1e-3: {1: 6.0002, 2: 6.0002}}) == 3e-3  # 6.00015 is lower


def fake_runs(losses):
    """final(label, lr, seed) over a dict {(lr, seed): loss}; an absent key is a run not finished yet."""
    return lambda label, lr, seed: ((True, losses[lr, seed]) if (lr, seed) in losses else (False, None))


def test_choose_widens_once_at_the_edge_then_chooses():
    grid, seeds = [1e-3, 3e-3], [7, 8]
    losses = {(1e-3, 7): 9.0, (1e-3, 8): 9.2}
    c = sweep.choose("a", grid, seeds, fake_runs(losses))
    assert c.chosen is None and c.extra is None  # the grid's runs are not all done
    losses.update({(3e-3, 7): 8.0, (3e-3, 8): 8.4})
    c = sweep.choose("a", grid, seeds, fake_runs(losses))
    assert c.extra == 9e-3 and c.chosen is None  # best at the top edge: one step beyond, to be run
    assert sweep.parts([c], seeds)[-2:] == [("a", "9e-3", 7), ("a", "9e-3", 8)]
    losses.update({(9e-3, 7): 8.1, (9e-3, 8): 8.5})
    c = sweep.choose("a", grid, seeds, fake_runs(losses))
    assert c.chosen == 3e-3 and not c.at_edge  # inside the widened grid: a tuned LR
    losses.update({(9e-3, 7): 7.0, (9e-3, 8): 7.1})
    c = sweep.choose("a", grid, seeds, fake_runs(losses))
    assert c.chosen == 9e-3 and c.at_edge  # at the widened grid's edge: not tuned, said so, not widened again
    assert "is at the edge of its widened grid" in "\n".join(sweep.sweep_lines([c], {}, seeds))


def test_sweep_parts_go_seed_by_seed_and_widened_ones_come_last():
    seeds = [7, 8]
    a = sweep.choose("a", [1e-3, 3e-3], seeds, fake_runs({}))
    b = sweep.choose("b", [1e-3, 3e-3], seeds, fake_runs({}))
    assert sweep.parts([a, b], seeds) == [("a", "1e-3", 7), ("b", "1e-3", 7), ("a", "3e-3", 7), ("b", "3e-3", 7),
                                          ("a", "1e-3", 8), ("b", "1e-3", 8), ("a", "3e-3", 8), ("b", "3e-3", 8)]


def test_second_declaration_round_trips_and_is_compared_by_value():
    text = sweep.second_declaration({"bert-a": 1e-3, "tupe-r": 3e-3}, 9.12345, "abc1234",
                                    datetime(2026, 12, 6, 8, 0, tzinfo=timezone.utc))
    assert text.startswith("# second declaration, 2026-12-06T08:00:00Z, commit abc1234:")
    from tupe_study.settings import _lines

    declared = sweep.read_declared(_lines("PRESET=cpu-small\n" + text))
    assert declared == {"CHOSEN_LRS": "bert-a:1e-3 tupe-r:3e-3", "UPDATES_TO_TARGET": "9.1235"}
    assert sweep.differences(declared, {"bert-a": 0.001, "tupe-r": 0.003}, 9.12349) == []  # the same, other spelling
    assert sweep.differences(declared, {"bert-a": 1e-3, "tupe-r": 1e-3}, 9.1235) == [
        "< CHOSEN_LRS=bert-a:1e-3 tupe-r:3e-3", "> CHOSEN_LRS=bert-a:1e-3 tupe-r:1e-3"]
    assert sweep.differences(declared, {"bert-a": 1e-3, "tupe-r": 3e-3}, 9.2) == [
        "< UPDATES_TO_TARGET=9.1235", "> UPDATES_TO_TARGET=9.2000"]


def test_lr_area_against_a_plain_sum():
    """fairseq sets the LR after each update (trainer.set_num_updates -> polynomial_decay.step_update), so update u
    takes the LR set after update u - 1; the first takes 1 / warmup (set at the start), or the peak without warmup."""
    def lr(u, w, n):
        return u / w if u <= w else (n - u) / (n - w)

    taken = [None, 1 / 100] + [lr(u - 1, 100, 1200) for u in range(2, 1201)]  # taken[u]: the LR of update u
    assert flatness.lr_area(960, 1200, 100, 1200) == pytest.approx(sum(taken[961:1201]))
    assert flatness.lr_area(0, 100, 100, 1200) == pytest.approx(sum(taken[1:101]))  # the warmup: 1/100 twice
    assert flatness.lr_area(0, 2, 0, 1200) == pytest.approx(1 + 1199 / 1200)  # without warmup: the peak, then decay
    whole = flatness.lr_area(0, 1200, 0, 1200)
    assert flatness.lr_area(960, 1200, 0, 1200) / whole == pytest.approx(0.04, abs=0.001)  # 0.2^2 of the triangle
    assert flatness.lr_area(720, 960, 0, 1200) / whole == pytest.approx(0.12, abs=0.001)  # 0.4^2 - 0.2^2


def test_flatness_tells_still_falling_decay_and_levelled_apart():
    total = 1000
    # changes over 600..800 and 800..1000, against a gap of 1 bit
    falling = {600: 9.0, 800: 8.5, 1000: 8.3}  # last window 0.2 > 10% of the gap
    decayed = {600: 9.0, 800: 8.7, 1000: 8.64}  # 0.06 for 1/3 of the area the 0.3 had: ratio 0.6 -> decay
    levelled = {600: 9.0, 800: 8.7, 1000: 8.69}  # 0.01: ratio 0.1 -> levelled off
    rows = flatness.flatness({"f": [falling], "d": [decayed], "l": [levelled]}, {"f": 1.0, "d": 1.0, "l": 1.0}, 0,
                             total)
    got = {r.model: r for r in rows}
    assert got["f"].verdict == "still falling" and got["f"].last == pytest.approx(0.2)
    assert got["d"].rate_ratio == pytest.approx((0.06 / 0.04) / (0.3 / 0.12), rel=0.02)
    assert got["d"].verdict == "flattened by the LR decay" and got["l"].verdict == "levelled off"
    assert flatness.flatness({"x": [{600: 9.0, 800: 8.0}]}, {}, 0, total) == []  # no final validation
    # falling in the last window only (the window before rose or stayed): learning faster, not levelled off
    late = flatness.flatness({"r": [{600: 5.0, 800: 5.01, 1000: 4.95}], "s": [{600: 5.0, 800: 5.0, 1000: 4.95}],
                              "u": [{600: 5.0, 800: 5.01, 1000: 5.02}]}, {"r": 1.0, "s": 1.0, "u": 1.0}, 0, total)
    got = {r.model: r for r in late}
    assert got["r"].rate_ratio == got["s"].rate_ratio == math.inf
    assert got["r"].verdict == got["s"].verdict == "flattened by the LR decay"
    assert got["u"].rate_ratio is None and got["u"].verdict == "levelled off"  # rising at the end: not falling


def test_flatness_gaps_are_the_declared_pairs_or_the_span():
    finals = {"a": [8.0, 8.2], "b": [8.6, 8.8], "c": [7.0]}
    assert flatness.gaps_of(finals, [("a", "b")]) == pytest.approx({"a": 0.6, "b": 0.6})
    assert flatness.gaps_of(finals, []) == pytest.approx({"a": 1.7, "b": 1.7, "c": 1.7})


def test_published_ten_seed_run_ends_with_tupe_r_still_falling():
    """The 2026-12-02 ten-seed run, read from its evidence: TUPE-R still falls by more than 10% of the gap over its
    last 240 updates (the issue's 0.83 bits per 1,000 updates), BERT-A does not."""
    pretrain = ROOT / "docs" / "results" / "2026-12-02_cpu-small_seeds10" / "evidence" / "pretrain"
    curves = {m: [runs.parse_valid_curve(str(p)) for p in sorted((pretrain / m).glob("seed*/train.log"))]
              for m in ("bert-a", "tupe-r")}
    finals = {m: [c[1200] for c in cs] for m, cs in curves.items()}
    rows = {r.model: r for r in flatness.flatness(curves, flatness.gaps_of(finals, [("tupe-r", "bert-a")]), 100, 1200)}
    assert rows["tupe-r"].verdict == "still falling" and rows["bert-a"].verdict != "still falling"
    assert rows["tupe-r"].gap == pytest.approx(0.694, abs=0.001) and rows["tupe-r"].seeds == 10


def write_sweep_run(out: Path, label: str, lr: str, seed: int, loss: float, total: int = 4) -> None:
    d = out / "sweep" / label / f"lr{lr}" / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "train.log").write_text(f'2026-12-06 08:00:00 | INFO | valid | {{"epoch": 1, "valid_loss": "{loss}", '
                                 f'"valid_num_updates": "{total}"}}\n')
    (d / "pretrain.done").write_text("2026-12-06T08:00:00Z\n")


def test_report_section_reads_the_sweep_from_its_folders(tmp_path):
    from tupe_study.sweep import report_section as sweep_section

    out = tmp_path / "study"
    for lr, loss in (("1e-3", 9.0), ("3e-3", 8.0), ("9e-3", 8.5)):
        write_sweep_run(out, "bert-a", lr, 7, loss)
    (out / "settings.env").write_text("LR_GRID=0.001 3e-3\nSWEEP_SEEDS=7\n# second declaration, x\n"
                                      "CHOSEN_LRS=bert-a:3e-3\n")
    lines = "\n".join(sweep_section(str(out), ["bert-a"], 4, [], {}))
    assert "| **3e-3** | 8.0000 | 8.0000 |" in lines and "| 9e-3 (widened) | 8.5000 |" in lines
    assert "`CHOSEN_LRS=bert-a:3e-3`." in lines and "differs" not in lines
    (out / "settings.env").write_text("LR_GRID=0.001 3e-3\nSWEEP_SEEDS=7\nCHOSEN_LRS=bert-a:1e-3\n")
    assert "**this differs from what the sweep gives now (bert-a:3e-3)**" in "\n".join(
        sweep_section(str(out), ["bert-a"], 4, [], {}))


def test_declaration_resolves_the_halfway_target_from_the_sweep(tmp_path, starts_process):
    """declare_choice on a finished sweep (two models, two LRs, one seed; made-up logs) and real training binaries
    (slow: the declaration names the commit, from git):
    CHOSEN_LRS and UPDATES_TO_TARGET = (unigram + B's final loss at its chosen LR) / 2 written once, the report's
    arguments carry the target, and a second call reads the declaration back."""
    import numpy as np

    from tupe_study import stages
    from tupe_study.plan import Plan
    from tupe_study.stats import entropy_bits
    from test_study import write_bin

    out = tmp_path / "study"
    tokens = [[4, 5, 6, 7], [4, 4, 5, 8, 9]]
    write_bin(out / "c4" / "data-bin" / "shard0" / "train", tokens)
    (out / "c4" / "data-bin" / "data_path.txt").write_text(str(out / "c4" / "data-bin" / "shard0") + "\n")
    for label, losses in (("bert-a", (9.0, 8.5)), ("tupe-r", (8.0, 8.2))):
        for lr, loss in zip(("1e-3", "3e-3"), losses):
            write_sweep_run(out, label, lr, 7, loss)
    for label, lr in (("bert-a", "9e-3"), ("tupe-r", "3.33e-4")):  # each widened once: both chose an edge
        write_sweep_run(out, label, lr, 7, 8.9)
    (out / "settings.env").write_text("PRESET=tiny\n")
    env = {"OUT": str(out), "PRESET": "tiny", "VARIANTS": "bert-a tupe-r", "PRETRAIN_SEEDS": "1 2", "TASKS": "none",
           "LR_GRID": "1e-3 3e-3", "SWEEP_SEEDS": "7", "TOTAL_UPDATES": "4",
           "ENDPOINTS": "final_loss:tupe-r:bert-a updates_to@halfway:tupe-r:bert-a"}
    plan = Plan.from_environ(env)
    assert stages.declare_choice(plan) == {"bert-a": 3e-3, "tupe-r": 1e-3}
    counts = np.bincount(np.concatenate(tokens))
    target = (entropy_bits(counts[counts > 0]) + 8.5) / 2
    text = (out / "settings.env").read_text()
    assert "CHOSEN_LRS=bert-a:3e-3 tupe-r:1e-3\n" in text and f"UPDATES_TO_TARGET={target:.4f}\n" in text
    argv = stages.report_argv(plan)
    assert argv[argv.index("--updates-to-target") + 1] == f"{target:.4f}"
    assert stages.declare_choice(plan) == {"bert-a": 3e-3, "tupe-r": 1e-3} and (out / "settings.env").read_text() == text
    with pytest.raises(Exception, match="updates_to@halfway takes its target from the LR sweep"):
        Plan.from_environ(dict(env, LR_GRID="none", SWEEP_SEEDS="none"))


def test_power_check_of_equal_logged_differences_has_no_spread():
    """Two sweep seeds whose differences are equal in the logged decimals (6.0004 - 5.0002 and 6.0002 - 5.0) have no
    spread: d is infinite and no power is given. Float differences left a residue (d = 1e14, power 1.00)."""
    a = sweep.Choice("tupe-r", [1e-3], {1e-3: {1: 6.0004, 2: 6.0002}}, chosen=1e-3)
    b = sweep.Choice("bert-a", [1e-3], {1e-3: {1: 5.0002, 2: 5.0}}, chosen=1e-3)
    [line, _] = sweep.power_lines([a, b], [("tupe-r", "bert-a")], 10, 2)
    assert "per sweep seed +1.0002, +1.0002, d = inf, power — with the 10 confirmation seeds" in line
    b.finals[1e-3][2] = 5.0001  # a spread: 1.0002 and 1.0001
    [line, _] = sweep.power_lines([a, b], [("tupe-r", "bert-a")], 10, 2)
    assert f"d = {1.00015 / (0.0001 / math.sqrt(2)):.2f}, power 1.00" in line  # mean / sample SD of the two
