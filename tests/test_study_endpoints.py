"""The study's declared comparisons (tupe_study/endpoints.py): the setting that declares them, its record in
settings.env, and the report's one family. In-process, against closed forms: Student's t with 2 degrees of
freedom has P(|T| >= t) = 1 - t / sqrt(2 + t^2)."""
from __future__ import annotations

import csv
import math
import re

import pytest

from tupe_study import report as sr
from tupe_study.endpoints import (Endpoint, curve_auc, logged_resolution, parse_endpoints, parse_margin, family_tests,
                             tost_p)
from tupe_study.settings import UsageError, changed_settings, read, recorded_text
from study_logs import write_valid_log

TUPE_QUESTION = "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"


def p_two_sided_df2(t: float) -> float:
    return 1 - abs(t) / math.sqrt(2 + t * t)


def test_parse_endpoints_names_measure_and_models_and_refuses_the_rest():
    seeds = {"bert-a": [11, 12, 13], "tupe-r": [11, 12, 13], "nope": [11]}
    assert parse_endpoints(TUPE_QUESTION, seeds) == [Endpoint("final_loss", "tupe-r", "bert-a"),
                                                     Endpoint("loss_auc", "tupe-r", "bert-a")]
    assert parse_endpoints("none", seeds) == []
    for bad, message in (("final:tupe-r:bert-a", "the measures are final_loss, loss_auc"),
                         ("final_loss:tupe-r:bert-r", "'bert-r' is not an MLM model of this study"),
                         ("final_loss:tupe-r:nope", "share 2 or more pre-training seeds \\(they share 1\\)"),
                         ("final_loss:tupe-r:tupe-r", "two different models"),
                         ("final_loss:tupe-r", "write MEASURE:A:B"),
                         ("final_loss:tupe-r:bert-a final_loss:tupe-r:bert-a", "given twice")):
        with pytest.raises(UsageError, match=message):
            parse_endpoints(bad, seeds)
    assert parse_margin("none") is None and parse_margin("0.05") == 0.05
    for bad in ("0", "-1", "x", "inf"):
        with pytest.raises(UsageError, match="EQUIVALENCE_BITS"):
            parse_margin(bad)


def test_endpoints_are_recorded_and_a_changed_declaration_is_refused_on_resume(tmp_path, monkeypatch, capsys):
    """The declaration is part of settings.env: a study resumed with other endpoints (or another margin) is
    refused, as the comparison would no longer be the one declared before it ran; a study recorded before the
    setting existed resumes as long as it declares nothing."""
    import tupe_study.plan
    from tupe_study.plan import check_settings
    from tupe_study.plan import Plan

    monkeypatch.setattr(tupe_study.plan, "code_version", lambda: "abc1234")  # in-process: no git process

    env = {"PRESET": "cpu-small", "OUT": str(tmp_path / "study"), "TASKS": "none", "VARIANTS": "bert-a tupe-r",
           "PRETRAIN_SEEDS": "11 12 13", "ENDPOINTS": TUPE_QUESTION, "EQUIVALENCE_BITS": "0.05"}
    check_settings(Plan.from_environ(env))
    text = (tmp_path / "study" / "settings.env").read_text()
    assert f"ENDPOINTS={TUPE_QUESTION}\nEQUIVALENCE_BITS=0.05\n" in text
    check_settings(Plan.from_environ(env))  # the same declaration resumes
    for name, value in (("ENDPOINTS", "final_loss:tupe-r:bert-a"), ("EQUIVALENCE_BITS", "0.1")):
        with pytest.raises(UsageError, match=f"differs from this run's settings in {name} \\(the lines above"):
            check_settings(Plan.from_environ(dict(env, **{name: value})))
        assert re.search(f"< {name}=.*\n> {name}={value}\n", capsys.readouterr().err)
    older = re.sub(r"(VARIANTS|PRETRAIN_SEEDS|ENDPOINTS|EQUIVALENCE_BITS)=.*\n", "",  # none of them recorded then
                   recorded_text(read({"PRESET": "cpu-small", "OUT": "x"})))
    assert changed_settings(older, recorded_text(read({"PRESET": "cpu-small", "OUT": "x"}))) == []
    assert changed_settings(older, recorded_text(read(env))) == [f"> ENDPOINTS={TUPE_QUESTION}",
                                                                  "> EQUIVALENCE_BITS=0.05"]
    with pytest.raises(UsageError, match="share 2 or more"):  # refused before anything is prepared
        Plan.from_environ(dict(env, OUT=str(tmp_path / "other"), PRETRAIN_SEEDS="11"))


def test_curve_auc_and_logged_resolution_against_hand_values():
    # trapezoids over 0..100: (3 + 2) / 2 * 50 + (2 + 1) / 2 * 50 = 200, over 100 updates: 2.0 bits
    assert curve_auc({0: 3.0, 50: 2.0, 100: 1.0}) == pytest.approx(2.0)
    # uneven steps: (10 - 0) * (4 + 2) / 2 + (40 - 10) * (2 + 1) / 2 = 30 + 45 = 75, over 40 updates
    assert curve_auc({10: 2.0, 0: 4.0, 40: 1.0}) == pytest.approx(75 / 40)
    assert curve_auc({5: 1.0}) is None
    assert logged_resolution([8.922, 8.93, 9.0]) == pytest.approx(0.001)
    assert logged_resolution([8.9221, 8.93]) == pytest.approx(0.0001)


def test_a_difference_below_the_logging_step_is_never_shown():
    """Three seeds whose losses differ by exactly one logged step (0.001 bits) each: no spread at all. Unfloored,
    the t-test found p = 0 (every such difference "settled"); with the spread floored at the step, t =
    0.001 / (0.001 / sqrt 3) = sqrt 3, p = 1 - sqrt(3 / 5) = 0.225: not resolved."""
    a = {11: 8.922, 12: 8.931, 13: 8.925}
    b = {s: round(x - 0.001, 3) for s, x in a.items()}
    [r] = family_tests([Endpoint("final_loss", "a", "b")], {"final_loss": {"a": a, "b": b}}, resolution=0.001)
    assert r.test.p == pytest.approx(p_two_sided_df2(math.sqrt(3)), rel=1e-9)
    assert r.test.sd == pytest.approx(0.0, abs=1e-12) and r.verdict == "not resolved"


def test_the_declared_family_is_holm_over_exactly_the_declared_comparisons():
    """Two declared comparisons, one family of 2: per-seed differences -0.6, -0.45, -0.5 (mean -0.5167, s
    0.0764) and -0.3, -0.1, -0.2 (mean -0.2, s 0.1). Holm over two: the smaller p doubled, the larger kept but
    never below it."""
    fin = {"a": {1: 8.4, 2: 8.55, 3: 8.5}, "b": {1: 9.0, 2: 9.0, 3: 9.0}}
    auc = {"a": {1: 9.2, 2: 9.4, 3: 9.3}, "b": {1: 9.5, 2: 9.5, 3: 9.5}}
    declared = [Endpoint("final_loss", "a", "b"), Endpoint("loss_auc", "a", "b")]
    results = family_tests(declared, {"final_loss": fin, "loss_auc": auc}, resolution=0.001)

    def plain_t(d):
        m = sum(d) / len(d)
        s = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
        return m / (s / math.sqrt(len(d)))

    p1, p2 = p_two_sided_df2(plain_t([-0.6, -0.45, -0.5])), p_two_sided_df2(plain_t([-0.3, -0.1, -0.2]))
    assert [r.test.p for r in results] == pytest.approx([p1, p2], rel=1e-9)
    low, high = sorted([p1, p2])
    assert [r.p_holm for r in results] == pytest.approx([2 * low if p1 < p2 else max(high, 2 * low),
                                                         2 * low if p2 < p1 else max(high, 2 * low)], rel=1e-9)
    assert results[0].verdict == "a lower than b"  # t = -11.7, p 0.0072, Holm 0.0145
    assert results[1].verdict == "not resolved"  # t = -3.46, p 0.074, Holm 0.074


def test_equivalence_only_through_tost_against_the_declared_margin():
    """Differences +0.010, -0.010, +0.003 (mean 0.001, s 0.01): within a margin of 0.05 bits both one-sided tests
    reject (t = (0.05 -+ 0.001) / (0.01 / sqrt 3), one-sided p = (1 - t / sqrt(2 + t^2)) / 2); without a margin,
    or with a margin of 0.01, the same data are "not resolved"."""
    d = [0.010, -0.010, 0.003]
    se = 0.01 / math.sqrt(3)
    mean = sum(d) / 3
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    se = s / math.sqrt(3)
    expected = max(p_two_sided_df2((0.05 + mean) / se) / 2, p_two_sided_df2((0.05 - mean) / se) / 2)
    assert tost_p(d, 0.05) == pytest.approx(expected, rel=1e-9)
    values = {"final_loss": {"a": {1: 9.010, 2: 8.990, 3: 9.003}, "b": {1: 9.0, 2: 9.0, 3: 9.0}}}
    declared = [Endpoint("final_loss", "a", "b")]
    assert family_tests(declared, values, 0.001, margin=0.05)[0].verdict == "equivalent within ±0.05 bits"
    assert family_tests(declared, values, 0.001, margin=0.01)[0].verdict == "not resolved"
    assert family_tests(declared, values, 0.001)[0].verdict == "not resolved"


def test_report_tests_the_declared_family_and_labels_the_rest_exploratory(tmp_path):
    """The report stage's own command, on logs: the declared family of 2 in its own table and CSV; a seed whose
    pre-training stopped early is left out of the declared test."""
    out = tmp_path / "study"
    for seed, (a, b) in {1: ((9.6, 8.4), (9.9, 9.0)), 2: ((9.7, 8.55), (9.9, 9.0)), 3: ((9.5, 8.5), (9.9, 9.0))}.items():
        write_valid_log(out, "tupe-r", seed, a)
        write_valid_log(out, "bert-a", seed, b)
    write_valid_log(out, "tupe-r", 4, (9.0,))  # unfinished: only the validation at 50
    write_valid_log(out, "bert-a", 4, (9.9, 9.0))
    assert sr.main([str(out), "--variants", "tupe-r:1,2,3,4 bert-a:1,2,3,4", "--total-updates", "100",
                    "--endpoints", TUPE_QUESTION, "--equivalence-bits", "0.05"]) == 0
    md = (out / "report.md").read_text()
    assert "**one Holm family of 2**" in md and "every other difference in it is exploratory" in md
    rows = list(csv.DictReader((out / "endpoints.csv").open()))
    assert [(r["measure"], r["seeds"], r["family_size"]) for r in rows] == [("final_loss", "3", "2"),
                                                                           ("loss_auc", "3", "2")]
    # final: -0.6, -0.45, -0.5; auc (mean of the two validations, minus bert-a's 9.45): -0.45, -0.325, -0.45
    assert float(rows[0]["mean"]) == pytest.approx(-1.55 / 3) and rows[0]["verdict"] == "tupe-r lower than bert-a"
    assert float(rows[1]["mean"]) == pytest.approx(-1.225 / 3)
    assert rows[0]["by_pretrain_seed"] == "1:-0.600000 2:-0.450000 3:-0.500000"
    assert "| final_loss: tupe-r - bert-a | -0.6000 | -0.4500 | -0.5000 | -0.5167 |" in md
    md_none = tmp_path / "none"
    for seed in (1, 2):
        write_valid_log(md_none, "tupe-r", seed, (9.6, 8.4))
        write_valid_log(md_none, "bert-a", seed, (9.9, 9.0))
    assert sr.main([str(md_none), "--variants", "tupe-r bert-a", "--pretrain-seeds", "1 2", "--total-updates", "100"]) == 0
    assert "(`ENDPOINTS=none`): every difference below is exploratory" in (md_none / "report.md").read_text()
    # nothing declared and no fine-tuning: the empty tables keep their header (an empty file is not a CSV table)
    for name, first in (("endpoints.csv", "measure,a,b,seeds"), ("differences.csv", "a,b,task,difference"),
                        ("order.csv", "variant,task,perturbation")):
        lines = (md_none / name).read_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith(first + ","), (name, lines)


def test_mlm_validation_loss_is_logged_with_4_decimals():
    """pretrain.sh trains MLM with masked_lm_4dp: fairseq's masked_lm, whose logged loss kept 3 decimals. The
    same logging outputs, reduced by each criterion in fairseq's own aggregation: 10.1 / 3 / ln 2 = 4.85707 bits."""
    import torch
    from fairseq import metrics
    from fairseq.criterions.masked_lm import MaskedLmLoss

    from tupe_pretrain.pretrain import PretrainConfig, Run
    from tupe_plugin.criterions.masked_lm_4dp import MaskedLm4dpLoss

    logs = [{"loss": torch.tensor(6.1), "sample_size": 2}, {"loss": torch.tensor(4.0), "sample_size": 1}]
    logged = {}
    for name, criterion in (("fairseq", MaskedLmLoss), ("4dp", MaskedLm4dpLoss)):
        with metrics.aggregate(new_root=True) as agg:
            criterion.reduce_metrics(logs)
        logged[name] = agg.get_smoothed_values()
    exact = 10.1 / 3 / math.log(2)
    assert logged["fairseq"]["loss"] == round(exact, 3) == 4.857
    assert logged["4dp"]["loss"] == round(exact, 4) == 4.8571
    assert logged["4dp"]["ppl"] == pytest.approx(logged["fairseq"]["ppl"], rel=1e-6)  # the rest as fairseq's
    assert Run(PretrainConfig(), "masked_lm", "cpu", 1, 1, "none", []).criterion == "masked_lm_4dp"
    assert Run(PretrainConfig(), "electra", "cpu", 1, 1, "none", []).criterion == "electra"


def test_overview_draws_the_declared_comparisons_and_the_seed_bands(tmp_path):
    """A study of two variants x 3 seeds that declared two comparisons and fine-tuned nothing: the figure's lower
    row is one panel per comparison, its points the per-seed differences, its title the Holm p and verdict of the
    report; the curves panel has a band per variant from its lowest to its highest seed; no scatter panels."""
    from tupe_study import figure, runs

    out = tmp_path / "study"
    curves = {"tupe-r": {1: (9.6, 8.4), 2: (9.7, 8.55), 3: (9.5, 8.5)}, "bert-a": {s: (9.9, 9.0) for s in (1, 2, 3)}}
    curves["bert-a"][2] = (9.8, 9.1)
    for model, by_seed in curves.items():
        for seed, losses in by_seed.items():
            write_valid_log(out, model, seed, losses)
    assert sr.main([str(out), "--variants", "tupe-r bert-a", "--pretrain-seeds", "1 2 3", "--total-updates", "100",
                    "--endpoints", TUPE_QUESTION]) == 0
    variants = [runs.Variant(m, seeds=[runs.SeedRun(s, dict(zip((50, 100), ls)), {}, {}) for s, ls in c.items()])
                for m, c in curves.items()]
    results = family_tests([Endpoint("final_loss", "tupe-r", "bert-a"), Endpoint("loss_auc", "tupe-r", "bert-a")],
                           {"final_loss": {m: {s: ls[-1] for s, ls in c.items()} for m, c in curves.items()},
                            "loss_auc": {m: {s: sum(ls) / 2 for s, ls in c.items()} for m, c in curves.items()}},
                           resolution=0.01)
    rows = [{"variant": m, "objective": "mlm", "final_valid_loss": 8.5} for m in curves]
    fig = figure.overview_figure(variants, rows, [], [], 9.9, results)
    assert len(fig.axes) == 4  # curves, table, two comparisons: no scatter row without a downstream average
    final = fig.axes[2]
    points = final.collections[-2].get_offsets()[:, 1]  # the seeds' points (the last collection: the interval)
    assert list(points) == pytest.approx([-0.6, -0.55, -0.5])
    assert f"Holm p {results[0].p_holm:.3g}: {results[0].verdict}" in final.get_title()
    band = next(c for c in fig.axes[0].collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")
                and c.get_hatch())
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(8.4) and max(ys) == pytest.approx(9.7)  # tupe-r's lowest and highest seed
    figure._pyplot().close(fig)
    assert (out / "overview.png").read_bytes()[:4] == b"\x89PNG"


def test_figure_text_contrast_noise_columns_small_correlations_and_unfit_marks():
    """Issue 50's print rules: every table cell's text reads at 4.5:1 or more on its grey (WCAG's contrast, by its
    formula here); a column whose span across variants is not beyond the seed noise (``tupe_study.noise``: within what
    models with no difference reach in 5% of simulated studies, or the noise not measured) is not shaded by rank and
    says so; a correlation of fewer than 5 variants is not drawn; an unfit variant is marked."""
    from tupe_study import figure

    def luminance(g):
        return g / 12.92 if g <= 0.04045 else ((g + 0.055) / 1.055) ** 2.4

    for k in range(101):
        grey = figure.SHADE_DARKEST + (figure.SHADE_LIGHTEST - figure.SHADE_DARKEST) * k / 100
        text = figure.text_grey(grey)
        hi, lo = sorted((luminance(grey), luminance(text)), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, grey
    assert figure.text_grey(0.6) == 0.0  # white on 60% grey was 2.5:1; black is 6.6:1

    from tupe_study.runs import SeedRun, Variant

    def study(finals):
        variants = [Variant(v, seeds=[SeedRun(k, {100: x}, {}, {}) for k, x in enumerate(xs, 1)])
                    for v, xs in finals.items()]
        rows = [{"variant": v.name, "objective": "mlm", "final_valid_loss": sum(xs) / len(xs), "downstream_avg": d,
                 "loc_pos": lp} for v, xs, d, lp in zip(variants, finals.values(), (70.0, 71.2, 69.0), (0.1, 0.2, 0.3))]
        return variants, rows

    # 8.06..8.90 = 0.84, within tupe-r's seeds (8.49 - 7.63): p > 0.05 against simulated studies with no difference
    variants, rows = study({"bert-a": [8.77, 8.84], "tupe-r": [7.63, 8.49], "nope": [8.90]})
    assert figure.noise_headers(variants, ["final_valid_loss", "loc_pos"], []) == ["within\nnoise",
                                                                                   "noise not\nmeasured"]
    corr = [{"measure": "locality (position-only)", "key": "loc_pos", "objective": "mlm", "n": 3,
             "spearman": 1.0, "spearman_p": 0.33}]
    plt = figure._pyplot()
    fig = figure.overview_figure(variants, rows, [], corr, None, (), unfit=["nope"])
    table = next(c for c in fig.axes[1].get_children() if type(c).__name__ == "Table")
    cells = table.get_celld()
    assert cells[0, 1].get_text().get_text().endswith("within\nnoise")
    assert cells[0, 3].get_text().get_text().endswith("noise not\nmeasured")  # loc_pos: one seed each
    assert all(tuple(cells[i, j].get_facecolor()) == (1, 1, 1, 1) for i in (1, 2, 3) for j in (1, 3))  # not shaded
    assert [cells[i, 0].get_text().get_text() for i in (1, 2, 3)] == ["bert-a", "tupe-r", "nope (unfit)"]
    scatter = fig.axes[2]
    assert "not drawn (fewer than 5)" in scatter.get_title() and not scatter.collections
    plt.close(fig)
    # seeds that agree to 0.01 bits: the span of 0.84 is far beyond their noise, and the ranks are shaded
    variants, rows = study({"bert-a": [8.80, 8.81], "tupe-r": [8.06, 8.07], "nope": [8.90]})
    assert figure.noise_headers(variants, ["final_valid_loss"], []) == [None]
    fig = figure.overview_figure(variants, rows, [], corr, None, ())
    cells = next(c for c in fig.axes[1].get_children() if type(c).__name__ == "Table").get_celld()
    assert len({tuple(cells[i, 1].get_facecolor()) for i in (1, 2, 3)} - {(1, 1, 1, 1)}) == 3
    plt.close(fig)
    # from 5 variants on the points are drawn, the title with the report's own (unadjusted) p of that correlation
    rows = [{"variant": f"v{i}", "objective": "mlm", "downstream_avg": 60.0 + i, "loc_pos": 0.1 * i} for i in range(5)]
    corr = sr.correlations(rows)[:1]
    fig = figure.overview_figure([], rows, [], corr, None, ())
    scatter = fig.axes[2]
    assert scatter.get_title() == (f"locality (position-only)\nn = 5, Spearman {corr[0]['spearman']:.2f} "
                                   f"(p {corr[0]['spearman_p']:.2f}, unadjusted)")
    assert len(scatter.collections[0].get_offsets()) == 5
    plt.close(fig)
    corr = sr.correlation_family(corr)  # as the report passes them: with Holm's p over its correlations
    fig = figure.overview_figure([], rows, [], corr, None, ())
    assert fig.axes[2].get_title().endswith(f"(p {corr[0]['spearman_p']:.2f}, unadjusted; Holm {corr[0]['p_holm']:.2f})")
    plt.close(fig)


def test_holm_family_is_the_declared_one_and_tost_is_adjusted_across_it():
    """An untested endpoint (one shared seed) still counts in the Holm family (p = 1), and TOST p-values are
    Holm-adjusted across the same family: against the plain Holm computation of test_study_stats."""
    import math

    from tupe_study.endpoints import Endpoint, family_tests, tost_p
    from test_study_stats import plain_holm

    declared = [Endpoint("final_loss", "a", "b"), Endpoint("loss_auc", "a", "b"), Endpoint("final_loss", "a", "c")]
    values = {"final_loss": {"a": {1: 8.00, 2: 8.01, 3: 8.02}, "b": {1: 8.01, 2: 8.03, 3: 8.02}, "c": {1: 9.0}},
              "loss_auc": {"a": {1: 9.0, 2: 9.1, 3: 9.05}, "b": {1: 9.2, 2: 9.25, 3: 9.3}}}
    r = family_tests(declared, values, resolution=0.0001, margin=0.05)
    assert r[2].test is None and math.isnan(r[2].p_holm) and r[2].verdict.startswith("not tested")
    assert [r[0].p_holm, r[1].p_holm] == pytest.approx(plain_holm([r[0].test.p, r[1].test.p, 1.0])[:2])
    raw = [tost_p([8.00 - 8.01, 8.01 - 8.03, 0.0], 0.05, 0.0001), tost_p([-0.2, -0.15, -0.25], 0.05, 0.0001), 1.0]
    assert [r[0].p_tost, r[1].p_tost] == pytest.approx(plain_holm(raw)[:2])
    assert r[0].p_tost > raw[0]  # adjusted: larger than the one-endpoint TOST p


def test_zero_spread_within_floating_point_residue_is_no_spread():
    from tupe_study.stats import t_test

    residue = t_test([-0.2] * 3)  # numpy's sd is 3.4e-17 here: it was taken as spread, p 1e-32
    assert residue.sd == 0.0 and residue.low == residue.high == pytest.approx(-0.2)
    floored = t_test([-0.2] * 3, sd_floor=1e-4)  # the logged resolution: p from the floor alone
    t = 0.2 / (1e-4 / 3 ** 0.5)
    from tupe_study.stats import t_two_sided_p

    assert floored.p == pytest.approx(t_two_sided_p(t, 2), rel=1e-9)
