"""The study (train_scripts/study.sh, the study/ package) and its report (tupe_study.report).

The maths (Pearson, Spearman with ties, paired differences, medians, the unigram entropy) against values
worked out by hand or by plain float64 loops; the loss curve from a hand-made fairseq log; the whole report
on a hand-made study folder; one end-to-end run of study.sh with the tiny preset (a module fixture), then
scenarios: what each stage wrote, its rerun (everything skipped), its --list/--slurm output, ELECTRA models
added beside it, and the refusal of changed settings.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import pytest

from conftest import BIN, ROOT
from corpus import study_inputs
from study_logs import finished_log
from tupe_study import compare, figure, runs
from tupe_study import report as sr
from tupe_study import report_markdown
from tupe_study import stats
from tupe_study.noise import span_test

STUDY = ROOT / "train_scripts" / "study.sh"


# ---------------------------------------------------------------------------------------------- maths


def test_pearson_hand_computed():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-3, -1, 0, 4]: sum dx*dy = 11, sum dx^2 = 5, sum dy^2 = 26
    assert stats.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130), abs=1e-12)
    assert stats.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(stats.pearson([1, 2, 3], [5, 5, 5]))  # constant side: undefined, not 0
    assert math.isnan(stats.pearson([1], [2]))


def test_average_ranks_and_spearman_with_ties():
    assert stats.average_ranks([10, 20, 20, 5]).tolist() == [2, 3.5, 3.5, 1]
    assert stats.average_ranks([7, 7, 7]).tolist() == [2, 2, 2]
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 2, 3, 4]: sum dx*dy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5
    assert stats.spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(3 / math.sqrt(10), abs=1e-12)
    assert stats.spearman([1, 2, 3], [1, 10, 100]) == pytest.approx(1.0)  # monotone, not linear
    assert stats.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_spearman_p_against_counted_pairings():
    """Exact for small n: n = 4, |rho| = 1 in 2 of the 24 pairings; n = 5, rho = 0.8 (one swap of neighbours
    twice: sum d^2 = 4), |rho| >= 0.8 in 16 of 120 (sum d^2 <= 4: the identity, 4 neighbour swaps, 3 pairs of
    disjoint neighbour swaps, and their reverses). Sampled for n = 8 (8! > 20,000) against a plain count of all
    40,320 pairings."""
    from itertools import permutations

    assert stats.spearman_p([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1 / 12)
    assert stats.spearman_p([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(16 / 120)
    assert math.isnan(stats.spearman_p([1, 2, 3], [5, 5, 5]))
    x, y = [1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 3, 5, 4, 8, 6, 7]

    def rho(ys):  # no ties: 1 - 6 sum d^2 / (n (n^2 - 1))
        return 1 - 6 * sum((a - b) ** 2 for a, b in zip(x, ys)) / (8 * 63)

    exact = sum(abs(rho(p)) >= abs(rho(y)) - 1e-12 for p in permutations(y)) / math.factorial(8)
    assert 0.001 < exact < 0.1
    assert stats.spearman_p(x, y) == pytest.approx(exact, abs=0.004)  # 3 standard errors of 20,000 draws


def test_entropy_bits():
    assert stats.entropy_bits(np.array([2, 1, 1, 0])) == pytest.approx(1.5)  # -(.5 log .5 + 2 * .25 log .25)
    assert stats.entropy_bits(np.array([5, 5, 5, 5])) == pytest.approx(2.0)


def write_bin(prefix: Path, sentences: List[List[int]]) -> None:
    """A fairseq mmap binary (what fairseq-preprocess writes) of the given token ids."""
    import torch
    from fairseq.data import indexed_dataset

    prefix.parent.mkdir(parents=True, exist_ok=True)
    builder = indexed_dataset.make_builder(str(prefix) + ".bin", impl="mmap", vocab_size=1000)
    for s in sentences:
        builder.add_item(torch.tensor(s, dtype=torch.int32))
    builder.finalize(str(prefix) + ".idx")


def test_overview_numbers_the_points_of_a_study_with_many_variants():
    """Up to NAMES_UP_TO variants, scatter points carry their names; beyond, the table's row numbers, which the
    table puts before each name (17 names in a cluster cover each other)."""
    def rows(names):
        return [{"variant": v, "objective": "mlm", "final_valid_loss": 8.0 + i / 10, "loc_pos": i / len(names),
                 "downstream_avg": 70.0 + i % 3} for i, v in enumerate(names)]

    corr = [{"measure": "locality (position-only)", "key": "loc_pos", "objective": "mlm", "n": 0,
             "spearman": math.nan}]
    plt = figure._pyplot()
    for names in (["bert-a", "tupe-r", "nope", "alibi", "rope"], [f"variant{i}" for i in range(figure.NAMES_UP_TO + 1)]):
        fig = figure.overview_figure([], rows(names), [], corr, None)
        scatter = fig.axes[-1]
        table = next(c for c in fig.axes[1].get_children() if type(c).__name__ == "Table")
        first_column = [cell.get_text().get_text() for (i, j), cell in sorted(table.get_celld().items())
                        if j == 0 and i > 0]
        numbered = len(names) > figure.NAMES_UP_TO
        labels = [str(i) for i in range(1, len(names) + 1)] if numbered else names
        assert [t.get_text() for t in scatter.texts] == labels
        assert first_column == ([f"{i}  {v}" for i, v in enumerate(names, 1)] if numbered else names)
        plt.close(fig)


def test_ten_pre_training_seeds_get_ten_marker_looks_and_the_key_says_when_they_repeat():
    """The published 10-seed run's shape: every seed of a variant its own (fill, other half) look, the key the
    same looks in the same order; with 12 seeds the looks repeat after 10 and the key's title says so."""
    from matplotlib.legend import Legend

    plt = figure._pyplot()
    for n_seeds in (10, 12):
        seeds = list(range(21, 21 + n_seeds))
        variants = [runs.Variant(name, seeds=[runs.SeedRun(s, {u: 10.0 - s / 100 - u / 100 for u in range(10, 130, 10)},
                                                           {}, {}) for s in seeds]) for name in ("bert-a", "tupe-r")]
        rows = [{"variant": v.name, "objective": "mlm", "final_valid_loss": 8.0 + i} for i, v in enumerate(variants)]
        fig = figure.overview_figure(variants, rows, [], [], None)
        curves = fig.axes[0]
        looks = [(ln.get_fillstyle(), ln.get_markerfacecoloralt()) for ln in curves.get_lines()
                 if ln.get_gid() == "tupe-r"]
        assert len(looks) == n_seeds and len(set(looks[:10])) == 10  # ten seeds, ten looks
        assert looks[10:] == looks[:n_seeds - 10]
        key = next(c for c in curves.get_children() if isinstance(c, Legend)
                   and c.get_title().get_text().startswith("pre-training seed"))
        assert [t.get_text() for t in key.get_texts()] == [f"seed {s}" for s in seeds]
        assert [(h.get_fillstyle(), h.get_markerfacecoloralt()) for h in key.legend_handles] == looks
        assert key.get_title().get_text() == ("pre-training seed (fills repeat after 10)" if n_seeds > 10
                                              else "pre-training seed")
        plt.close(fig)


def test_overview_survives_grey_print_and_shades_each_column_by_its_own_values(monkeypatch):
    """17 variants, two with three pre-training seeds (the published run's shape): no two variants share their
    (line style, marker), every seed of a variant its own marker fill, and a key names each seed with its fill;
    every table column has a title, the order-drop one says which shuffle; in each column the best value is the
    darkest and the worst the lightest of the column's own values, also in a column that 7 of the 17 have."""
    from matplotlib.legend import Legend

    names = [f"variant{i}" for i in range(17)]
    variants, rows = [], []
    for i, name in enumerate(names):
        seeds = (1, 2, 3) if i in (0, 3) else (1,)
        variants.append(runs.Variant(name, seeds=[runs.SeedRun(s, {u: 10.0 - i / 10 - s / 100 - u / 100 for u in
                                                                    range(10, 130, 10)}, {}, {}) for s in seeds]))
        rows.append({"variant": name, "objective": "mlm", "final_valid_loss": 8.0 + (i * 7 % 17) / 10,
                     "loss_len128": 8.5, "loss_len512": 9.0 + i / 10 if i < 7 else None, "downstream_avg": 70.0 + (i * 5 % 17) / 10,
                     "order_drop_random": 0.1 * i, "loc_pos": i / 17})
    assert len({figure.variant_style(i) for i in range(36)}) == 36  # 4 line styles x 9 markers, coprime
    plt = figure._pyplot()
    # every column's ranks readable: which columns are (tupe_study.noise) is test_study_noise's and the figure test's
    monkeypatch.setattr(figure, "noise_headers", lambda variants, keys, columns: [None] * len(keys))
    fig = figure.overview_figure(variants, rows, [], [], 9.9)
    curves = fig.axes[0]
    by_variant: Dict[str, list] = {}
    for line in curves.get_lines():
        if line.get_gid():
            by_variant.setdefault(line.get_gid(), []).append(line)
    assert sorted(by_variant) == sorted(names)
    looks = {v: {(ln.get_linestyle(), ln.get_marker()) for ln in lines} for v, lines in by_variant.items()}
    assert all(len(look) == 1 for look in looks.values())  # every seed of a variant: the variant's look
    assert len({next(iter(look)) for look in looks.values()}) == 17  # no two variants alike without colour
    fills = [ln.get_fillstyle() for ln in by_variant["variant3"]]
    assert len(set(fills)) == 3
    legends = [c for c in curves.get_children() if isinstance(c, Legend)]
    key = next(lg for lg in legends if lg.get_title().get_text() == "pre-training seed")
    assert [t.get_text() for t in key.get_texts()] == ["seed 1", "seed 2", "seed 3"]
    assert [h.get_fillstyle() for h in key.legend_handles] == fills
    assert [h.get_markerfacecoloralt() for h in key.legend_handles] == [
        ln.get_markerfacecoloralt() for ln in by_variant["variant3"]]
    names_legend = next(lg for lg in legends if lg is not key)
    assert [t.get_text() for t in names_legend.get_texts()][:17] == names

    table = next(c for c in fig.axes[1].get_children() if type(c).__name__ == "Table")
    cells = table.get_celld()
    keys = figure.measures(rows, [])
    headers = [cells[0, j].get_text().get_text() for j in range(len(keys) + 1)]
    assert headers[0] == "variant" and all(h.strip() for h in headers)
    assert "shuffled" in headers[1 + [k for k, _, _ in keys].index("order_drop_random")]
    cmap = plt.get_cmap("Greys_r")
    darkest, lightest = cmap(figure.SHADE_DARKEST), cmap(figure.SHADE_LIGHTEST)
    for j, (key_name, _, higher) in enumerate(keys, 1):
        have = [(i, r[key_name]) for i, r in enumerate(rows) if r.get(key_name) is not None]
        best = max(have, key=lambda p: p[1] if higher else -p[1])[0]
        worst = min(have, key=lambda p: p[1] if higher else -p[1])[0]
        shades = [tuple(cells[i + 1, j].get_facecolor()) for i, _ in have]
        grey = [c[0] for c in shades]
        assert min(grey) == pytest.approx(darkest[0]) and max(grey) == pytest.approx(lightest[0]), key_name
        assert tuple(cells[best + 1, j].get_facecolor()) == pytest.approx(darkest), key_name
        assert tuple(cells[worst + 1, j].get_facecolor()) == pytest.approx(lightest), key_name
    assert "loss_len512" in [k for k, _, _ in keys] and sum(r["loss_len512"] is not None for r in rows) == 7
    plt.close(fig)


def test_every_table_text_fits_inside_its_cell_as_drawn():
    """The published 18-variant shape, two task columns with long names and the header "noise not measured": every text
    of the table, header and body, lies inside its cell once drawn (before, "tweets-sentiment" and "512 tokens"
    ran into their neighbours), and the header row shares one font size."""
    names = ["tupe-a-tie-cls", "learned-gaussian", "gaussian-prior", "pam-sequential"] + [f"v{i}" for i in range(14)]
    rows = [{"variant": v, "objective": "mlm", "final_valid_loss": 8.0 + i / 10, "final_valid_loss_spread": 5.0,
             "loss_len128": 8.5, "loss_len512": 9.0 + i / 10, "tweets-sentiment_median": 60.0 + i,
             "uci-sentiment_median": 70.0 + i, "downstream_avg": 65.0 + i, "order_drop_random": 0.1 * i,
             "loc_pos": i / 18, "sym_pos": 1 - i / 18} for i, v in enumerate(names)]
    plt = figure._pyplot()
    fig = figure.overview_figure([], rows, ["tweets-sentiment", "uci-sentiment"], [], 9.9,
                                 unfit=["learned-gaussian", "gaussian-prior"])
    table = next(c for c in fig.axes[1].get_children() if type(c).__name__ == "Table")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    cells = table.get_celld()
    assert cells[0, 1].get_text().get_text().endswith("noise not\nmeasured")  # no variants: no seed noise
    for (i, j), cell in cells.items():
        box, text = cell.get_window_extent(renderer), cell.get_text().get_window_extent(renderer)
        assert box.x0 <= text.x0 and text.x1 <= box.x1 and box.y0 <= text.y0 and text.y1 <= box.y1, \
            (i, j, cell.get_text().get_text())
    assert len({cell.get_text().get_fontsize() for (i, _), cell in cells.items() if i == 0}) == 1
    plt.close(fig)


def test_column_shades_span_each_columns_own_ranks():
    """0 for a column's best rank, 1 for its worst, linear between; ties share; a column of one value (or one
    tie) is mid-grey; no value, no shade."""
    ranks = [[1.0, 2.0, None], [2.0, None, None], [None, 1.0, None], [4.0, 2.0, 1.0]]
    assert figure.column_shades(ranks) == [[0.0, 1.0, None], [1 / 3, None, None], [None, 0.0, None], [1.0, 1.0, 0.5]]
    assert figure.column_shades([]) == []


def test_far_out_downstream_average_is_drawn_at_the_edge():
    """Sixteen averages within 3 points and one at chance (the published 17-variant run): the axis fits the
    sixteen, the far-out one is a triangle at the bottom edge with its value in its label. Tukey's fences
    by hand: of the 17 sorted values the 5th is Q1 = 70.6 and the 13th Q3 = 72.2, so far out is below 65.8
    or above 77.0."""
    ys = [70.0 + 0.2 * i for i in range(16)] + [48.7]
    q1, q3 = sorted(ys)[4], sorted(ys)[12]
    assert (round(q1, 6), round(q3, 6)) == (70.6, 72.2)
    assert figure.far_out(ys) == [not (q1 - 3 * (q3 - q1) <= y <= q3 + 3 * (q3 - q1)) for y in ys]
    assert figure.far_out(ys) == [False] * 16 + [True]
    assert figure.far_out([70.0, 71.0, 48.7]) == [False] * 3  # too few values to call one far out
    plt = figure._pyplot()
    fig, ax = plt.subplots()
    drawn = figure.scatter_with_far_out(ax, [(0.1 * i, y, str(i + 1)) for i, y in enumerate(ys)])
    low, high = ax.get_ylim()
    assert 65 < low < 70.0 and 73.0 < high < 75
    assert drawn[-1][2] == "17 (48.7)" and low < drawn[-1][1] < 70.0
    assert [d[:2] for d in drawn[:16]] == [(0.1 * i, y) for i, y in enumerate(ys[:16])]
    fig2, ax2 = plt.subplots()
    figure.scatter_with_far_out(ax2, [(0.1 * i, y, str(i)) for i, y in enumerate(ys[:16])])
    assert ax2.get_ylim()[0] < 70.0 and ax2.get_ylim()[1] > 73.0  # nothing far out: every point inside
    plt.close(fig)
    plt.close(fig2)


def test_place_labels_keeps_names_apart_and_inside():
    """Crowded points (two pairs nearly on top of each other, a row of close neighbours, long names at the right
    edge): every name is drawn where it overlaps no other name and no other point, inside the axes; the
    names of the near-coincident pairs (which one spot would stack) take different spots."""
    plt = figure._pyplot()
    fig, ax = plt.subplots(figsize=(2.6, 2.4))
    pts = [(0.95, 70.70, "tupe-a-tie-cls"), (0.97, 70.72, "pam-sequential"), (0.60, 69.60, "rope"),
           (0.62, 69.58, "tupe-r"), (0.2, 71.0, "bert-a"), (0.3, 71.0, "bert-r"), (0.4, 71.0, "tupe-a"),
           (0.5, 71.0, "learned-gaussian"), (0.1, 69.0, "nope")]
    ax.scatter([p[0] for p in pts], [p[1] for p in pts])
    ax.margins(x=0.12, y=0.08)
    spots = figure.place_labels(ax, pts)
    r = fig.canvas.get_renderer()
    from matplotlib.text import Text

    names = [t for t in ax.texts]
    for t in names:
        t.update_positions(r)
    boxes = [Text.get_window_extent(t, r) for t in names]  # the names, without the leader lines
    assert [t.get_text() for t in names] == [p[2] for p in pts]
    frame = ax.get_window_extent(r)
    for i, b in enumerate(boxes):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1, pts[i][2]
        assert not any(b.overlaps(o) for o in boxes[:i]), pts[i][2]
        for j, (x, y, _) in enumerate(pts):
            px, py = ax.transData.transform((x, y))
            assert j == i or not (b.x0 <= px <= b.x1 and b.y0 <= py <= b.y1), (pts[i][2], pts[j][2])
    assert spots[0] != spots[1] and spots[2] != spots[3]
    plt.close(fig)


def test_token_counts_over_shards(tmp_path):
    write_bin(tmp_path / "s0" / "train", [[4, 5, 2], [4, 2]])
    write_bin(tmp_path / "s1" / "train", [[9, 2]])
    counts = runs.token_counts(f"{tmp_path / 's0'}:{tmp_path / 's1'}")
    assert counts.tolist() == [0, 0, 3, 0, 2, 1, 0, 0, 0, 1]
    with pytest.raises(FileNotFoundError, match="no train split"):
        runs.token_counts(str(tmp_path / "missing"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.idx").write_bytes(b"TNTIDX\x00\x00" + bytes(20))  # the legacy "cached" format
    (tmp_path / "bad" / "train.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="not a fairseq mmap index"):
        runs.token_counts(str(tmp_path / "bad"))


def test_pick_columns_median_best_lr_and_mnli_mm_at_mnli_m_lr():
    """Per LR the median over seeds, the best LR; MNLI-mm at MNLI-m's best LR although its own best differs."""
    def run(task, lr, seed, **scores):
        return (task, lr, seed, scores, f"{task}/lr{lr:g}_seed{seed}")

    got = runs.pick_columns([
        run("RTE", 1e-4, 1, valid=60.0), run("RTE", 1e-4, 2, valid=70.0), run("RTE", 1e-4, 3, valid=65.0),
        run("RTE", 2e-4, 1, valid=50.0), run("RTE", 2e-4, 2, valid=90.0), run("RTE", 2e-4, 3, valid=55.0),
        # MNLI-m: median 42 at 1e-4, 41 at 2e-4; MNLI-mm: median 41.5 at 1e-4, 48 at 2e-4 (its own best)
        run("MNLI", 1e-4, 1, valid=40.0, valid1=42.0, test=99.0), run("MNLI", 1e-4, 2, valid=44.0, valid1=41.0),
        run("MNLI", 2e-4, 1, valid=41.0, valid1=47.0), run("MNLI", 2e-4, 2, valid=41.0, valid1=49.0)])
    assert sorted(got) == ["MNLI-m", "MNLI-mm", "RTE"]
    assert got["RTE"].lr == 1e-4 and got["RTE"].median == 65.0 and got["RTE"].spread == 10.0  # 65 > median 55
    assert got["MNLI-m"].lr == 1e-4 and got["MNLI-m"].median == 42.0
    assert got["MNLI-mm"].lr == 1e-4 and got["MNLI-mm"].median == 41.5 and got["MNLI-mm"].spread == 1.0
    assert got["MNLI-mm"].dirs == {1: "MNLI/lr0.0001_seed1", 2: "MNLI/lr0.0001_seed2"}


def test_glue_selection_shared_with_collect():
    from tupe_glue import collect
    from tupe_glue.selection import column_lr, select_columns

    by_lr = {2e-5: [1.0, 5.0, 3.0], 3e-5: [2.0, 3.0, 9.0], 4e-5: [0.0, 3.0]}  # medians 3, 3, 1.5: tie -> 2e-5
    assert column_lr(by_lr) == 2e-5
    assert column_lr({1e-5: [9.0]}, leader=by_lr) is None  # no runs at the leader's LR: no result
    assert select_columns({"m": by_lr, "mm": {2e-5: [0.0], 3e-5: [99.0]}}, {"mm": "m"}) == {"m": 2e-5, "mm": 2e-5}
    assert collect.column_lr is column_lr  # tupe_glue.collect's table uses this very function


def test_paired_bootstrap_against_exact_enumeration():
    """Two runs x three examples: every one of the 2^2 x 3^3 equally likely resamples enumerated by hand
    gives the exact bootstrap distribution; 20,000 random resamples must match its mean, spread and tails."""
    import itertools

    a = np.array([[100.0, 0.0, 100.0], [100.0, 100.0, 0.0]])
    b = np.array([[0.0, 0.0, 100.0], [100.0, 0.0, 0.0]])
    exact = []
    for rows in itertools.product(range(2), repeat=2):
        for cols in itertools.product(range(3), repeat=3):
            exact.append(sum(a[r, c] - b[r, c] for r in rows for c in cols) / 6)
    exact = np.array(exact)
    got = stats.paired_bootstrap(a, b, resamples=20000, seed=3)
    assert got.mean() == pytest.approx(exact.mean(), abs=1.0) and got.std() == pytest.approx(exact.std(), rel=0.03)
    for q in (2.5, 25, 50, 75, 97.5):
        assert np.percentile(got, q) == pytest.approx(np.percentile(exact, q), abs=100 / 6 + 1e-9)  # one atom
    low, high = stats.percentile_interval(got)
    assert low <= (a - b).mean() <= high
    # with a metric per run (here the mean again): the same distribution for the same draws
    again = stats.paired_bootstrap(a, b, np.zeros(3), lambda g, p: float(np.mean(p)), resamples=500, seed=3)
    assert again == pytest.approx(stats.paired_bootstrap(a, b, resamples=500, seed=3))
    # identical predictions: every resample is exactly 0
    assert not stats.paired_bootstrap(a, a, resamples=50).any()


def test_longer_inputs_say_which_variants_cannot_go_beyond_t():
    from references import reference
    from tupe_study.longer_inputs import untrained_beyond
    from tupe_core.registry import VARIANTS

    for name, variant in VARIANTS.items():  # as each variant's reference declares (tests/references/<name>.py)
        why, want = untrained_beyond(variant, 128), reference(name).BEYOND
        assert why is None if want is None else (why is not None and want in why), (name, why)
    # DeBERTa's rows: which of the 2k rows T tokens reach, from the model's own index table
    from tupe_core.registry import build

    deberta = VARIANTS["deberta_rel"]
    for T in (128, 129, 512):
        table = build(deberta, 64, 4, 4 * T, 1)[1].rel_index
        trained, beyond = set(table[:T, :T].flatten().tolist()), set(table.flatten().tolist())
        assert (beyond <= trained) == (untrained_beyond(deberta, T) is None), T
    assert untrained_beyond(deberta, 128) and untrained_beyond(deberta, 129) is None


# ------------------------------------------------------------------------------------ loss curve


def test_parse_valid_curve_json_and_simple_and_resume(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        '2026-01-01 10:00:00 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "12.1", "num_updates": "5"}\n'
        '2026-01-01 10:00:01 | INFO | valid | {"epoch": 1, "valid_loss": "11.5", "valid_ppl": "2896.3", '
        '"valid_num_updates": "10"}\n'
        '2026-01-01 10:00:02 | INFO | valid1 | {"epoch": 1, "valid1_loss": "1.0", "valid1_num_updates": "10"}\n'
        "2026-01-01 10:00:03 | INFO | valid | not json\n"
        '2026-01-01 10:00:04 | INFO | valid | {"epoch": 1, "valid_loss": "10.25", "valid_num_updates": "20"}\n'
        # resumed from the checkpoint at 10: the validation at 20 is done again and wins
        '2026-01-01 11:00:00 | INFO | valid | {"epoch": 1, "valid_loss": "10.5", "valid_num_updates": "20"}\n'
        "2026-01-01 11:00:05 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.75 | ppl 861 | "
        "wps 100 | wpb 50 | bsz 4 | num_updates 30\n", encoding="utf-8")
    curve = runs.parse_valid_curve(str(log))
    assert curve == {10: 11.5, 20: 10.5, 30: 9.75}
    assert runs.loss_at(curve, 20) == (10.5, 20)
    assert runs.loss_at(curve, 24) == (10.5, 20)  # nearest validation
    assert runs.loss_at(curve, 15) == (11.5, 10)  # a tie goes to the earlier one
    assert runs.loss_at({}, 5) == (None, None)


# ------------------------------------------------------------------------- report on a made-up study



def write_sst_run(run: Path, seed: int, score: int) -> None:
    """A finished SST-2 fine-tuning run at LR 1e-4 in ``run``: result.json, and predictions.json with 100 dev
    examples of which the first ``score`` are right, so the run's accuracy is its score."""
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(
        {"task": "SST-2", "lr": 1e-4, "seed": seed, "metric": "accuracy", "best_valid": {"valid": score}}))
    gold = ["1", "0"] * 50
    pred = [g if i < score else ("0" if g == "1" else "1") for i, g in enumerate(gold)]
    (run / "predictions.json").write_text(json.dumps(
        {"task": "SST-2", "metric": "accuracy", "subsets": {"valid": {"gold": gold, "pred": pred}}}))

def make_study(out: Path) -> None:
    """Three variants, one pre-training seed, SST-2 with 3 seeds; unigram entropy exactly 2 bits."""
    shard = out / "c4" / "data-bin" / "shard0"
    write_bin(shard / "train", [[4, 5, 6, 7]] * 3)
    (out / "c4" / "data-bin" / "data_path.txt").write_text("shard0\n")  # relative to data-bin
    finals = {"A": 0.9, "B": 1.5, "C": 0.8}
    sst = {"A": [80, 82, 90], "B": [70, 75, 71], "C": [70, 75, 80]}
    loc = {"A": (0.5, 0.9), "B": (0.2, 0.7), "C": (0.4, 0.95)}
    for v in finals:
        d = out / "pretrain" / v / "seed1"
        d.mkdir(parents=True)
        lines = [f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "{u}"}}'
                 for u, loss in ((25, 3.0), (50, 2.0), (75, 1.2), (100, finals[v]))]
        finished_log(d, "\n".join(lines) + "\n")
        for seed, score in enumerate(sst[v], 1):
            run = out / "finetune" / v / "seed1" / "SST-2" / f"lr1e-4_seed{seed}"
            write_sst_run(run, seed, score)
        (out / "locality" / v).mkdir(parents=True)
        (out / "locality" / v / "seed1.csv").write_text(
            "source,layer,head,locality,symmetry,symmetry_scaled\n"
            "position,all,0,0.1,0.1,0.1\n"
            f"position,all,mean,{loc[v][0]},{loc[v][1]},0.5\n"
            f"attention (5 sentences),all,mean,{loc[v][0] / 2},{loc[v][1] / 2},0.5\n")


def test_report_on_a_made_up_study(tmp_path, capsys):
    out = tmp_path / "study"
    make_study(out)
    (out / "settings.env").write_text("PRESET=cpu-small\nTOTAL_UPDATES=100\n")
    (out / "timings.tsv").write_text("prep\tall\t60\t2026-01-01T00:00:00Z\thost, 2 cores\n"
                                     "pretrain\tA 1\t600\t2026-01-01T00:11:00Z\thost, 2 cores\n"
                                     "pretrain\tB 1\t540\t2026-01-01T00:12:00Z\thost, 2 cores\n")  # beside A
    # 200 resamples: no interval is checked here (test_report_downstream_differences_with_bootstrap_intervals)
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "200"]) == 0
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    a, b = rows["A"], rows["B"]
    assert float(a["unigram_bits"]) == pytest.approx(2.0)
    assert float(a["final_valid_loss"]) == pytest.approx(0.9) and float(a["best_valid_loss"]) == pytest.approx(0.9)
    assert float(a["below_unigram_bits"]) == pytest.approx(1.1)
    assert [float(a[f"loss_at_{p}pct"]) for p in (25, 50, 75, 100)] == pytest.approx([3.0, 2.0, 1.2, 0.9])
    assert float(a["SST_median"]) == 82 and float(a["SST_spread"]) == 10
    assert float(b["SST_median"]) == 71 and float(b["SST_spread"]) == 5
    assert float(a["downstream_avg"]) == 82 and float(a["loc_pos"]) == 0.5 and float(a["sym_attn"]) == 0.45

    # correlations across the 3 variants, against a plain float64 loop
    def loop_pearson(x, y):
        mx, my = sum(x) / len(x), sum(y) / len(y)
        sxy = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y))
        return sxy / math.sqrt(sum((xi - mx) ** 2 for xi in x) * sum((yi - my) ** 2 for yi in y))

    corr = {r["measure"]: r for r in csv.DictReader((out / "correlation.csv").open())}
    loc_pos = corr["locality (position-only)"]
    assert loc_pos["n"] == "3"
    assert float(loc_pos["pearson"]) == pytest.approx(loop_pearson([0.5, 0.2, 0.4], [82, 71, 75]), abs=1e-5)
    assert float(loc_pos["spearman"]) == pytest.approx(1.0)  # B < C < A in both
    # symmetry: ranks [2, 1, 3] vs downstream ranks [3, 1, 2] -> rho = 0.5
    assert float(corr["symmetry (position-only)"]["spearman"]) == pytest.approx(0.5)
    assert float(loc_pos["spearman_p"]) == pytest.approx(2 / 6)  # n = 3: |rho| = 1 in 2 of the 3! pairings
    # Holm over every correlation with a p, the two columns appended at the end of the file
    assert next(csv.reader((out / "correlation.csv").open()))[-2:] == ["p_holm", "family_size"]
    tested = [r for r in corr.values() if r["spearman_p"] and not math.isnan(float(r["spearman_p"]))]
    ps = [float(r["spearman_p"]) for r in tested]
    assert ps and [float(r["p_holm"]) for r in tested] == pytest.approx(stats.holm(ps))
    assert {r["family_size"] for r in corr.values()} == {str(len(ps))}

    md = (out / "report.md").read_text()
    assert "WARNING: not fit for purpose" in md and "B did not end at least 1 bit" in md  # only B
    assert "One pre-training seed: no spread over seeds is measured" in md
    assert "| locality (position-only) | 3 |" in md
    # time in parts (60 + 600 + 540 s) and elapsed: pretrain 00:01-00:12, all 23:59-00:12
    assert "| pretrain | 2 | 19.0 | 11.0 |" in md and "| **all** | 3 | **20.0** | **13.0** |" in md
    assert "TOTAL_UPDATES=100" in md and "host, 2 cores (3)" in md
    assert "Code (parts run with it): not recorded (3)." in md  # lines written before the code column
    assert (out / "overview.png").read_bytes()[:4] == b"\x89PNG"
    assert "did not end 1 bit(s) below" in capsys.readouterr().err


def test_report_gives_a_row_per_rope_scaling_beside_its_model(tmp_path):
    """The longer stage's scaled records of a model (seedS.rope-SCALING.json) are rows `A+SCALING` under A's, in the
    order linear, ntk, yarn, with A's columns, and columns of study.csv; a model without any gets neither."""
    out = tmp_path / "study"
    make_study(out)
    (out / "longer" / "A").mkdir(parents=True)
    (out / "longer" / "B").mkdir(parents=True)
    for name, lengths in (("A/seed1", [2.0, 3.5, 5.0]), ("A/seed1.rope-yarn", [2.0, 2.5, 3.0]),
                          ("A/seed1.rope-linear", [2.0, 2.25, 2.75]), ("B/seed1", [2.5, 2.6, 2.7])):
        (out / "longer" / f"{name}.json").write_text(json.dumps(
            {"lengths": dict(zip(("64", "128", "256"), lengths)), "not_beyond": None}))
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "200"]) == 0
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert float(rows["A"]["rope_yarn_loss_len256"]) == 3.0 and rows["B"]["rope_yarn_loss_len256"] == ""
    assert "rope_ntk_loss_len256" not in rows["A"]
    longer = (out / "report.md").read_text().split("## Longer inputs")[1].split("\n## ")[0]
    assert "`A+linear`, `A+yarn`: the checkpoint of the model named before the `+`" in longer
    assert "s = L/T; at T the rotation is the trained one" in longer
    table = [line for line in longer.splitlines() if line.startswith("| ") and "variant" not in line]
    assert table == ["| A | 2.000 | 3.500 | 5.000 |  |", "| A+linear | 2.000 | 2.250 | 2.750 |  |",
                     "| A+yarn | 2.000 | 2.500 | 3.000 |  |", "| B | 2.500 | 2.600 | 2.700 |  |", "| C | — | — | — |  |"]


def test_run_section_names_the_code_that_ran_each_part(tmp_path):
    """timings.tsv's sixth column, the commit that ran a part: counted per commit in the report's Run section, with a
    warning when the parts ran with more than one (a seed can draw another model); a line cut short is skipped."""
    from tupe_study.timings import part_times

    stamp = "2026-01-01T00:10:00Z"
    (tmp_path / "timings.tsv").write_text(f"pretrain\tA 1\t600\t{stamp}\thost\tabc1234\n"
                                          f"pretrain\tA 2\t600\t{stamp}\thost\tabc1234\n"
                                          f"pretrain\tB 1\t540\t{stamp}\thost\n"
                                          f"finetune\tA 1\t60\t{stamp}\thost\tdef5678-dirty\n"
                                          "finetune\tB 1\t6")
    times = part_times(str(tmp_path))
    assert [(t.part, t.code) for t in times] == [("A 1", "abc1234"), ("A 2", "abc1234"), ("B 1", ""),
                                                 ("A 1", "def5678-dirty")]
    text = "\n".join(runs.run_section(str(tmp_path)))
    assert "Code (parts run with it): `abc1234` (2); not recorded (1); `def5678-dirty` (1)." in text
    assert "**The parts ran with more than one version of the code**" in text
    (tmp_path / "timings.tsv").write_text(f"pretrain\tA 1\t600\t{stamp}\thost\tabc1234\n"
                                          f"pretrain\tB 1\t540\t{stamp}\thost\n")
    text = "\n".join(runs.run_section(str(tmp_path)))
    assert "`abc1234` (1); not recorded (1)." in text and "more than one version" not in text


def test_logged_seconds_sum_each_sitting_and_leave_out_the_time_between_them(tmp_path):
    """A pre-training's log over two sittings (a kill after 150 s, the restart 3 hours later, 200 s more), its
    launcher's untimed settings lines opening each and an untimed warning inside the second: the sittings' own
    seconds, as a plain sum of last - first over each run of timed lines computes them, not the hours between."""
    from tupe_study.timings import logged_seconds

    log = tmp_path / "train.log"
    assert logged_seconds(str(log)) == 0  # no log: a first sitting
    log.write_text("pretrain.sh: environment (NAME=value [default])\n  VARIANT=bert-a [tupe-r]\n"
                   "2026-12-02 15:23:32 | INFO | fairseq_cli.train | {'_name': None}\n"
                   "2026-12-02 15:24:02 | INFO | train_inner | {\"num_updates\": \"30\"}\n"
                   "2026-12-02 15:26:02 | INFO | valid | {\"valid_loss\": \"9.0\"}\n"
                   "pretrain.sh: environment (NAME=value [default])\n"
                   "2026-12-02 18:26:02 | INFO | fairseq.trainer | Loaded checkpoint (epoch 3 @ 780 updates)\n"
                   "2026-12-02 18:27:42 | INFO | train_inner | {\"num_updates\": \"810\"}\n"
                   "/x/torch/nn/functional.py:5: UserWarning: a warning inside the sitting\n"
                   "2026-12-02 18:27:42 | INFO | train_inner | {\"num_updates\": \"840\"}\n"
                   "2026-12-02 18:29:22 | INFO | fairseq_cli.train | done training in 200.0 seconds\n")
    assert logged_seconds(str(log)) == (15 * 60 + 26 * 60 + 2 - (15 * 60 + 23 * 60 + 32)) + 100 + 100 == 350


def test_code_version_is_the_checkouts_commit_and_says_dirty(tmp_path, starts_process):
    from tupe_study.timings import code_version

    assert code_version(str(tmp_path)) == "unknown"  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_version(str(tmp_path)) == head
    (tmp_path / "new.txt").write_text("untracked\n")  # untracked files are not the code
    assert code_version(str(tmp_path)) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert code_version(str(tmp_path)) == f"{head}-dirty"


def test_report_downstream_differences_with_bootstrap_intervals(tmp_path):
    """A is right wherever B is on every paired run (+10, +7, +19 points): its interval lies above 0, but one
    pre-training seed only says the dev set tells them apart. B - C is 0, 0, -9: a third of the resamples
    draw no third run, so the interval reaches 0. Exploratory: p unadjusted, no Holm column."""
    out = tmp_path / "study"
    make_study(out)
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "400"]) == 0
    diffs = {(r["a"], r["b"]): r for r in csv.DictReader((out / "differences.csv").open())}
    ab, bc = diffs["A", "B"], diffs["B", "C"]
    assert float(ab["difference"]) == pytest.approx(12.0) and ab["runs"] == "3" and ab["examples"] == "100"
    assert 0 < float(ab["low"]) <= 12 <= float(ab["high"]) and ab["interval"] == "dev set only (1 pre-training seed)"
    assert float(bc["difference"]) == pytest.approx(-3.0) and float(bc["high"]) == 0.0
    assert bc["interval"] == "interval holds 0"
    assert ab["method"] == "paired bootstrap" and ab["pretrain_seeds"] == "1" and float(ab["p"]) <= 0.05
    assert "p_holm" not in ab  # one family per report: its declared comparisons, none here
    md = (out / "report.md").read_text()
    assert "| A - B | SST | +12.00 | [" in md and "Exploratory, every one" in md and "settled" not in md.lower()


def test_seed_noise_stands_beside_every_downstream_difference(tmp_path):
    """A has a second pre-training seed whose SST runs score 60, 62, 64 (median 62; seed 1's median is 82): the
    study's seed noise on SST is 20 points, the largest spread of one model over its own seeds.
    A - B (+12, one shared seed: the dev set tells them apart) is within it, and so is the span of the models'
    medians (4 points): no order is read. With seed 2 at 80, 81, 83 (median 81: noise 1), A - B is beyond it; the
    models' span is still within the noise: a seed SD from one model's two seeds (1 df) says little."""
    out = tmp_path / "study"
    make_study(out)
    d = out / "pretrain" / "A" / "seed2"
    d.mkdir(parents=True)
    finished_log(d, 'x | INFO | valid | {"valid_loss": "1.0", "valid_num_updates": "100"}\n')
    for scores, noise, beyond in (([60, 62, 64], 20.0, "False"), ([80, 81, 83], 1.0, "True")):
        shutil.rmtree(out / "finetune" / "A" / "seed2", ignore_errors=True)
        for seed, score in enumerate(scores, 1):
            write_sst_run(out / "finetune" / "A" / "seed2" / "SST-2" / f"lr1e-4_seed{seed}", seed, score)
        assert sr.main([str(out), "--variants", "A:1,2 B C", "--total-updates", "100", "--resamples", "200"]) == 0
        diffs = {(r["a"], r["b"], r["task"]): r for r in csv.DictReader((out / "differences.csv").open())}
        ab, bc = diffs["A", "B", "SST"], diffs["B", "C", "SST"]  # one column: no separate average
        assert float(ab["difference"]) == pytest.approx(12.0) and ab["pretrain_seeds"] == "1"
        assert float(ab["seed_noise"]) == pytest.approx(noise) and ab["beyond_seed_noise"] == beyond
        assert float(bc["seed_noise"]) == pytest.approx(noise) and bc["beyond_seed_noise"] == str(3.0 > noise)
        md = (out / "report.md").read_text()
        row = next(line for line in md.splitlines() if line.startswith("| A - B | SST | +12.00 |"))
        assert row.endswith(f"| {noise:.2f} | {'beyond' if beyond == 'True' else 'within'} |"), row
        assert f"SST {noise:.2f} (A, 2 seeds)" in md
        rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
        t = span_test([[82.0, float(statistics.median(scores))]] + [[float(rows[v]["SST_median"])] for v in "BC"])
        assert t.sd == pytest.approx(abs(82.0 - statistics.median(scores)) / math.sqrt(2)) and t.df == 1
        verdict = "**beyond the noise**: an order may be read" if t.beyond else "**within the noise**: read no order"
        assert f"SST: the models span {t.span:.2f}, models with no difference more than {t.limit:.2f} in 5%" in md
        assert f"p {t.p:.3f}: {verdict}" in md and not t.beyond  # 1 df: a seed SD measured on 2 seeds says little


def test_without_several_seeds_the_seed_noise_is_said_to_be_unmeasured(tmp_path):
    out = tmp_path / "study"
    make_study(out)
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "200"]) == 0
    md = (out / "report.md").read_text()
    assert "**Seed noise**: not measured" in md and "the seed noise is not measured" in md
    assert {r["seed_noise"] for r in csv.DictReader((out / "differences.csv").open())} == {""}


def test_word_order_sets_keep_words_and_swap_roles():
    from tupe_study.dev_eval import perturbed_sets

    examples = [("Two old men sit on a long wooden bench near the sea .", "A man is petting a dog ."),
                ("A girl runs .", "A child is sleeping .")]
    sets = perturbed_sets(examples, ["entailment", "neutral"], (3,), nli=True)
    assert sorted(sets) == ["original", "random", "role_swap", "role_swap_original", "shuffle_3"]
    premise = sets["shuffle_3"][0][0][0].split()
    words = examples[0][0].split()
    assert premise != words and premise[-1] == "."  # final punctuation stays
    for start in range(0, 12, 3):  # every window of 3 words keeps its own words
        assert sorted(premise[start:start + 3]) == sorted(words[start:start + 3])
    assert sorted(sets["random"][0][0][0].split()) == sorted(words)
    assert sets["role_swap"] == ([(examples[0][0], "A dog is petting a man .")], ["non-entailment"])
    assert sets["role_swap_original"] == ([examples[0]], ["entailment"])
    assert perturbed_sets(examples, ["entailment", "neutral"], (3,), nli=True) == sets  # fixed seeds
    assert "role_swap" not in perturbed_sets([("a b c d",)], ["1"], (3,), nli=False)


def test_report_lists_what_is_missing(tmp_path):
    out = tmp_path / "study"
    make_study(out)
    shutil.rmtree(out / "finetune" / "C")
    (out / "locality" / "B" / "seed1.csv").unlink()
    assert sr.main([str(out), "--variants", "A,B,C", "--total-updates", "100", "--pretrain-seeds", "1",
                    "--resamples", "200"]) == 0  # no interval is checked here
    md = (out / "report.md").read_text()
    assert "C seed 1: no finished fine-tuning run" in md
    assert "locality/B/seed1.csv: missing" in md
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert rows["C"]["downstream_avg"] == "" and rows["B"]["loc_pos"] == ""
    corr = {r["measure"]: r for r in csv.DictReader((out / "correlation.csv").open())}
    assert corr["locality (position-only)"]["n"] == "1"  # only A has both values


def test_report_names_a_curve_with_a_hole(tmp_path):
    """A validation missing from a log (a line lost at a kill) is named with its update; a complete curve, and an
    epoch's extra validation off the grid, are not; an unfinished curve is checked up to its last validation."""
    from tupe_study.runs import curve_holes

    assert curve_holes({25: 3.0, 50: 2.0, 75: 1.2, 100: 0.9}, 25, 100) == []
    assert curve_holes({25: 3.0, 31: 2.9, 50: 2.0, 100: 0.9}, 25, 100) == [75]
    assert curve_holes({25: 3.0, 75: 1.2}, 25, 100) == [50]  # unfinished: up to update 75
    assert curve_holes({25: 3.0}, 0, 100) == []  # no interval given: not checked
    out = tmp_path / "study"
    make_study(out)
    log = out / "pretrain" / "B" / "seed1" / "train.log"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"50"' not in line))
    argv = [str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "200"]
    assert sr.main(argv + ["--valid-interval", "25"]) == 0
    md = (out / "report.md").read_text()
    assert "B seed 1: no validation logged at update(s) 50, so its curve points there are read from the nearest" in md
    assert "A seed 1: no validation" not in md and "C seed 1: no validation" not in md
    assert sr.main(argv) == 0 and "no validation logged" not in (out / "report.md").read_text()  # not checked


def test_an_unfinished_pre_training_is_named_and_left_out_and_a_missing_one_is_not_called_unfit(tmp_path):
    """A report made while the study runs: C's pre-training has validated to update 50 of 100 (its last loss is no
    final loss: left out, named with its update), D's has not started (missing, named as such, not "not fit"); B,
    finished 0.5 bits below the unigram baseline, is the only model the warning calls not fit for purpose."""
    out = tmp_path / "study"
    make_study(out)
    log = out / "pretrain" / "C" / "seed1" / "train.log"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"75"' not in line and '"100"' not in line))
    assert sr.main([str(out), "--variants", "A B C D", "--total-updates", "100", "--resamples", "200",
                    "--min-gap-bits", "1"]) == 0
    md = (out / "report.md").read_text()
    problems = md.split("## Missing parts and problems")[1]
    assert "C seed 1: pre-training unfinished (last validation at update 50 of 100): its losses are left out" in problems
    assert "\n- pretrain/D/seed1/train.log: no validation loss (pre-training missing or unfinished)" in problems
    assert str(out) not in problems  # paths inside the study are its own: an archive's render reads the same
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert rows["C"]["final_valid_loss"] == "" and rows["D"]["final_valid_loss"] == ""
    assert float(rows["A"]["final_valid_loss"]) == pytest.approx(0.9)
    warning = next(line for line in md.splitlines() if "WARNING: not fit for purpose" in line)
    assert "** B did not end at least 1 bit(s) below" in warning  # B alone: not C, not D


def test_a_pre_training_without_its_done_marker_is_not_read_as_finished(tmp_path):
    """A pre-training that validated at its last update and then failed to save (a full disk) has every validation
    line of a finished one but no pretrain.done: its losses are left out and it is named, not read as a final loss
    (the GPU study counted such a seed in its declared comparisons)."""
    out = tmp_path / "study"
    make_study(out)
    (out / "pretrain" / "B" / "seed1" / "pretrain.done").unlink()
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--resamples", "200"]) == 0
    problems = (out / "report.md").read_text().split("## Missing parts and problems")[1]
    assert ("B seed 1: pre-training not finished (no pretrain.done beside pretrain/B/seed1/train.log: it is "
            "running, was stopped or failed): its losses are left out until it finishes") in problems
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert rows["B"]["final_valid_loss"] == "" and float(rows["A"]["final_valid_loss"]) == pytest.approx(0.9)


def test_a_study_that_fine_tunes_nothing_misses_no_fine_tuning_run(tmp_path):
    """TASKS=none (the GPU study's default): the report stage passes --finetune-grid none, and no model seed is named
    for lacking a fine-tuning run; without it, every one is."""
    out = tmp_path / "study"
    make_study(out)
    shutil.rmtree(out / "finetune")
    args = [str(out), "--variants", "A,B,C", "--total-updates", "100", "--resamples", "200"]
    assert sr.main(args) == 0
    assert "A seed 1: no finished fine-tuning run" in (out / "report.md").read_text()
    assert sr.main(args + ["--finetune-grid", "none"]) == 0
    missing = (out / "report.md").read_text().split("## Missing parts and problems")[1]
    assert "fine-tuning" not in missing and "- none" in missing
    from tupe_study.plan import Plan
    from tupe_study.stages import run_report

    (out / "settings.env").write_text("PRESET=tiny\n")
    plan = Plan.from_environ({"OUT": str(out), "PRESET": "tiny", "VARIANTS": "bert-a", "TASKS": "none"},
                             known={"bert-a": "BERT-A"})
    called = []
    import tupe_study.report as report_module

    real = report_module.main
    report_module.main = lambda argv, spec=None: called.append(argv) or called.append(spec) or 0
    try:
        run_report(plan)
    finally:
        report_module.main = real
    assert called and called[0][called[0].index("--finetune-grid") + 1] == "none"
    assert called[1] == plan.report_spec  # the declaration, as an object: nothing declared here


def test_report_names_model_seeds_with_only_some_fine_tuning_runs(tmp_path):
    """With the grid the study ran, a model seed that lacks one run is named with the run it lacks; without
    it, only a model seed with no run at all is (the report cannot know the grid)."""
    out = tmp_path / "study"
    make_study(out)
    shutil.rmtree(out / "finetune" / "B" / "seed1" / "SST-2" / "lr1e-4_seed3")
    args = [str(out), "--variants", "A,B,C", "--total-updates", "100", "--resamples", "200"]  # no interval checked
    assert sr.main(args + ["--finetune-grid", "SST-2:1e-4:1,2,3"]) == 0
    md = (out / "report.md").read_text()
    assert "B seed 1: 1 fine-tuning run(s) not finished: SST-2 LR 1e-4 seed 3" in md
    assert "A seed 1:" not in md and "C seed 1:" not in md
    assert sr.main(args + ["--finetune-grid", "SST-2,RTE:1e-4:1"]) == 0  # a task no model has
    md = (out / "report.md").read_text()
    assert all(f"{v} seed 1: 1 fine-tuning run(s) not finished: RTE LR 1e-4 seed 1" in md for v in "ABC")
    assert sr.main(args) == 0
    assert "fine-tuning run(s) not finished" not in (out / "report.md").read_text()
    with pytest.raises(SystemExit):
        sr.main(args + ["--finetune-grid", "SST-2:fast:1"])


def test_report_paired_by_two_pretraining_seeds(tmp_path):
    out = tmp_path / "study"
    make_study(out)
    for v, loss in (("A", 1.0), ("B", 1.45), ("C", 0.6)):  # seed 2: A-B = -0.45 (seed 1: -0.6)
        d = out / "pretrain" / v / "seed2"
        d.mkdir(parents=True)
        finished_log(d, f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "100"}}\n')
    assert sr.main([str(out), "--variants", "A B C", "--total-updates", "100", "--pretrain-seeds", "1 2"]) == 0
    md = (out / "report.md").read_text()
    # A - B: -0.6 and -0.45: mean -0.525, s = 0.075 sqrt 2 = 0.1061 (above the logs' 1-decimal step, 0.1), se 0.075,
    # t = -7 with 1 degree of freedom: p = 1 - 2 atan(7) / pi = 0.090, t-interval -0.525 +- 12.706 x 0.075;
    # A - C: 0.1, 0.4. Exploratory: unadjusted p, no verdict
    assert "| A - B | -0.6000 | -0.4500 | -0.5250 | 0.1061 | [-1.4780, +0.4280] | 0.090 |" in md
    assert "| A - C | 0.1000 | 0.4000 | 0.2500 |" in md and "Exploratory: a t-test over the per-seed differences" in md
    assert "Holm" not in md.split("### Differences paired")[1].split("##")[0]
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert float(rows["A"]["final_valid_loss"]) == pytest.approx(0.95)
    assert float(rows["A"]["final_valid_loss_spread"]) == pytest.approx(0.1)
    assert rows["A"]["final_valid_loss_by_seed"] == "1:0.9000 2:1.0000"


def test_loss_pairs_of_a_large_study_list_only_those_with_two_seeds():
    """9 variants (36 pairs), A and B with three seeds: only A - B is a row, the rest counted; 8 variants: all rows.
    A - B: 0.5, 0.6, 0.7 (mean 0.6, s 0.1; t_{0.975, 2} = 4.3027: [0.352, 0.848]; t = 10.39, p = 1 - t / sqrt(2 +
    t^2) = 0.0092), the one pair tested; exploratory, so no verdict."""
    names = [chr(ord("A") + i) for i in range(9)]
    values = {n: {1: 0.1 * i} for i, n in enumerate(names)}
    values["A"], values["B"] = {1: 1.5, 2: 1.6, 3: 1.7}, {1: 1.0, 2: 1.0, 3: 1.0}
    pairs = compare.paired_differences(values)
    md = "\n".join(report_markdown._paired_lines(pairs, 3, "loss", 0.001))
    assert "35 of the 36 pairs share one pre-training seed: not listed" in md
    assert [line for line in md.splitlines() if line.startswith("| ") and " - " in line][1:] == [
        "| A - B | 0.5000 | 0.6000 | 0.7000 | 0.6000 | 0.1000 | [+0.3516, +0.8484] | 0.009 |"]
    few = [p for p in pairs if "I" not in (p.a, p.b)]
    assert sum(line.startswith("| ") and " - " in line for line in report_markdown._paired_lines(few, 3, "loss", 0.001)) == 1 + 28


def test_variant_seeds_own_seeds():
    assert runs.variant_seeds("bert-a:1,2 tupe-r:1,3 bert-r", [1]) == [("bert-a", [1, 2]), ("tupe-r", [1, 3]), ("bert-r", [1])]
    assert runs.variant_seeds("A,B C", [1, 2]) == [("A", [1, 2]), ("B", [1, 2]), ("C", [1, 2])]
    with pytest.raises(ValueError, match="NAME:SEED"):
        runs.variant_seeds(":1", [1])


def test_report_variants_with_their_own_seeds(tmp_path):
    """A and B with two seeds, C with one: pairs with C use seed 1 only; nothing is reported missing; the
    downstream average by pre-training seed and its spread (B's second pre-training fine-tunes 6 points lower)."""
    out = tmp_path / "study"
    make_study(out)
    for v, loss in (("A", 1.0), ("B", 1.45)):
        d = out / "pretrain" / v / "seed2"
        d.mkdir(parents=True)
        finished_log(d, f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "100"}}\n')
        if v == "A":
            shutil.copytree(out / "finetune" / v / "seed1", out / "finetune" / v / "seed2")
        for k, score in enumerate([60, 65, 70] if v == "B" else [], 1):  # seed 1: 70, 75, 71 (median 71)
            write_sst_run(out / "finetune" / v / "seed2" / "SST-2" / f"lr1e-4_seed{k}", k, score)
        shutil.copy(out / "locality" / v / "seed1.csv", out / "locality" / v / "seed2.csv")
    assert sr.main([str(out), "--variants", "A:1,2 B:1,2 C", "--total-updates", "100", "--resamples", "200"]) == 0
    md = (out / "report.md").read_text()
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert rows["B"]["downstream_avg_by_seed"] == "1:71.0000 2:65.0000" and float(rows["B"]["downstream_avg"]) == 68
    assert float(rows["B"]["downstream_avg_seed_spread"]) == 6 and float(rows["A"]["downstream_avg_seed_spread"]) == 0
    assert rows["C"]["downstream_avg_seed_spread"] == ""
    assert "| 68.00 | 1: 71.00, 2: 65.00 (spread 6.00) |" in md and "| 75.00 | — |" in md  # C: one seed
    assert "cannot see: A 0.00, B 6.00 points" in md
    assert "| A - B | -0.6000 | -0.4500 | -0.5250 | 0.1061 | [-1.4780, +0.4280] | 0.090 |" in md  # the one pair tested
    assert "| A - C | 0.1000 | — | 0.1000 | — | — | — |" in md  # C has no seed 2: seed 1 only
    assert "seed2" not in md.split("## Missing parts and problems")[1].split("##")[0]
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    assert rows["A"]["pretrain_seeds"] == "1 2" and rows["C"]["pretrain_seeds"] == "1"


# ------------------------------------------------------------------------------------- objectives


def test_objectives_are_entries_with_their_own_folders(tmp_path):
    """OBJECTIVES="mlm electra": every variant once per objective, MLM first; the MLM folders are where a
    study without objectives has them; the longer-inputs stage skips ELECTRA; bad values are usage errors."""
    from tupe_study.plan import Plan
    from tupe_study.runs import split_label
    from tupe_study.settings import UsageError
    from tupe_study.stages import longer_parts

    env = {"OUT": str(tmp_path / "s"), "PRESET": "cpu-small", "TASKS": "none", "VARIANTS": "bert-a tupe-r:3",
           "PRETRAIN_SEEDS": "1 2", "OBJECTIVES": "mlm electra", "GENERATOR_SIZE_DIVISOR": "4"}
    plan = Plan.from_environ(env)
    assert [(e.label, e.name, e.objective, e.seeds) for e in plan.variants] == [
        ("bert-a", "bert-a", "mlm", (1, 2)), ("tupe-r", "tupe-r", "mlm", (3,)),
        ("bert-a+electra", "bert-a", "electra", (1, 2)), ("tupe-r+electra", "tupe-r", "electra", (3,))]
    # seed by seed, so that a study cut short leaves complete pairs
    assert plan.pretrain_parts() == [("bert-a", 1), ("tupe-r", 3), ("bert-a+electra", 1), ("tupe-r+electra", 3),
                                     ("bert-a", 2), ("bert-a+electra", 2)]
    assert longer_parts(plan) == [("bert-a", 1), ("tupe-r", 3), ("bert-a", 2)]
    assert plan.pretrain_dir("bert-a", 1) == str(tmp_path / "s" / "pretrain" / "bert-a" / "seed1")
    assert plan.pretrain_dir("bert-a+electra", 1) == str(tmp_path / "s" / "pretrain" / "bert-a+electra" / "seed1")
    assert plan.variants_text() == "bert-a:1,2 tupe-r:3 bert-a+electra:1,2 tupe-r+electra:3"
    assert plan.models_text() == "2 variants x objectives mlm, electra"
    assert split_label("tupe-r+electra") == ("tupe-r", "electra") and split_label("tupe-r") == ("tupe-r", "mlm")
    default = Plan.from_environ(dict(env, OBJECTIVES=""))  # the default: MLM only, as before objectives
    assert [e.label for e in default.variants] == ["bert-a", "tupe-r"] and default.models_text() == "2 variants"
    # cpu-small's 128-wide encoder with ELECTRA-Base's 1/3 generator: refused before anything is prepared
    with pytest.raises(UsageError, match="GENERATOR_SIZE_DIVISOR=auto: --generator-size-divisor 3 does not divide"):
        Plan.from_environ(dict(env, GENERATOR_SIZE_DIVISOR=""))
    for bad, line in (("mlm bert", "OBJECTIVES must be a list (spaces or commas) of which each is mlm or electra, not "
                                   "'bert' (in 'mlm bert')"),
                      ("electra electra", "OBJECTIVES: one or more of mlm electra, each once, not 'electra electra'")):
        with pytest.raises(UsageError) as refused:
            Plan.from_environ(dict(env, OBJECTIVES=bad))
        assert str(refused.value) == line
    with pytest.raises(UsageError, match="chosen for every variant with OBJECTIVES"):
        Plan.from_environ(dict(env, VARIANTS="bert-a tupe-r+electra:1"))


def test_electra_settings_are_recorded_once_the_study_has_electra_models():
    """An MLM study records no ELECTRA setting, so adding ELECTRA later may pick its generator; from then on
    the ELECTRA settings are the study's like any other."""
    from dataclasses import replace

    from tupe_study.settings import changed_settings, merged_text, read, recorded_text

    mlm = read({"PRESET": "cpu-small", "OUT": "x"})
    both = replace(mlm, OBJECTIVES="mlm electra", GENERATOR_SIZE_DIVISOR="4")
    assert "GENERATOR_SIZE_DIVISOR" not in recorded_text(mlm) and "DISC_WEIGHT" not in recorded_text(mlm)
    assert "GENERATOR_SIZE_DIVISOR=4\nDISC_WEIGHT=50\n" in recorded_text(both)
    old = recorded_text(mlm)
    assert changed_settings(old, recorded_text(both)) == []  # the MLM study never used them
    merged = merged_text(old, recorded_text(both))
    assert merged == old + "GENERATOR_SIZE_DIVISOR=4\nDISC_WEIGHT=50\n"
    assert changed_settings(merged, recorded_text(replace(both, GENERATOR_SIZE_DIVISOR=2))) == [
        "< GENERATOR_SIZE_DIVISOR=4", "> GENERATOR_SIZE_DIVISOR=2"]
    assert changed_settings(merged, recorded_text(mlm)) == [] and merged_text(merged, recorded_text(mlm)) == merged


def test_a_setting_no_longer_read_does_not_refuse_an_older_study():
    """A settings.env written when a setting existed that no stage reads any more (LONGER_TOKENS: the
    longer-inputs stage re-runs pre-training's own validation since 31948e2) resumes and reports: the setting
    is no longer recorded, and the older line is kept as it was written."""
    from tupe_study.settings import changed_settings, merged_text, read, recorded_text

    now = recorded_text(read({"PRESET": "cpu-small", "OUT": "x"}))
    assert "LONGER_TOKENS" not in now
    older = now.replace("LENGTH_FACTORS=1 2 4\n", "LENGTH_FACTORS=1 2 4\nLONGER_TOKENS=65536\n")
    assert older != now
    assert changed_settings(older, now) == [] and merged_text(older, now) == older


def test_a_study_recorded_under_the_old_names_resumes_and_the_old_names_still_set_the_new_ones():
    """The study's settings are named as pretrain.sh's and finetune.sh's (SENTENCES_PER_UPDATE, LR, LRS, EPOCHS,
    SENTENCES_PER_BATCH, EXTRA_ARGS; they were BATCH_SIZE, PRETRAIN_LR, FT_*): a settings.env written under the old
    names reads as the new ones (the same values resume; another value is refused by its new name), a list written
    with commas is the same list, and an old name in the environment still sets the new one, with a warning."""
    from tupe_study.settings import changed_settings, read, recorded_text

    now = recorded_text(read({"PRESET": "cpu-small", "OUT": "x"}))
    assert "\nSENTENCES_PER_UPDATE=32\n" in now and "\nLR=1e-3\n" in now and "\nLRS=5e-4\n" in now
    older = (now.replace("SENTENCES_PER_UPDATE=", "BATCH_SIZE=").replace("\nLR=", "\nPRETRAIN_LR=")
             .replace("LRS=", "FT_LRS=").replace("\nEPOCHS=", "\nFT_EPOCHS=")
             .replace("SENTENCES_PER_BATCH=", "FT_BATCH=").replace("EXTRA_ARGS=", "FT_EXTRA_ARGS="))
    assert "BATCH_SIZE=32" in older and "\nLR=" not in older
    assert changed_settings(older, now) == []
    said = []
    config = read({"PRESET": "cpu-small", "OUT": "x", "PRETRAIN_LR": "2e-3", "FT_LRS": "5e-4,1e-3"}, said.append)
    assert str(config.LR) == "2e-3" and [str(x) for x in config.LRS] == ["5e-4", "1e-3"]
    assert said == ["warning: PRETRAIN_LR is a deprecated name of LR: set LR=2e-3 instead",
                    "warning: FT_LRS is a deprecated name of LRS: set LRS=5e-4,1e-3 instead"]
    assert changed_settings(older, recorded_text(config)) == ["< LR=1e-3", "> LR=2e-3", "< LRS=5e-4", "> LRS=5e-4 1e-3"]
    assert changed_settings(older.replace("FT_LRS=5e-4", "FT_LRS=5e-4,1e-3"), recorded_text(config))[:2] == [
        "< LR=1e-3", "> LR=2e-3"]  # the LRs written with a comma are the same list


def test_word_order_check_covers_nope_with_every_objective():
    from tupe_study.compare import OrderDrop
    from tupe_study.report_markdown import _order_lines

    still = [OrderDrop("nope", "SST", "random", [0.0], 10, 16), OrderDrop("nope+electra", "SST", "random", [0.0], 10, 16)]
    assert any(line.startswith("Check: nope (no position information) moves by at most 0.00") for line in _order_lines(still))
    moved = still[:1] + [OrderDrop("nope+electra", "SST", "random", [5.0, 4.0], 10, 16)]
    assert any("**CHECK FAILED:**" in line and "+4.50 (nope+electra SST random)" in line for line in _order_lines(moved))


def electra_log(losses: Dict[int, tuple]) -> str:
    """ELECTRA validations (json): update -> (loss, gen_loss, gen_acc, disc_loss, disc_acc, replace_rate)."""
    keys = ("loss", "gen_loss", "gen_acc", "disc_loss", "disc_acc", "replace_rate")
    return "".join("x | INFO | valid | " + json.dumps({**{f"valid_{k}": str(x) for k, x in zip(keys, vals)},
                                                       "valid_num_updates": str(u)}) + "\n"
                   for u, vals in losses.items())


def test_rate_entropy_and_untrained_discriminators():
    """The entropy of a yes/no label against hand values; a discriminator that removed less than 10% of it, or
    whose loss is unknown, is named."""
    assert sr.rate_entropy_bits(50.0) == pytest.approx(1.0)
    assert sr.rate_entropy_bits(13.4) == pytest.approx(0.568307, abs=1e-6)  # -(.134 log2 .134 + .866 log2 .866)
    assert sr.rate_entropy_bits(0.0) == 0.0 and sr.rate_entropy_bits(None) is None
    rows = [{"variant": "a+electra", "objective": "electra", "disc_gain": 0.0065},
            {"variant": "b+electra", "objective": "electra", "disc_gain": 0.25},
            {"variant": "c+electra", "objective": "electra", "disc_gain": None},
            {"variant": "b", "objective": "mlm"}]
    assert sr.untrained_discriminators(rows) == ["a+electra", "c+electra"]


def test_parse_valid_curves_of_electra_json_and_simple(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(electra_log({10: (400.0, 9.5, 3.0, 7.8, 80.0, 14.0)})
                   + "y | INFO | valid | epoch 001 | valid on 'valid' subset | loss 300 | gen_loss 8.25 | gen_ppl 304 | "
                   "disc_loss 5.5 | disc_acc 90 | replace_rate 12.5 | num_updates 20\n")
    curves = runs.parse_valid_curves(str(log), runs.ELECTRA_KEYS)
    assert curves["gen_loss"] == {10: 9.5, 20: 8.25} and curves["disc_loss"] == {10: 7.8, 20: 5.5}
    assert curves["gen_acc"] == {10: 3.0} and curves["replace_rate"] == {10: 14.0, 20: 12.5}
    assert runs.parse_valid_curve(str(log)) == {10: 400.0, 20: 300.0}  # ELECTRA's `loss`: the weighted sum


def add_electra(out: Path, name: str, seed: int, gen: float, disc: float, sst: List[int]) -> None:
    """An ELECTRA model of make_study's layout: its log (with a large weighted `loss`), SST-2 runs, locality."""
    d = out / "pretrain" / name / f"seed{seed}"
    d.mkdir(parents=True)
    finished_log(d, electra_log({50: (60.0, gen + 1, 10.0, disc + 0.1, 85.0, 13.0),
                                100: (gen + 50 * disc, gen, 20.0, disc, 90.0, 11.0)}))
    for k, score in enumerate(sst, 1):
        run = out / "finetune" / name / f"seed{seed}" / "SST-2" / f"lr1e-4_seed{k}"
        write_sst_run(run, k, score)
    (out / "locality" / name).mkdir(parents=True, exist_ok=True)
    (out / "locality" / name / f"seed{seed}.csv").write_text(
        "source,layer,head,locality,symmetry,symmetry_scaled\nposition,all,mean,0.3,0.8,0.5\n"
        "attention (5 sentences),all,mean,0.2,0.6,0.5\n")


def test_report_keeps_electra_losses_apart_and_compares_downstream(tmp_path):
    """A+electra and C+electra beside make_study's MLM models: their generator and discriminator losses in a
    table of their own (C's generator lower on both seeds), nothing of theirs in the MLM-loss tables or the
    unigram warning (their weighted `loss` is far above the baseline), their downstream scores paired with
    the MLM models' like any other, and the longer-inputs table says why they are not measured."""
    out = tmp_path / "study"
    make_study(out)
    for v, loss in (("A", 1.0), ("B", 1.45), ("C", 0.6)):
        d = out / "pretrain" / v / "seed2"
        d.mkdir(parents=True)
        finished_log(d, f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "100"}}\n')
    add_electra(out, "A+electra", 1, gen=4.0, disc=0.30, sst=[90, 95, 92])
    add_electra(out, "A+electra", 2, gen=4.2, disc=0.32, sst=[91, 95, 92])
    add_electra(out, "C+electra", 1, gen=3.5, disc=0.35, sst=[70, 75, 80])
    add_electra(out, "C+electra", 2, gen=3.6, disc=0.33, sst=[70, 75, 80])
    (out / "longer" / "A").mkdir(parents=True)
    (out / "longer" / "A" / "seed1.json").write_text(json.dumps(
        {"variant": "bert_a", "positions": 256, "lengths": {"64": 1.5, "128": None}, "not_beyond": "learned"}))
    assert sr.main([str(out), "--variants", "A:1 B:1 C:1 A+electra:1,2 C+electra:1,2", "--total-updates", "100",
                    "--resamples", "200"]) == 0
    rows = {r["variant"]: r for r in csv.DictReader((out / "study.csv").open())}
    ae = rows["A+electra"]
    assert ae["objective"] == "electra" and rows["A"]["objective"] == "mlm"
    assert ae["final_valid_loss"] == "" and ae["below_unigram_bits"] == ""  # not an MLM loss
    assert float(ae["final_gen_loss"]) == pytest.approx(4.1) and float(ae["final_gen_loss_spread"]) == pytest.approx(0.2)
    assert float(ae["final_disc_loss"]) == pytest.approx(0.31) and float(ae["final_replace_rate"]) == 11.0
    assert float(ae["SST_median"]) == 92 and float(ae["loc_pos"]) == 0.3
    assert ae["longer_not_measured"].startswith("ELECTRA: the discriminator") and rows["A"]["longer_not_measured"] == "learned"
    md = (out / "report.md").read_text()
    mlm_section = md.split("## Pre-training: validation MLM loss")[1].split("## Pre-training: ELECTRA")[0]
    assert "electra" not in mlm_section  # neither in the loss table nor in the pairs
    assert "B did not end at least 1 bit" in md and "A+electra" not in md.split("## Variants")[0]
    assert "| A+electra | — | electra | 1, 2 |" in md
    electra = md.split("## Pre-training: ELECTRA")[1].split("## Longer inputs")[0]
    unigram = float(rows["A"]["unigram_bits"])
    assert float(ae["gen_below_unigram_bits"]) == pytest.approx(unigram - 4.1)
    # replace rate 11%: entropy 0.49992 bits; discriminator losses 0.30 and 0.32 remove 40.0% and 36.0% of it
    assert float(ae["disc_rate_entropy_bits"]) == pytest.approx(0.49992, abs=1e-5)
    assert float(ae["disc_gain"]) == pytest.approx(((0.49992 - 0.30) + (0.49992 - 0.32)) / 2 / 0.49992, abs=1e-5)
    assert (f"| A+electra | 4.100 | {unigram - 4.1:.3f} | 20.00 | 0.3100 | 0.4999 | 38.0 | — | 90.00 | 11.00 | "
            "0.200 / 0.0200 |") in electra
    assert "ELECTRA not trained yet" not in md  # both discriminators removed far more than 10%
    # C's generator 0.5 and 0.6 below A's: s = 0.0707, below the logs' 1-decimal step, so the test takes s = 0.1:
    # se 0.1 / sqrt 2, t = 0.55 / 0.0707 = 7.78 with 1 degree of freedom, p = 1 - 2 atan(7.78) / pi = 0.081,
    # interval 0.55 +- 12.706 x 0.0707 (unfloored: t = 11, p 0.058)
    se = 0.1 / math.sqrt(2)
    p = 1 - 2 * math.atan(0.55 / se) / math.pi
    assert (f"| A+electra - C+electra | 0.5000 | 0.6000 | 0.5500 | 0.0707 | [{0.55 - 12.7062 * se:+.4f}, "
            f"{0.55 + 12.7062 * se:+.4f}] | {p:.3f} |") in electra
    longer = md.split("## Longer inputs")[1].split("##")[0]
    assert "| A+electra | — | — | ELECTRA: the discriminator" in longer
    diffs = {(r["a"], r["b"]): r for r in csv.DictReader((out / "differences.csv").open())}
    # ELECTRA - MLM, paired on pre-training seed 1 (the one A has): +10, +13, +2 points
    assert float(diffs["A", "A+electra"]["difference"]) == pytest.approx(-25 / 3)
    assert float(diffs["A+electra", "C+electra"]["difference"]) == pytest.approx((20 + 20 + 12 + 21 + 20 + 12) / 6)
    assert diffs["A+electra", "C+electra"]["by_pretrain_seed"] == "1:17.3333 2:17.6667"
    # locality against downstream per objective: the MLM models' as without ELECTRA, the ELECTRA models' apart
    corr = {r["measure"]: r for r in csv.DictReader((out / "correlation.csv").open())}
    assert corr["locality (position-only)"]["n"] == "3" and corr["locality (position-only)"]["objective"] == "mlm"
    assert float(corr["locality (position-only)"]["spearman"]) == pytest.approx(1.0)  # as in the study without them
    assert corr["locality (position-only), electra models"]["n"] == "2"


# ---------------------------------------------------------------------------------- study.sh end to end


def study(out: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    full.update(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                OUT=str(out), PRESET="tiny", VARIANTS="nope", GPUS="0", NUM_WORKERS="0", PREP_JOBS="1",
                HARD_VOCAB_LIMIT="0", VOCAB_SIZE="300")
    full.update(env)
    p = subprocess.run([str(STUDY), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"study.sh {args} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return p


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("study_corpus")
    study_inputs(d)
    (d / "tasks" / "notes").mkdir()  # not a task: no train.tsv/dev.tsv
    return {"C4_DIR": str(d / "c4"), "TASKS_DIR": str(d / "tasks")}


# One tiny study, run once (module fixtures), then scenarios that each check one thing of it. The fixtures take
# what the scenarios read right after their run, so a scenario that runs the study again changes none of it.


def every_setting(**given: str) -> Dict[str, str]:
    """Every setting that study.sh --help lists, at the tiny preset's or its own default (an empty one as --slurm
    exports it, none), then ``given``; less those that ``study`` sets. So each one is in the environment of the
    study and of what it starts: SEEDS=1 study.sh failed at the C4 step (the study handed SEEDS to python -m
    tupe_preprocess.c4 task, which took it for a misspelt SEED)."""
    from tupe_study.settings import defaults

    helper = ("OUT", "PRESET", "VARIANTS", "GPUS", "NUM_WORKERS", "VOCAB_SIZE")
    return {**{n: v or "none" for n, v in defaults({"PRESET": "tiny"}).items() if n not in helper}, **given}


@pytest.fixture(scope="module")
def tiny_study(corpus, tmp_path_factory, starts_process) -> SimpleNamespace:
    """nope (blind to word order) through every stage with the tiny preset (4 updates, validations at 2 and 4), with
    every setting in the environment (``every_setting``), the C4 step's tasks in 2 processes (PREP_JOBS=2)."""
    out = tmp_path_factory.mktemp("tiny_study") / "study"
    env = every_setting(**corpus, TOTAL_UPDATES="4", VALID_POINTS="2", PREP_JOBS="2")
    p = study(out, **env)
    logs = [out / "pretrain" / "nope" / "seed1" / "train.log", *sorted((out / "finetune").rglob(".logs/*.out"))]
    return SimpleNamespace(
        out=out, env=env, log=p.stdout + p.stderr, md=(out / "report.md").read_text(),
        rows=list(csv.DictReader((out / "study.csv").open())),
        curve=runs.parse_valid_curve(str(out / "pretrain" / "nope" / "seed1" / "train.log")),
        timed=[line.split("\t")[:2] for line in (out / "timings.tsv").read_text().splitlines()],
        codes={line.split("\t")[5] for line in (out / "timings.tsv").read_text().splitlines()},
        order_csv=list(csv.DictReader((out / "order.csv").open())),
        part_logs={str(path.relative_to(out)): path.read_text() for path in logs},
        run_dir=out / "finetune" / "nope" / "seed1" / "SST-2" / "lr1e-3_seed1")


def test_tiny_study_csv_holds_the_pretraining_curve(tiny_study):
    (row,) = tiny_study.rows
    curve = tiny_study.curve
    assert row["variant"] == "nope" and sorted(curve) == [2, 4]  # a validation every TOTAL_UPDATES / VALID_POINTS
    # every validation of the log on that grid, once, and no end-of-epoch validation or save configured (tupe_study.stages
    # run_pretrain; the tiny study's epoch is longer than its 4 updates, so the flags are checked in its config)
    log = (tiny_study.out / "pretrain" / "nope" / "seed1" / "train.log").read_text()
    updates = [int(u) for u in re.findall(r'"valid_num_updates": "(\d+)"', log)]
    assert updates == [2, 4]
    assert "'validate_interval': 1000000" in log and "'save_interval': 1000000" in log
    assert float(row["final_valid_loss"]) == pytest.approx(curve[4], abs=1e-4)
    assert float(row["loss_at_50pct"]) == pytest.approx(curve[2], abs=1e-4)


def test_tiny_study_records_the_code_that_ran_each_part(tiny_study):
    from tupe_study.timings import code_version

    code = code_version()
    assert tiny_study.codes == {code} and (code == "unknown" or re.fullmatch(r"\S*[0-9a-f]{7}(-dirty)?", code))
    assert f"Code (parts run with it): `{code}` ({len(tiny_study.timed)})." in tiny_study.md


def test_tiny_study_csv_holds_every_stages_measure(tiny_study):
    (row,) = tiny_study.rows
    assert 0 <= float(row["SST_median"]) <= 100 and row["SST_spread"] == "0"  # one fine-tuning seed
    assert 0 < float(row["loc_pos"]) <= 1 and 0 < float(row["loc_attn"]) <= 1
    assert float(row["unigram_bits"]) > 0
    assert float(row["loss_len256"]) > 0


def test_tiny_study_report_names_the_variant_and_warns_it_is_untrained(tiny_study):
    md = tiny_study.md
    assert "WARNING: not fit for purpose" in md  # 4 updates do not beat the unigram baseline
    assert "| nope | no position information" in md  # the registry's one-line description
    assert "| **all** | 5 |" in md  # the parts timed
    assert (tiny_study.out / "overview.png").read_bytes()[:4] == b"\x89PNG"


def test_tiny_study_runs_each_part_once_in_stage_order(tiny_study):
    """The fine-tuning part wrote the word-order sets with the model it had loaded: the order stage found it done."""
    assert tiny_study.timed == [["prep", "all"], ["pretrain", "nope 1"], ["locality", "nope 1"], ["longer", "nope 1"],
                                ["finetune", "nope 1 SST-2 1e-3 1"]]


def test_tiny_study_records_its_settings_and_passes_no_deprecated_one(tiny_study):
    assert "differs from this run" not in tiny_study.log  # the first run records the settings
    first, rest = (tiny_study.out / "settings.env").read_text().split("\n", 1)  # the declared-at line, then the lines
    assert re.fullmatch(r"# declared \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ at commit ([0-9a-f]{7,}(-dirty)?|unknown)", first)
    assert rest.startswith("PRESET=tiny\n") and "\nVARIANTS=nope\nPRETRAIN_SEEDS=1\n" in rest
    assert len(tiny_study.part_logs) == 2  # pre-training's log and the fine-tuning run's
    deprecated = {name: line for name, text in tiny_study.part_logs.items() for line in text.splitlines()
                  if "is a deprecated name of" in line}
    assert deprecated == {}  # pretrain.sh and finetune.sh get today's names (SENTENCES_PER_UPDATE/_PER_BATCH)


def test_tiny_study_dev_predictions_score_what_the_run_logged(tiny_study):
    run_dir = tiny_study.run_dir
    result = json.loads((run_dir / "result.json").read_text())
    pred = json.loads((run_dir / "predictions.json").read_text())["subsets"]["valid"]
    assert len(pred["gold"]) == 16 and len(pred["pred"]) == 16  # tests/data/glue/SST-2/dev.tsv
    assert 100 * np.mean([g == q for g, q in zip(pred["gold"], pred["pred"])]) == pytest.approx(
        result["best_valid"]["valid"], abs=1e-6)
    assert not (run_dir / "checkpoints").exists()  # removed once the word-order sets are written


def test_tiny_study_word_order_does_not_move_nope(tiny_study):
    """The shuffles changed the text, yet nope predicts exactly the same."""
    order = json.loads((tiny_study.run_dir / "order.json").read_text())["sets"]
    assert sorted(order) == ["original", "random", "shuffle_3", "shuffle_6"]  # SST-2: no role swap
    for name in ("shuffle_3", "shuffle_6", "random"):
        assert order[name]["changed"] >= 12, name  # nearly every sentence has two distinct words in a window
        assert order[name]["pred"] == order["original"]["pred"], name
    drops = {d["perturbation"]: float(d["mean_drop"]) for d in tiny_study.order_csv}
    assert drops == {"shuffle_3": 0.0, "shuffle_6": 0.0, "random": 0.0}
    assert "Check: nope (no position information) moves by at most 0.00 points" in tiny_study.md


def test_tiny_study_longer_inputs_at_t_are_the_logged_validation(tiny_study):
    """The same targets at T, 2T, 4T (the model was pre-trained with 4T positions); at T, pre-training's own last
    validation (VALID_STEPS=0: the whole split), the loss its log and its checkpoint hold."""
    longer = json.loads((tiny_study.out / "longer" / "nope" / "seed1.json").read_text())
    curve = tiny_study.curve
    assert longer["positions"] == 256 and longer["not_beyond"] is None and longer["tokens"] > 0
    assert sorted(longer["lengths"], key=int) == ["64", "128", "256"]
    assert all(0 < x < 20 for x in longer["lengths"].values())
    assert longer["lengths"]["64"] == pytest.approx(curve[4], abs=0.002) and longer["logged_valid_loss"] == curve[4]
    assert float(tiny_study.rows[0]["loss_len256"]) == pytest.approx(longer["lengths"]["256"], rel=1e-5)
    # block by block (tupe_study.valid_se): every block of the split, summing back to the logged loss
    per = json.loads((tiny_study.out / "longer" / "nope" / "seed1.blocks.json").read_text())
    counted = json.loads((tiny_study.out / "c4" / "valid_blocks.json").read_text())  # prep counted the same split
    # fairseq's batch_by_size with --required-batch-size-multiple 8 drops the last blocks short of a multiple of 8
    # (the longest): the whole split is validated but for those, and the stage scores what the validation scored
    assert len(per["block"]) == longer["blocks"]["64"] == counted["blocks"] - counted["blocks"] % 8
    assert per["block"] == sorted(per["block"]) and max(per["block"]) < counted["blocks"]
    assert sum(per["masked"]) == longer["masked"] and counted["tokens"] > longer["tokens"]
    assert sum(per["bits"]) / sum(per["masked"]) == pytest.approx(curve[4], abs=0.002)
    assert longer["per_block_total_bits"] == pytest.approx(longer["lengths"]["64"], abs=1e-5)
    md = tiny_study.md
    assert f"scored on {len(per['block']):,} blocks of the held-out split" in md and "| nope | 1 |" in md
    problems = md.split("## Missing parts and problems")[1]
    assert f"the held-out split holds {counted['blocks']:,} blocks of 64 tokens" in problems  # VALID_STEPS=0, small
    assert "--valid-fraction 0.15" in problems


def test_tiny_study_list_says_every_part_is_done(tiny_study):
    listing = study(tiny_study.out, "--list", **tiny_study.env).stdout.splitlines()
    assert [line.split("\t")[0] for line in listing] == ["prep", "pretrain", "locality", "longer", "finetune", "order",
                                                         "report"]
    assert all(line.endswith("\tdone") for line in listing), listing


def test_tiny_study_one_run_per_folder_and_readers_beside_a_live_lock(tiny_study, monkeypatch, capsys, tmp_path):
    """The study left no lock (OUT's, its parts', the C4 OUT_DIR's). With live locks planted (pid 1 on this host) on
    OUT and on the pre-training's folder (pretrain.sh's SAVE_DIR lock: the study's route takes the same file),
    --list, --report, --archive and --plan read beside them and write no settings.env; a whole study.sh on OUT and
    --part pretrain 0 are refused at once, exit 2, naming the holder (tupe_common/lock.py). study.sh's function in
    this process (the shell file runs in the tests above)."""
    from tupe_study.__main__ import main
    from tupe_common import lock
    from tupe_pretrain.pretrain import save_dir_lock

    out = tiny_study.out
    assert not list(out.rglob("*.lock")) and not list(out.rglob(".run.lock*"))
    for name, value in {**dict(OUT=str(out), PRESET="tiny", VARIANTS="nope", GPUS="0", NUM_WORKERS="0",
                               HARD_VOCAB_LIMIT="0", VOCAB_SIZE="300"), **tiny_study.env}.items():
        monkeypatch.setenv(name, value)
    live = json.dumps({"pid": 1, "host": lock.host(), "started": "2026-01-01T00:00:00Z", "token": "t"})
    planted = [out / lock.LOCK_NAME, Path(save_dir_lock(str(out / "pretrain" / "nope" / "seed1")))]
    for path in planted:
        path.write_text(live)
    declared = (out / "settings.env").read_bytes()
    try:
        assert main(["--list"]) == 0
        assert all(line.endswith("\tdone") for line in capsys.readouterr().out.splitlines())
        assert main(["--report"]) == 0 and main(["--archive", str(tmp_path / "evidence")]) == 0  # readers
        assert (tmp_path / "evidence" / "manifest.json").is_file()
        assert main(["--plan", str(out)]) == 2  # a reader too: here refused for the study's own reason
        assert "--plan needs ENDPOINTS" in capsys.readouterr().err
        assert (out / "settings.env").read_bytes() == declared  # no reader writes the declaration
        for args, folder in (([], out), (["--part", "pretrain", "0"], out / "pretrain" / "nope" / "seed1")):
            assert main(args) == 2, args
            last = capsys.readouterr().err.strip().splitlines()[-1]
            assert last.startswith(f"study.sh: error: {folder} is in use by another run (pid 1 on {lock.host()}, "), last
    finally:
        for path in planted:
            path.unlink()


def test_tiny_study_rerun_runs_nothing_again(tiny_study):
    out = tiny_study.out
    checkpoint, timings = out / "pretrain" / "nope" / "seed1" / "checkpoint_last.pt", out / "timings.tsv"
    before = checkpoint.stat().st_mtime_ns, timings.read_text()
    again = study(out, **tiny_study.env)
    assert again.stderr.count("done, skipping") == 6  # every part but the report
    assert (checkpoint.stat().st_mtime_ns, timings.read_text()) == before


def test_tiny_study_stages_runs_only_the_stages_named_then_the_report(tiny_study):
    """--stages locality (what make gpu-study runs after its pre-trainings): the lost locality measurement is redone,
    no other stage is visited (not even to skip it), and the report is rewritten; --stages report or a list missing is
    refused, exit 2."""
    out = tiny_study.out
    csv_path = out / "locality" / "nope" / "seed1.csv"
    kept = csv_path.read_text()
    csv_path.unlink()
    p = study(out, "--lanes", "2", "--stages", "locality", **tiny_study.env)
    assert csv_path.read_text().splitlines()[0] == kept.splitlines()[0]  # measured again
    assert "locality nope 1: finished" in p.stderr and "report all: finished" in p.stderr
    assert not re.search(r"(pretrain|finetune|order|longer) .*(done, skipping|finished)", p.stderr), p.stderr
    for bad in (["--stages", "report"], ["--lanes", "2", "--stages"], ["--stages", "locality", "--list"]):
        q = study(out, *bad, check=False, **tiny_study.env)
        assert q.returncode == 2 and "study.sh: error: --stages S1,S2: stages of prep, sweep, pretrain," in q.stderr, (bad, q.stderr)


def test_tiny_study_lost_word_order_sets_say_how_to_redo_them(tiny_study):
    """After the fine-tuned checkpoint is gone, the order stage cannot redo its sets: it says to move the run away."""
    run_dir = tiny_study.run_dir
    order_json = (run_dir / "order.json").read_bytes()
    (run_dir / "order.json").unlink()
    try:
        lost = study(tiny_study.out, "--part", "order", "0", check=False, **tiny_study.env)
    finally:
        (run_dir / "order.json").write_bytes(order_json)
    assert lost.returncode == 1 and f"the fine-tuned checkpoint is gone; move {run_dir} away" in lost.stderr


def test_tiny_study_second_variant_adds_only_its_parts_on_slurm(tiny_study):
    """A study declared with two variants of which one has run: --slurm lists only the other's parts. VARIANTS is
    recorded (a second variant cannot join a study after it ran: refused), so the declaration is edited here."""
    settings = tiny_study.out / "settings.env"
    recorded = settings.read_text()
    refused = study(tiny_study.out, "--slurm", check=False, **dict(tiny_study.env, VARIANTS="nope bert-a"))
    assert refused.returncode == 2 and "< VARIANTS=nope\n> VARIANTS=nope bert-a" in refused.stderr
    settings.write_text(recorded.replace("\nVARIANTS=nope\n", "\nVARIANTS=nope bert-a\n"))
    try:
        slurm = study(tiny_study.out, "--slurm", **dict(tiny_study.env, VARIANTS="nope bert-a")).stdout
    finally:
        settings.write_text(recorded)
    assert "prep=" not in slurm and "--array=1 train_scripts/study.sbatch pretrain" in slurm
    assert "--array=1 train_scripts/study.sbatch finetune" in slurm and "study.sbatch report" in slurm
    assert "--dependency=afterok:$finetune --array=1 train_scripts/study.sbatch order" in slurm


def test_tiny_study_archive_renders_the_same_report_without_checkpoints_or_data(tiny_study, tmp_path):
    """--archive keeps what the report reads (the logs' validation lines, the runs' results, predictions and word-order
    sets, locality, longer inputs, timings, settings) and no checkpoint or data; `python -m tupe_study.archive` renders the
    same report, CSVs and all, from it alone. An existing DEST is refused, exit 2, untouched."""
    out, dest = tiny_study.out, tmp_path / "evidence"
    study(out, "--report", **tiny_study.env)  # the original's report as the archive will render it
    original = {n: (out / n).read_text() for n in ("report.md", "study.csv", "differences.csv", "endpoints.csv",
                                                   "order.csv", "correlation.csv")}
    p = study(out, "--archive", str(dest), **tiny_study.env)
    assert f"render it again with: python -m tupe_study.archive {dest}" in p.stderr
    kept = sorted(str(f.relative_to(dest)) for f in dest.rglob("*") if f.is_file())
    run = "finetune/nope/seed1/SST-2/lr1e-3_seed1"
    assert kept == sorted(["c4/valid_blocks.json", "locality/nope/seed1.csv", "longer/nope/seed1.json",
                    "longer/nope/seed1.blocks.json", f"{run}/order.json",
                    f"{run}/predictions.json", f"{run}/result.json", "pretrain/nope/seed1/pretrain.done",
                    "pretrain/nope/seed1/settings.json", "pretrain/nope/seed1/train.log", "report.json",
                    "report_spec.json", "settings.env", "timings.tsv", "manifest.json"])  # report_spec.json: the declaration the report states (tupe_study.report_spec)
    manifest = json.loads((dest / "manifest.json").read_text())  # every other file, and the declaration with its commit
    assert sorted(manifest["sha256"]) == [f for f in kept if f != "manifest.json"]
    settings_lines = (dest / "settings.env").read_text().splitlines()
    assert manifest["declaration"]["settings.env"] == settings_lines and settings_lines[0].startswith("# declared ")
    assert manifest["declaration"]["commit"] and settings_lines[0].endswith(f"at commit {manifest['declaration']['commit']}")
    log = (dest / "pretrain" / "nope" / "seed1" / "train.log").read_text().splitlines()
    assert len(log) == 2 and all("valid" in line for line in log)  # the two validations, nothing else
    assert runs.parse_valid_curve(str(dest / "pretrain" / "nope" / "seed1" / "train.log")) == tiny_study.curve
    assert "--unigram-bits" in json.loads((dest / "report.json").read_text())["argv"]
    # nothing but the archive: the original study is moved away while it renders
    hidden = out.with_name("hidden")
    out.rename(hidden)
    try:
        r = subprocess.run([sys.executable, "-m", "tupe_study.archive", str(dest)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    finally:
        hidden.rename(out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {n: (dest / n).read_text() for n in original} == original
    again = study(out, "--archive", str(dest), check=False, **tiny_study.env)
    assert again.returncode == 2 and "exists; an archive is never overwritten" in again.stderr
    assert (dest / "report.md").read_text() == original["report.md"]


def test_an_archive_without_its_unigram_baseline_is_refused(tiny_study, tmp_path):
    """The archive holds no training data, so the unigram baseline is recorded when it is written: a study whose
    c4/data-bin cannot give it is refused (exit 1, one line, no DEST). It was written with a note, and its render then
    differed from the study's report (no baseline, a problem line)."""
    out, dest = tmp_path / "study", tmp_path / "evidence"
    shutil.copytree(tiny_study.out, out, ignore=shutil.ignore_patterns("*.pt", "data-bin"))
    p = study(out, "--archive", str(dest), check=False, **tiny_study.env)
    assert p.returncode == 1 and not dest.exists(), p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("study.sh: error: archive: the unigram baseline cannot be "
                                                          "computed (")


def test_an_archive_asked_with_the_declaration_spelt_otherwise_is_refused(tiny_study, tmp_path):
    """The same declaration in another order is the same study, but the report quotes ENDPOINTS and orders models and
    seeds as the environment gives them: an archive so asked rendered a report that misquoted settings.env. It is
    refused (UsageError: exit 2, one line naming the setting and the recorded text) before anything is written."""
    from tupe_study.__main__ import write_archive
    from tupe_study.plan import Plan
    from tupe_study.settings import UsageError as StudyUsageError

    out, dest = tmp_path / "study", tmp_path / "evidence"
    out.mkdir()
    recorded = (tiny_study.out / "settings.env").read_text()
    assert "\nPRETRAIN_SEEDS=1\n" in recorded
    (out / "settings.env").write_text(recorded.replace("\nPRETRAIN_SEEDS=1\n", "\nPRETRAIN_SEEDS=1 2\n"))
    env = {**os.environ, **tiny_study.env, "OUT": str(out), "PRESET": "tiny", "VARIANTS": "nope",
           "PRETRAIN_SEEDS": "2 1"}
    with pytest.raises(StudyUsageError) as e:
        write_archive(Plan.from_environ(env), str(dest))
    assert str(e.value) == ("--archive: PRETRAIN_SEEDS='2 1' means what settings.env records, but the report quotes "
                            "and orders by it as given: set PRETRAIN_SEEDS='1 2', as recorded")
    assert not dest.exists()


def test_lr_sweep_chooses_declares_and_refuses_another_choice(tiny_study, tmp_path):
    """LR_GRID on a sweep seed, through study.sh on the tiny study's prepared data: every model at each LR, the grid
    widened once at its edge (a 2-LR grid always has its best on an edge), the choice declared in settings.env by
    the confirmation (dated, with the commit) before it pre-trains at that LR, the sweep in the report and the
    archive; a sweep whose runs now give another choice is refused (exit 2)."""
    out = tmp_path / "study"
    (out / "locality").mkdir(parents=True)
    shutil.copytree(tiny_study.out / "c4", out / "c4")  # prep done: the tiny study's data and held-out lines
    shutil.copy(tiny_study.out / "locality" / "heldout.txt", out / "locality" / "heldout.txt")
    env = dict(tiny_study.env, TASKS="none", LR_GRID="1e-3 0.004", SWEEP_SEEDS="7", PRETRAIN_SEEDS="1",
               TOTAL_UPDATES="3", WARMUP="1", VALID_POINTS="1", LENGTH_FACTORS="1")
    p = study(out, "--stages", "sweep,pretrain", **env)
    swept = sorted(d.name for d in (out / "sweep" / "nope").iterdir())
    finals = {lr: runs.parse_valid_curve(str(out / "sweep" / "nope" / lr / "seed7" / "train.log"))[3] for lr in swept}
    best = min(("lr1e-3", "lr4e-3"), key=lambda lr: (finals[lr], lr != "lr1e-3"))
    widened = "lr0.016" if best == "lr4e-3" else "lr2.5e-4"  # tupe_common.numbers.short
    assert sorted(swept) == sorted(["lr1e-3", "lr4e-3", widened])  # one step beyond the best edge, at the ratio 4
    chosen = min(finals, key=lambda lr: (finals[lr], float(lr[2:])))[2:]
    settings = (out / "settings.env").read_text()
    assert re.search(r"^# second declaration, \S+Z, commit \S+: chosen", settings, re.M)
    assert f"CHOSEN_LRS=nope:{chosen}\n" in settings and settings.index("CHOSEN_LRS") > settings.index("LR_GRID")
    assert f"LR {chosen}," in p.stderr.split("pre-training nope seed 1 (mlm")[1].split("\n")[0]
    assert json.loads((out / "pretrain" / "nope" / "seed1" / "settings.json").read_text())["LR"] == chosen
    md = (out / "report.md").read_text()
    assert f"| **{chosen}**" in md.split("## Learning-rate sweep")[1] and f"`CHOSEN_LRS=nope:{chosen}`" in md
    dest = tmp_path / "evidence"
    study(out, "--archive", str(dest), **env)
    assert (dest / "sweep" / "nope" / widened / "seed7" / "train.log").is_file()
    # each run's recorded settings: the evidence shows the LR every sweep and confirmation run used
    recorded = {run: float(json.loads((dest / run / "settings.json").read_text())["LR"])
                for run in (f"sweep/nope/{widened}/seed7", "pretrain/nope/seed1")}
    assert recorded == {f"sweep/nope/{widened}/seed7": float(widened[2:]), "pretrain/nope/seed1": float(chosen)}
    other = next(lr for lr in swept if lr[2:] != chosen)[2:]  # a declaration the sweep's runs do not give
    (out / "settings.env").write_text(settings.replace(f"CHOSEN_LRS=nope:{chosen}", f"CHOSEN_LRS=nope:{other}"))
    again = study(out, "--stages", "sweep,pretrain", check=False, **env)
    assert again.returncode == 2 and f"< CHOSEN_LRS=nope:{other}\n> CHOSEN_LRS=nope:{chosen}" in again.stderr


def test_a_sweep_run_that_diverges_is_the_worst_at_its_lr_and_the_study_goes_on(tiny_study, tmp_path):
    """A sweep run that fairseq stops on a non-finite gradient (LR 1e30: FloatingPointError) has ended as diverged,
    the worst at its LR by the declared rule, so the sweep finishes and the confirmation runs; it failed the part
    before 2026-12-07, and the confirmation then refused to start (the sweep never finished)."""
    out = tmp_path / "study"
    (out / "locality").mkdir(parents=True)
    shutil.copytree(tiny_study.out / "c4", out / "c4")
    shutil.copy(tiny_study.out / "locality" / "heldout.txt", out / "locality" / "heldout.txt")
    env = dict(tiny_study.env, TASKS="none", LR_GRID="1e-3 1e30", SWEEP_SEEDS="7", PRETRAIN_SEEDS="1",
               TOTAL_UPDATES="3", WARMUP="1", VALID_POINTS="1", LENGTH_FACTORS="1")
    p = study(out, "--stages", "sweep,pretrain", **env)
    assert "pre-training nope seed 7 at LR 1e+30 diverged (FloatingPointError: gradients are Nan/Inf)" in p.stderr
    done = (out / "sweep" / "nope" / "lr1e30" / "seed7" / "pretrain.done").read_text().splitlines()
    assert done[1:] == ["diverged: gradients are Nan/Inf"]
    assert "CHOSEN_LRS=nope:1e30" not in (out / "settings.env").read_text()
    assert (out / "pretrain" / "nope" / "seed1" / "pretrain.done").is_file()  # the confirmation ran
    table = (out / "report.md").read_text().split("## Learning-rate sweep")[1]
    assert next(line for line in table.splitlines() if line.startswith("| 1e30")) == "| 1e30 | diverged | diverged |"


@pytest.fixture(scope="module")
def with_electra(tiny_study) -> SimpleNamespace:
    """ELECTRA beside it (OBJECTIVES is not a recorded setting: adding an objective adds models, as a variant
    does), in two lanes (each part its own process): only nope+electra's parts run."""
    out = tiny_study.out
    timed_before = len((out / "timings.tsv").read_text().splitlines())
    seed_dir = out / "pretrain" / "nope+electra" / "seed1"  # a first sitting of 100 s that a kill ended early
    seed_dir.mkdir(parents=True)
    (seed_dir / "train.log").write_text("pretrain.sh: environment (NAME=value [default])\n"
                                        "2026-12-01 10:00:00 | INFO | fairseq_cli.train | a sitting a kill ended\n"
                                        "2026-12-01 10:01:40 | INFO | fairseq.trainer | before its first checkpoint\n")
    lanes = study(out, "--lanes", "2", **dict(tiny_study.env, OBJECTIVES="mlm electra"))
    log = out / "pretrain" / "nope+electra" / "seed1" / "train.log"
    return SimpleNamespace(
        out=out, stderr=lanes.stderr, md=(out / "report.md").read_text(),
        rows={r["variant"]: r for r in csv.DictReader((out / "study.csv").open())},
        timed=[line.split("\t")[:2] for line in (out / "timings.tsv").read_text().splitlines()][timed_before:],
        seconds=[int(line.split("\t")[2]) for line in (out / "timings.tsv").read_text().splitlines()][timed_before:],
        order_csv=list(csv.DictReader((out / "order.csv").open())),
        curves=runs.parse_valid_curves(str(log), runs.ELECTRA_KEYS),
        settings=(out / "settings.env").read_text())


def test_electra_runs_only_its_own_parts_in_two_lanes(with_electra):
    assert "pretrain nope+electra 1: started, 1 thread(s)" in with_electra.stderr
    lane_log = (with_electra.out / "lanes" / "finetune-1.log").read_text()
    assert "study.sh: finetune nope+electra 1 SST-2 1e-3 1: finished" in lane_log
    timed = with_electra.timed  # pre-training, then its locality and fine-tuning at once in two lanes
    assert timed[0] == ["pretrain", "nope+electra 1"]
    # its first sitting's 100 s (from its log) count in the part's time, and its note says so
    assert with_electra.seconds[0] >= 100
    lane_log = (with_electra.out / "lanes" / "pretrain-1.log").read_text()  # lanes are named by the part's index
    assert f"pretrain nope+electra 1: finished in {with_electra.seconds[0]} s (100 s of them in earlier sittings" in lane_log
    assert sorted(timed[1:]) == [["finetune", "nope+electra 1 SST-2 1e-3 1"], ["locality", "nope+electra 1"]]
    assert not (with_electra.out / "longer" / "nope+electra").exists()  # an MLM loss: not for ELECTRA


def test_electra_checkpoint_is_the_electra_tasks_with_its_generator(with_electra):
    import torch

    ckpt = torch.load(with_electra.out / "pretrain" / "nope+electra" / "seed1" / "checkpoint_last.pt",
                      map_location="cpu", weights_only=False)
    assert ckpt["cfg"]["task"]["_name"] == "electra" and any(k.startswith("generator.") for k in ckpt["model"])


def test_electra_row_holds_its_generator_and_discriminator_losses(with_electra):
    e, curves = with_electra.rows["nope+electra"], with_electra.curves
    assert sorted(curves["gen_loss"]) == [2, 4] and sorted(curves["disc_loss"]) == [2, 4]
    assert e["objective"] == "electra" and e["final_valid_loss"] == ""
    assert float(e["final_gen_loss"]) == pytest.approx(curves["gen_loss"][4], abs=1e-4)
    assert float(e["final_disc_loss"]) == pytest.approx(curves["disc_loss"][4], abs=1e-4)
    assert 0 < float(e["loc_pos"]) <= 1 and 0 < float(e["loc_attn"]) <= 1 and 0 <= float(e["SST_median"]) <= 100


def test_electra_discriminator_of_nope_is_blind_to_word_order(with_electra):
    drops = {(d["variant"], d["perturbation"]): float(d["mean_drop"]) for d in with_electra.order_csv}
    assert drops[("nope+electra", "random")] == 0.0 and drops[("nope+electra", "shuffle_3")] == 0.0


def test_electra_report_keeps_its_losses_apart_and_compares_downstream(with_electra):
    md = with_electra.md
    assert "| nope+electra | " in md.split("## Pre-training: ELECTRA")[1].split("##")[0]
    assert "nope+electra" not in md.split("## Pre-training: validation MLM loss")[1].split("## Pre-training: ELECTRA")[0]
    assert "| nope+electra | — | — | — | ELECTRA: the discriminator" in md
    assert "| nope - nope+electra | SST |" in md
    assert "The discriminator of nope+electra ended less than 10% below" in md  # 4 updates: not trained yet


def test_electra_settings_are_recorded_once_it_has_electra_models(with_electra):
    assert with_electra.settings.endswith("GENERATOR_SIZE_DIVISOR=auto\nDISC_WEIGHT=50\n")


def test_changed_settings_are_refused_naming_each(with_electra, tiny_study):
    changed = study(with_electra.out, check=False,
                    **dict(tiny_study.env, TOTAL_UPDATES="5", OBJECTIVES="electra", DISC_WEIGHT="10"))
    assert changed.returncode == 2
    assert "differs from this run" in changed.stderr and "TOTAL_UPDATES=5" in changed.stderr
    assert "< DISC_WEIGHT=50\n> DISC_WEIGHT=10" in changed.stderr


def test_lanes_must_be_a_whole_number(tmp_path, starts_process):
    bad = study(tmp_path / "out", "--lanes", "0", check=False)
    assert bad.returncode == 2 and "--lanes N: a whole number >= 1" in bad.stderr and not (tmp_path / "out").exists()


def test_an_out_folder_of_python_source_is_refused(starts_process):
    """OUT=study from the repository root is the study package: refused before anything is written there."""
    before = sorted(p.name for p in (ROOT / "study").iterdir())
    p = study(Path("study"), check=False, TASKS="none", C4_DIR=str(ROOT))
    assert p.returncode == 2 and "OUT=study holds Python source (__init__.py" in p.stderr and "runs/study" in p.stderr
    assert sorted(p.name for p in (ROOT / "study").iterdir()) == before


def test_variants_in_the_registrys_spelling_are_read_with_dashes():
    """VARIANTS=tupe_r (the registry's, the arch's spelling) is tupe-r: the study's folders, parts and report
    name a variant as pretrain.sh's VARIANT does (so both spellings at once name it twice: refused); a name known
    in neither spelling is refused."""
    from tupe_study.plan import UsageError, parse_variants, registry

    known = registry()
    assert "tupe-r" in known and "tupe_r" not in known
    entries = parse_variants("tupe_r learned_gaussian:1,2 bert-a", [1], known)
    assert [(e.name, e.seeds) for e in entries] == [("tupe-r", (1,)), ("learned-gaussian", (1, 2)), ("bert-a", (1,))]
    with pytest.raises(UsageError, match="entries 'tupe_r' and 'tupe-r' name tupe-r twice"):  # one variant, twice
        parse_variants("tupe_r tupe-r", [1], known)
    with pytest.raises(UsageError, match="'tupe-x' is not a registered variant"):
        parse_variants("tupe_x", [1], known)


def test_fine_tuning_parts_come_seed_first(tmp_path, corpus):
    """Every model's first fine-tuning seed before any second: a report on an unfinished study compares them all."""
    from tupe_study.plan import Plan

    plan = Plan.from_environ({"OUT": str(tmp_path / "s"), "PRESET": "tiny", "TASKS_DIR": corpus["TASKS_DIR"],
                              "TASKS": "SST-2", "VARIANTS": "nope bert-a:1,2", "SEEDS": "1 2"})
    assert [(v, s, k) for v, s, _, _, k in plan.finetune_parts()] == [
        ("nope", 1, 1), ("bert-a", 1, 1), ("bert-a", 2, 1), ("nope", 1, 2), ("bert-a", 1, 2), ("bert-a", 2, 2)]


def test_unknown_variant_is_refused_before_any_work(tmp_path, starts_process):
    p = study(tmp_path / "study", check=False, VARIANTS="bert-a bert-x", TASKS="none", C4_DIR=str(tmp_path))
    assert p.returncode == 2 and "'bert-x' is not a registered variant" in p.stderr and "pam-window" in p.stderr
    assert not (tmp_path / "study").exists()  # nothing written, nothing prepared
    from tupe_study.plan import Plan, registry
    from tupe_core.registry import names as registered

    plan = Plan.from_environ({"OUT": str(tmp_path / "s2"), "PRESET": "tiny", "TASKS": "none",
                              "VARIANTS": "all tupe-r:1,2"})
    pre = [f"{v} {s}" for v, s in plan.pretrain_parts()]
    names = list(registry())
    assert names == registered() and pre[:4] == ["bert-a 1", "bert-r 1", "tupe-a 1", "tupe-r 1"]
    assert pre == [f"{n} 1" for n in names] + ["tupe-r 2"]  # every first seed before any second


# ------------------------------------------------------------------------------------- presets, --help


PRESETS = ROOT / "tupe_study" / "presets"


def read_preset(path: Path) -> Dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


@pytest.mark.parametrize("name", ["tiny", "cpu-small", "gpu-small", "base"])
def test_presets_are_complete_and_consistent(name):
    p = read_preset(PRESETS / f"{name}.env")
    from tupe_study.settings import FIELDS, read_preset as checked

    assert set(p) == {n for n, f in FIELDS.items() if f.metadata.get("preset")} == set(checked(str(PRESETS / f"{name}.env")))
    assert int(p["SENTENCES_PER_UPDATE"]) % int(p["MAX_SENTENCES"]) == 0  # pretrain.sh's update-freq must divide
    assert int(p["TOTAL_UPDATES"]) % int(p["VALID_POINTS"]) == 0  # validations at exact fractions of the budget
    assert int(p["TOTAL_UPDATES"]) % (4 * (int(p["TOTAL_UPDATES"]) // int(p["VALID_POINTS"]))) == 0  # and at 25%
    assert int(p["LOC_LENGTH"]) <= int(p["TOKENS_PER_SAMPLE"]) and int(p["WARMUP"]) < int(p["TOTAL_UPDATES"])


def test_help_lists_the_preset_values_and_a_bad_preset_is_named(starts_process):
    env = {k: v for k, v in os.environ.items() if k not in ("PRESET", "TOTAL_UPDATES")}
    out = subprocess.run([str(STUDY), "--help"], env=dict(env, PRESET="gpu-small"), capture_output=True, text=True)
    assert out.returncode == 0
    assert re.search(r"TOTAL_UPDATES\s+50000\s", out.stdout) and "PRETRAIN_SEEDS" in out.stdout
    bad = subprocess.run([str(STUDY), "--help"], env=dict(env, PRESET="huge"), capture_output=True, text=True)
    assert bad.returncode == 2 and "PRESET=huge" in bad.stderr and "cpu-small" in bad.stderr


def test_publications_are_checked_out_without_line_ending_conversion(starts_process):
    """.gitattributes: git converts no line endings under docs/results/ (core.autocrlf, a CRLF platform), whose evidence
    is verified by SHA-256 and whose report and CSVs are compared byte for byte with a render of it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "results").glob("*/evidence/manifest.json"))]
    files += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "results").glob("*/endpoints.csv"))]
    r = subprocess.run(["git", "check-attr", "text", "--", *files], cwd=ROOT, capture_output=True, text=True, check=True)
    assert len(files) >= 4 and r.stdout.splitlines() == [f"{f}: text: unset" for f in files]


@pytest.mark.parametrize("folder", sorted(p.parent.parent.name for p in (ROOT / "docs" / "results").glob("*/evidence/report.json")))
def test_published_evidence_renders_its_declared_comparisons(folder, tmp_path):
    """Every publication's evidence/ (study.sh --archive) agrees with its manifest, renders with today's report, and
    its declared comparisons come out as published, endpoints.csv byte for byte: a change of their math (or of the
    file's columns) fails here, and the publication is rendered again from it."""
    from tupe_study.archive import render, verify

    published = ROOT / "docs" / "results" / folder
    copy = tmp_path / "evidence"
    shutil.copytree(published / "evidence", copy)
    assert (copy / "manifest.json").is_file() and verify(str(copy)) is None
    assert render(str(copy)) == 0
    new = list(csv.DictReader((copy / "endpoints.csv").open()))
    old = list(csv.DictReader((published / "endpoints.csv").open()))
    assert [(r["measure"], r["verdict"], r["by_pretrain_seed"]) for r in new] == \
           [(r["measure"], r["verdict"], r["by_pretrain_seed"]) for r in old]
    for a, b in zip(new, old):
        for key in ("mean", "sd", "low", "high", "p_holm"):  # empty where a test has none (updates_to: no SD)
            assert (a[key] == b[key] if "" in (a[key], b[key]) else
                    float(a[key]) == pytest.approx(float(b[key]), rel=1e-5)), (a["measure"], key)
    assert (copy / "endpoints.csv").read_bytes() == (published / "endpoints.csv").read_bytes(), \
        "same comparisons, another file: a column or its format changed since the publication"


def test_loss_columns_name_the_validation_they_read(tmp_path):
    """The pre-training table's @25% and @75% read each curve's nearest validation; where there is none at that
    update (2,400 updates validated every 240: 600 and 1,800), the column names the one it reads (480 and 1,680,
    ties to the earlier), whose mean over seeds it shows."""
    from tupe_study.archive import render

    published = ROOT / "docs" / "results" / "2026-12-06_cpu-small-long_tuned" / "evidence"
    copy = tmp_path / "evidence"
    shutil.copytree(published, copy)
    assert render(str(copy)) == 0
    lines = (copy / "report.md").read_text().splitlines()
    head = next(line for line in lines if line.startswith("| variant | final | best | below unigram"))
    assert "| @25% (read at 480) | @50% | @75% (read at 1680) | @100% |" in head
    bert = next(line for line in lines[lines.index(head):] if line.startswith("| bert-a |")).split(" | ")
    for cell, update in ((4, 480), (6, 1680)):
        curves = [runs.parse_valid_curve(str(published / "pretrain" / "bert-a" / f"seed{s}" / "train.log"))
                  for s in range(51, 61)]
        assert float(bert[cell]) == pytest.approx(sum(c[update] for c in curves) / 10, abs=5e-5)


# An archive from the published evidence, in-process (tupe_study.archive.archive reads the evidence as it reads a study:
# the logs are validation lines already), with a declaration as a new study writes it.
PUBLISHED = ROOT / "docs" / "results" / "2026-12-02_cpu-small_seeds10" / "evidence"
DECLARED_LINE = "# declared 2026-12-01T09:00:00Z at commit abc1234\n"
SEEDS10 = ",".join(map(str, range(21, 31)))


def _archive_of_published(tmp_path: Path, settings_extra: str = "") -> Path:
    from tupe_study.archive import archive

    study_dir, dest = tmp_path / "study", tmp_path / "evidence"
    shutil.copytree(PUBLISHED, study_dir)
    (study_dir / "manifest.json").unlink()  # not part of a study: archive() writes its own
    settings = study_dir / "settings.env"
    settings.write_text(DECLARED_LINE + settings.read_text() + settings_extra)
    argv = json.loads((PUBLISHED / "report.json").read_text())["argv"]
    kept = archive(str(study_dir), str(dest), argv, None)
    assert kept[-1] == f"a manifest of {sum(f.is_file() for f in dest.rglob('*')) - 1} files"  # all but itself
    return dest


def test_archive_writes_a_manifest_of_every_evidence_file_and_the_declaration(tmp_path):
    """manifest.json: the SHA-256 of every other file of the archive (relative paths, sorted) and the declaration
    (settings.env's lines, its declared line among them, and the commit recorded there); it verifies."""
    import hashlib

    from tupe_study.archive import verify

    dest = _archive_of_published(tmp_path)
    manifest = json.loads((dest / "manifest.json").read_text())
    files = sorted(str(f.relative_to(dest)) for f in dest.rglob("*") if f.is_file() and f.name != "manifest.json")
    assert list(manifest["sha256"]) == files and "report.json" in files and "settings.env" in files
    assert all(manifest["sha256"][f] == hashlib.sha256((dest / f).read_bytes()).hexdigest() for f in files)
    declaration = manifest["declaration"]
    assert declaration["settings.env"] == (dest / "settings.env").read_text().splitlines()
    assert declaration["settings.env"][0] == DECLARED_LINE.strip()
    assert (declaration["declared"], declaration["commit"]) == ("2026-12-01T09:00:00Z", "abc1234")
    assert "with the archive" in manifest["written"]
    assert verify(str(dest)) is None
    (dest / "report.md").write_text("a render's output\n")  # rewritten by each render: not evidence, not extra
    assert verify(str(dest)) is None
    (dest / "endpoints.csv.partial").write_text("measure,a\n")  # what a killed render leaves: the next one replaces it
    assert verify(str(dest)) is None


def test_archive_keeps_a_run_whose_folder_is_a_symlink(tmp_path):
    """A seed folder linked in from another disk is archived like any other (os.walk skipped it, so the archive's
    render silently lacked a run the study's report had read)."""
    from tupe_study.archive import archive

    study_dir, dest = tmp_path / "study", tmp_path / "evidence"
    shutil.copytree(PUBLISHED, study_dir)
    (study_dir / "manifest.json").unlink()
    elsewhere = tmp_path / "other_disk" / "seed23"
    shutil.move(str(study_dir / "pretrain" / "tupe-r" / "seed23"), str(elsewhere))
    (study_dir / "pretrain" / "tupe-r" / "seed23").symlink_to(elsewhere, target_is_directory=True)
    archive(str(study_dir), str(dest), json.loads((PUBLISHED / "report.json").read_text())["argv"], None)
    kept = dest / "pretrain" / "tupe-r" / "seed23"
    assert not kept.is_symlink() and (kept / "train.log").read_bytes() == (elsewhere / "train.log").read_bytes()
    assert "pretrain/tupe-r/seed23/train.log" in json.loads((dest / "manifest.json").read_text())["sha256"]


@pytest.mark.parametrize("change, named, what", [
    ("byte", "pretrain/tupe-r/seed23/train.log", "differs from manifest.json"),
    ("missing", "locality/bert-a/seed25.csv", "missing (listed in manifest.json)"),
    ("extra", "longer/bert-a/seed31.json", "not in manifest.json (an extra file)"),
    ("settings", "settings.env", "differs from manifest.json"),
])
def test_archive_refuses_a_file_that_differs_is_missing_or_extra(tmp_path, capsys, change, named, what):
    """One changed byte, a missing file or an extra one: `python -m tupe_study.archive` refuses before it renders, with
    one error line naming the file (exit 1), and writes no report."""
    from tupe_study.archive import main

    dest = _archive_of_published(tmp_path)
    path = dest / named
    if change in ("byte", "settings"):
        data = bytearray(path.read_bytes())
        i = data.index(b"8.") if change == "byte" else data.index(b"WARMUP=100") + 7
        data[i] = ord("7") if data[i] != ord("7") else ord("6")  # one digit of a loss, or WARMUP=100 -> 700
        path.write_bytes(bytes(data))
    elif change == "missing":
        path.unlink()
    else:
        shutil.copy(dest / "longer" / "bert-a" / "seed30.json", path)
    capsys.readouterr()
    assert main([str(dest)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tupe_study.archive: error: ") and f"{dest}/{named}: {what}" in err[0]
    assert not (dest / "report.md").exists()


ARGV10 = ["--variants", f"bert-a:{SEEDS10} tupe-r:{SEEDS10}", "--total-updates", "1200", "--valid-interval", "60",
          "--warmup", "100", "--min-gap-bits", "1", "--endpoints", "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a",
          "--equivalence-bits", "0.05", "--updates-to-target", "9.1234", "--title", "t", "--finetune-grid", "none"]
SETTINGS10 = (DECLARED_LINE + "ENDPOINTS=final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a\nEQUIVALENCE_BITS=0.05\n"
              "TOTAL_UPDATES=1200\nWARMUP=100\nVALID_POINTS=20\nVARIANTS=bert-a tupe-r\n"
              f"PRETRAIN_SEEDS={SEEDS10.replace(',', ' ')}\n# second declaration, 2026-12-01T10:00:00Z, commit "
              "abc1234: chosen\nCHOSEN_LRS=bert-a:1e-3 tupe-r:1e-3\nUPDATES_TO_TARGET=9.1234\n")


def _with(argv, option, value):
    argv = list(argv)
    if value is None:
        i = argv.index(option)
        return argv[:i] + argv[i + 2:]
    argv[argv.index(option) + 1] = value
    return argv


@pytest.mark.parametrize("option, value, setting_line, named", [
    ("--endpoints", "final_loss:tupe-r:bert-a", None, "ENDPOINTS"),  # the issue's: a Holm family of 1, not 2
    ("--endpoints", None, None, "ENDPOINTS"),  # the report's default (none) against a declaration
    ("--endpoints", "final_loss:bert-a:tupe-r loss_auc:tupe-r:bert-a", None, "ENDPOINTS"),  # A:B is not B:A
    ("--equivalence-bits", "0.1", None, "EQUIVALENCE_BITS"),
    ("--equivalence-bits", None, None, "EQUIVALENCE_BITS"),
    ("--total-updates", "2400", None, "TOTAL_UPDATES"),
    ("--valid-interval", "120", None, "TOTAL_UPDATES/VALID_POINTS"),
    ("--warmup", "0", None, "WARMUP"),
    ("--updates-to-target", "9.5", None, "UPDATES_TO_TARGET"),
    ("--updates-to-target", None, None, "UPDATES_TO_TARGET"),
    ("--variants", f"bert-a:{SEEDS10} tupe-r:21,22", None, "VARIANTS/PRETRAIN_SEEDS"),
    ("--variants", f"bert-a:{SEEDS10} tupe-a:{SEEDS10}", None, "VARIANTS/PRETRAIN_SEEDS"),
    ("--variants", f"bert-a:{SEEDS10}", None, "VARIANTS/PRETRAIN_SEEDS"),
    (None, None, "VARIANTS=bert-a tupe-r:21,22", "VARIANTS/PRETRAIN_SEEDS"),  # a variant's own seeds declared
])
def test_report_arguments_contradicting_settings_env_are_named(option, value, setting_line, named):
    """Each setting the report's arguments state is compared by meaning with settings.env's: the contradiction is
    named, with both values."""
    from tupe_study.archive import contradictions

    argv = _with(ARGV10, option, value) if option else ARGV10
    settings = SETTINGS10 if setting_line is None else re.sub(
        rf"^{setting_line.split('=')[0]}=.*$", setting_line, SETTINGS10, flags=re.M)
    (found,) = contradictions(argv, settings)
    assert found[0] == named
    assert found[1].startswith(option or "--variants") and (value is None or value in found[1])
    assert found[2].startswith(named.split("/")[0] + "=")


def test_report_arguments_agreeing_with_settings_env_in_another_spelling_are_accepted():
    """The same declaration written otherwise: endpoints in another order, with underscores, a margin as 5e-2,
    variants and seeds in another order, the seeds as PRETRAIN_SEEDS' rather than the variants' own."""
    from tupe_study.archive import contradictions

    assert contradictions(ARGV10, SETTINGS10) == []
    argv = _with(_with(_with(ARGV10, "--endpoints", "loss_auc:tupe_r:bert_a  final_loss:tupe-r:bert-a"),
                       "--equivalence-bits", "5e-2"),
                 "--variants", f"tupe-r:{','.join(map(str, range(30, 20, -1)))} bert-a:{SEEDS10}")
    assert contradictions(argv, SETTINGS10) == []
    own = SETTINGS10.replace("VARIANTS=bert-a tupe-r", f"VARIANTS=tupe-r bert-a:{SEEDS10}")
    assert contradictions(_with(ARGV10, "--updates-to-target", "9.12340"), own) == []
    # an older study's settings.env (no VARIANTS, PRETRAIN_SEEDS, second declaration) and report.json (no --warmup)
    old = "".join(line + "\n" for line in SETTINGS10.splitlines()[1:6])
    assert contradictions(_with(_with(ARGV10, "--warmup", None), "--updates-to-target", None), old) == []


def test_archive_refuses_a_report_json_that_contradicts_settings_env(tmp_path, capsys):
    """The issue's case: report.json edited to declare one comparison where settings.env declares two (a Holm family
    of 1 instead of 2). Its manifest written again over the edit (as one who edits both would), the archive still
    refuses, in one error line naming the setting and both values; in another order the declaration renders."""
    from tupe_study.archive import main, write_manifest

    dest = _archive_of_published(tmp_path)
    report_json = dest / "report.json"
    argv = json.loads(report_json.read_text())["argv"]
    report_json.write_text(json.dumps({"argv": _with(argv, "--endpoints", "final_loss:tupe-r:bert-a")}))
    (dest / "manifest.json").unlink()
    write_manifest(str(dest), "again, over the edit")
    capsys.readouterr()
    assert main([str(dest)]) == 1
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("tupe_study.archive: error: ") and "contradicts" in err and "in ENDPOINTS" in err
    assert "--endpoints final_loss:tupe-r:bert-a against ENDPOINTS=final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a" \
        in err
    assert not (dest / "report.md").exists()
    report_json.write_text(json.dumps({"argv": _with(argv, "--endpoints", "loss_auc:tupe-r:bert-a "
                                                                          "final_loss:tupe-r:bert-a")}))
    (dest / "manifest.json").unlink()
    write_manifest(str(dest), "again, in another order")
    assert main([str(dest)]) == 0
    assert "Holm family of 2" in (dest / "report.md").read_text()


def test_archive_without_a_manifest_renders_with_a_warning(tmp_path, capsys):
    """An archive written before manifests renders as before, with one warning line that it cannot be verified."""
    from tupe_study.archive import main

    copy = tmp_path / "evidence"
    shutil.copytree(PUBLISHED, copy)
    (copy / "manifest.json").unlink()
    capsys.readouterr()
    assert main([str(copy)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"tupe_study.archive: warning: {copy} has no manifest.json (archived before manifests, "
                        "2026-12-06): its files cannot be verified; rendering it as it is"]
    assert (copy / "endpoints.csv").read_bytes() == (PUBLISHED.parent / "endpoints.csv").read_bytes()


def test_sigterm_stops_the_lanes_and_their_runs_and_the_rerun_matches_the_study(tiny_study, tmp_path):
    """study.sh --lanes 2 (a lane: python -m tupe_study --part, whose fine-tuning runs fairseq-train) stopped by SIGTERM
    while its fine-tuning runs: exit 143, one line, no process of the tree left, no finished-looking run; the same
    command then fine-tunes the run as the uninterrupted study did (the same validations and result). Before the
    stop, a second study.sh on the same OUT is refused at once (exit 2, naming the first's pid and host)."""
    import signal

    from process_tree import command_lines, start, stop_cleanly, tree, wait_for
    from tupe_common import lock

    out = tmp_path / "study"
    shutil.copytree(tiny_study.out, out)
    run_dir = out / tiny_study.run_dir.relative_to(tiny_study.out)
    shutil.rmtree(run_dir)  # the fine-tuning part is to do again
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(dict(dict(PATH=f"{BIN}:{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                         OUT=str(out), PRESET="tiny", VARIANTS="nope", GPUS="0", NUM_WORKERS="0", PREP_JOBS="1",
                         HARD_VOCAB_LIMIT="0", VOCAB_SIZE="300"), **tiny_study.env))
    p = start([STUDY, "--lanes", "2", "--stages", "finetune"], env, cwd=ROOT)
    # a second study.sh on the same OUT, while the first holds it: refused at once, naming the first
    wait_for(lambda: p.poll() is not None or (lock.read_record(str(out / lock.LOCK_NAME)) or {}).get("pid"), 60,
             "the study took no lock")
    holder = (lock.read_record(str(out / lock.LOCK_NAME)) or {}).get("pid")
    assert holder in [p.pid] + [c.pid for c in tree(p.pid)], holder
    second = subprocess.run([str(STUDY), "--lanes", "2", "--stages", "finetune"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and second.stderr.strip().splitlines()[-1].startswith(
        f"study.sh: error: {out} is in use by another run (pid {holder} on {lock.host()}, "), second.stderr[-2000:]
    training = lambda: any("tupe_glue.fairseq_train" in c for c in command_lines(tree(p.pid)))  # noqa: E731
    wait_for(lambda: p.poll() is not None or training(), 240, "fine-tuning did not start")  # a few updates: stop now
    assert p.poll() is None, p.communicate()
    stop_cleanly(p, signal.SIGTERM, "study.sh: error: stopped by SIGTERM; rerun the same command to resume (finished "
                 "parts are skipped; a pre-training resumes from its checkpoint_last.pt)", timeout=60)
    assert not run_dir.exists()
    lane_log = next((out / "lanes").glob("finetune-*.log")).read_text()
    assert lane_log.rstrip().splitlines()[-1].startswith("study.sh: error: stopped by SIGTERM;")
    again = subprocess.run([str(STUDY), "--lanes", "2", "--stages", "finetune"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    result = lambda d: json.loads((d / "result.json").read_text())["best_valid"]  # noqa: E731
    assert result(run_dir) == result(tiny_study.run_dir)  # unrounded scores at the best validation
    valid = lambda d: [re.sub(r" \| (wps|wpb|bsz) [0-9.]+", "", line)  # noqa: E731  (the speed is no result)
                       for line in re.findall(r"valid on .*", (d / "train.log").read_text())]
    assert valid(run_dir) == valid(tiny_study.run_dir) != []


def test_a_full_disk_while_a_study_pre_trains_is_named_and_the_rerun_matches_the_study(tiny_study, tmp_path):
    """The disk fills while the study's pre-training saves its checkpoint at update 4 (ENOSPC injected where the OS
    raises it, as in tests/test_full_disk_pretrain.py): the part fails with fairseq-train's one line naming the file,
    the study names the failed part and its log, exit 1, no half-written file and no finished-looking pre-training;
    the checkpoint of update 2 is kept. The same command with room again resumes from it and logs the uninterrupted
    study's validations, loss for loss."""
    from process_tree import assert_none_left, marked
    from test_full_disk_pretrain import SITECUSTOMIZE

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path / "study"
    shutil.copytree(tiny_study.out, out)
    seed = out / "pretrain" / "nope" / "seed1"
    shutil.rmtree(seed)  # the pre-training is to do again
    mark = marked({})
    first = study(out, "--stages", "pretrain", check=False, FULL_SAVE="seed1/checkpoint_1_4.pt.tmp",
                  PYTHONPATH=f"{hooks}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **tiny_study.env, **mark)
    assert first.returncode == 1, first.stderr[-3000:]
    assert_none_left(mark)  # the part's fairseq-train ended with it
    written = seed / "checkpoint_1_4.pt"
    train_log = (seed / "train.log").read_text()
    assert train_log.rstrip().splitlines()[-1].startswith(
        f"fairseq-train: error: {written}: no space left on its disk while writing it"), train_log[-2000:]
    assert (f"study.sh: error: pre-training nope seed 1 failed: {written}: no space left on its disk while writing it "
            f"(the half-written file is removed); free space there, or write to a folder on another disk; log "
            f"{seed / 'train.log'}\n") in first.stderr, first.stderr[-3000:]
    assert first.stderr.rstrip().splitlines()[-1] == (
        "study.sh: error: 1 part(s) failed: pretrain nope 1; rerun the same command to resume (finished parts are "
        "skipped; a pre-training resumes from its checkpoint_last.pt)")
    assert not list(seed.glob("*.tmp")) and not written.exists() and not (seed / "pretrain.done").exists()
    from tupe_pretrain.check_resume import num_updates

    assert num_updates(str(seed / "checkpoint_last.pt")) == 2
    again = study(out, "--stages", "pretrain", **tiny_study.env)
    assert "pretrain nope 1: finished" in again.stderr
    assert num_updates(str(seed / "checkpoint_last.pt")) == 4
    assert runs.parse_valid_curve(str(seed / "train.log")) == tiny_study.curve  # every validation's loss, as logged
