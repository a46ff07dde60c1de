"""The ``updates_to@TARGET`` endpoint (tupe_study/endpoints.py, tupe_study/stats.py): the update at which a curve first reaches
the target, censoring at the budget, the exact sign test against a brute-force count of sign patterns, the
order-statistic interval of the median against its binomial coverage, one Holm family with the t-tested
measures, the grammar, and the report's table and CSV. In-process; scipy only as a second reference."""
from __future__ import annotations

import csv
import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Mapping

import pytest

from study_logs import finished_log
from tupe_study import endpoint_report
from tupe_study import report as sr
from tupe_study.endpoints import (Endpoint, EndpointResult, family_tests, halfway_target, parse_endpoints, updates_to,
                             updates_to_values)
from tupe_study.stats import SignTest, holm, median_interval, sign_test_p
from tupe_common.errors import UsageError

CURVE = {60: 10.0, 120: 9.5, 180: 8.5, 240: 8.0}

# ---------------------------------------------------------------------------------------------- the measure


def test_updates_to_interpolates_the_first_crossing_and_censors_at_the_budget():
    # 9.5 at 120, 8.5 at 180: 9.0 is halfway between them
    assert updates_to(CURVE, 9.0, 240) == (150.0, False)
    assert updates_to(CURVE, 9.25, 240) == (135.0, False)  # a quarter of the way
    assert updates_to(CURVE, 8.5, 240) == (180.0, False)  # an exact hit: that validation's update
    assert updates_to(dict(reversed(list(CURVE.items()))), 9.0, 240) == (150.0, False)  # the dict's order is not read
    # the FIRST crossing, not a later one: 9.5 -> 8.9 crosses 9.0 at 60 + 0.5 / 0.6 * 60 = 110, then it goes back up
    assert updates_to({60: 9.5, 120: 8.9, 180: 9.2, 240: 8.0}, 9.0, 240) == (pytest.approx(110.0), False)
    # already at or below the target at the first validation: that validation's update, nothing earlier is known
    assert updates_to(CURVE, 10.0, 240) == (60.0, False) and updates_to(CURVE, 11.0, 240) == (60.0, False)
    # never reached within the budget: censored at the budget, even where a validation after it would reach it
    assert updates_to(CURVE, 7.9, 240) == (240.0, True)
    assert updates_to({**CURVE, 300: 7.0}, 7.9, 240) == (240.0, True)
    assert updates_to({60: math.nan, 120: 8.0}, 9.0, 240) == (120.0, False)  # no number to interpolate from
    assert updates_to({60: 10.0, 120: math.nan}, 9.0, 240) == (240.0, True)  # a diverged run never reaches it


def test_halfway_target_is_the_midpoint_between_unigram_and_the_mean_sweep_loss():
    assert halfway_target(10.0, [8.0, 9.0, 7.0]) == pytest.approx(9.0)  # (10 + 8) / 2
    assert halfway_target(9.851, [8.2]) == pytest.approx((9.851 + 8.2) / 2)
    for bad in ([], [8.0, math.nan]):
        with pytest.raises(UsageError, match="updates_to@halfway needs"):
            halfway_target(10.0, bad)


# ---------------------------------------------------------------------------------------------- the statistics


def brute_force_sign_p(positive: int, negative: int) -> Fraction:
    """The share of the 2^n equally likely sign patterns at least as far from n / 2 positives as the observed one."""
    n = positive + negative
    far = abs(positive - n / 2)
    hits = sum(abs(sum(pattern) - n / 2) >= far for pattern in itertools.product((0, 1), repeat=n))
    return Fraction(hits, 2 ** n)


def test_sign_test_p_against_every_sign_pattern_and_scipy():
    from scipy.stats import binomtest

    assert sign_test_p(0, 0) == 1.0
    for n in range(1, 13):
        for positive in range(n + 1):
            p = sign_test_p(positive, n - positive)
            assert p == pytest.approx(float(brute_force_sign_p(positive, n - positive)), rel=1e-12, abs=0), (n, positive)
            assert p == pytest.approx(binomtest(positive, n, 0.5).pvalue, rel=1e-9), (n, positive)
    assert sign_test_p(0, 6) == pytest.approx(2 / 64) and sign_test_p(1, 9) == pytest.approx(22 / 1024)


def reference_interval(values, level=0.95):
    """Order statistics (k, n + 1 - k) for the largest k whose interval covers the median with probability >= level:
    the median lies between them unless k or more values fall on one side, coverage counted over sign patterns."""
    n, x = len(values), sorted(values)
    best = None
    for k in range(1, n // 2 + 1):
        inside = sum(k <= sum(p) <= n - k for p in itertools.product((0, 1), repeat=n))
        if Fraction(inside, 2 ** n) >= Fraction(level).limit_denominator(1000):
            best = (x[k - 1], x[n - k], inside / 2 ** n)
    return best or (-math.inf, math.inf, 1.0)


def test_median_interval_order_statistics_and_exact_coverage():
    from scipy.stats import binom

    for n in range(1, 15):
        values = [(37 * i) % 101 / 10 - 3 for i in range(n)]  # unsorted, distinct
        low, high, coverage = median_interval(values)
        assert (low, high) == reference_interval(values)[:2], n
        assert coverage == pytest.approx(reference_interval(values)[2], rel=1e-12), n
        if n >= 6:
            k = sorted(values).index(low) + 1
            assert coverage == pytest.approx(1 - 2 * binom.cdf(k - 1, n, 0.5), rel=1e-9)
            assert 2 * binom.cdf(k, n, 0.5) > 0.05  # k + 1 would fall below 95%
    assert median_interval(range(5)) == (-math.inf, math.inf, 1.0)  # n < 6: no 95% interval exists
    assert median_interval([6, 1, 5, 2, 4, 3]) == (1, 6, pytest.approx(1 - 2 / 64))  # k = 1 at n = 6
    assert median_interval(range(10, 0, -1))[:2] == (2, 9)  # n = 10: k = 2, coverage 1 - 22 / 1024
    assert median_interval(range(10))[2] == pytest.approx(1 - 22 / 1024)


# ---------------------------------------------------------------------------------------------- the endpoint


def values_of(a, b, key="updates_to@9.0"):
    return {key: {"a": a, "b": b}}


def test_ties_and_double_censoring_are_dropped_and_one_sided_censoring_keeps_its_sign():
    """Eight seeds, budget 240: 1-3 a sooner; 4 a tie (0); 5 both censored (a tie, no measured difference); 6 only a
    censored, 7 only b censored, 8 a at the budget exactly (not censored) against a censored b: a difference of 0
    whose sign is known (b never got there). Sign test: 5 negative, 1 positive, 2 ties."""
    a = {1: (100.0, False), 2: (110.0, False), 3: (90.0, False), 4: (120.0, False), 5: (240.0, True),
         6: (240.0, True), 7: (150.0, False), 8: (240.0, False)}
    b = {1: (130.0, False), 2: (125.0, False), 3: (200.0, False), 4: (120.0, False), 5: (240.0, True),
         6: (200.0, False), 7: (240.0, True), 8: (240.0, True)}
    [r] = family_tests([Endpoint("updates_to", "a", "b", "9.0")], values_of(a, b), resolution=0.001, margin=0.05)
    t = r.test
    assert isinstance(t, SignTest) and (t.negative, t.positive, r.ties) == (5, 1, 2)
    assert t.p == pytest.approx(float(brute_force_sign_p(1, 5)))
    assert (r.censored_count("a"), r.censored_count("b")) == (2, 3)
    assert r.censored == {5: "ab", 6: "a", 7: "b", 8: "b"}
    # the interval over all 8 seeds, censored ones ranked last: seeds 5, 7, 8 are -inf for the lower end (b censored),
    # seeds 5, 6 +inf for the upper end (a censored); the median over the 7 others ranks 6 at +inf, 7 and 8 at -inf
    lower = [-30, -15, -110, 0, -math.inf, 40, -math.inf, -math.inf]
    upper = [-30, -15, -110, 0, math.inf, math.inf, -90, 0]
    assert t.n == 8 and t.center == -30.0  # sorted: -inf -inf -110 -30 -15 0 +inf
    assert (t.low, t.coverage) == median_interval(lower)[::2] and t.high == median_interval(upper)[1]
    assert math.isnan(r.p_tost) and "equivalent" not in r.verdict  # no TOST: the margin is in bits
    assert r.verdict == "not resolved"  # p = 2 * 7 / 64 = 0.22
    # flipping seed 8's censoring to a: the same 0 difference now counts for b
    a[8], b[8] = (240.0, True), (240.0, False)
    [r] = family_tests([Endpoint("updates_to", "a", "b", "9.0")], values_of(a, b), resolution=0.001)
    assert (r.test.negative, r.test.positive, r.ties) == (4, 2, 2)


def test_the_median_interval_covers_the_true_median_when_the_later_model_is_censored():
    """The interval's coverage is the stated one (>= 95%) whatever the censored updates are: b reaches the target
    between updates 600 and 1,000, a a shift later, both censored at the budget (1,000). Ranking a censored
    difference by its bound (the code before 2026-12-07) covered the true median, the shift, in about 76% of such
    studies at a shift of 200."""
    import random

    rng, budget, shift, hits, studies = random.Random(0), 1000.0, 200.0, 0, 1000
    for _ in range(studies):
        a, b = {}, {}
        for seed in range(10):
            true_b = rng.uniform(600, 1000)
            true_a = true_b + shift + rng.gauss(0, 100)
            a[seed], b[seed] = ((min(x, budget), x > budget) for x in (true_a, true_b))
        [r] = family_tests([Endpoint("updates_to", "a", "b", "9.0")], values_of(a, b), resolution=0.001)
        hits += r.test.low <= shift <= r.test.high
    assert r.test.coverage == pytest.approx(1 - 2 * 11 / 1024)  # (x_(2), x_(9)) of 10
    assert hits / studies >= 0.95, hits / studies


def test_no_measured_pair_has_no_median_in_the_table():
    """Both models censored on every seed: no pair is measured, so the table's median cell is a dash, not nan."""
    a = {s: (240.0, True) for s in (1, 2)}
    [r] = family_tests([Endpoint("updates_to", "a", "b", "9.0")], values_of(a, dict(a)), resolution=0.001)
    assert math.isnan(r.test.center) and r.ties == 2
    [row] = [line for line in endpoint_report.updates_to_lines([r], 240) if line.startswith("| updates_to")]
    cells = [c.strip() for c in row.split("|")]
    assert "nan" not in row.lower() and cells[5] == "—", row


def test_verdicts_sooner_later_and_the_censoring_warning():
    """Six seeds, a first on all of them: p = 2 / 64 = 0.031, alone in its family: shown. Swapped: later."""
    a = {s: (100.0 + s, False) for s in range(1, 7)}
    b = {s: (150.0, False) for s in range(1, 7)}
    e = Endpoint("updates_to", "a", "b", "9.0")
    [r] = family_tests([e], values_of(a, b), resolution=0.001)
    assert r.p_holm == pytest.approx(2 / 64) and r.verdict == "a reaches the target sooner than b"
    assert (r.test.low, r.test.high) == (-49.0, -44.0) and r.censoring_warning == ""
    [r] = family_tests([Endpoint("updates_to", "b", "a", "9.0")], {"updates_to@9.0": {"a": a, "b": b}}, 0.001)
    assert r.verdict == "b reaches the target later than a"
    # b censored on 4 of 6 seeds (more than half): the verdict warns that this is the final loss again
    b = {s: (240.0, s <= 4) for s in range(1, 7)}
    [r] = family_tests([e], values_of(a, b), resolution=0.001)
    assert r.verdict.startswith("a reaches the target sooner than b (warning: b never reached the target on 4 of 6")
    assert "measures the final loss again" in r.verdict
    b = {s: (240.0, s <= 3) for s in range(1, 7)}  # 3 of 6: not more than half
    [r] = family_tests([e], values_of(a, b), resolution=0.001)
    assert r.censoring_warning == "" and "warning" not in r.verdict


def test_one_holm_family_with_a_final_loss_endpoint():
    """A family of 2: final_loss t-tested, updates_to sign-tested; Holm over both p-values, each test its own."""
    fin = {"a": {s: 8.4 + 0.05 * (s % 3) for s in range(1, 7)}, "b": {s: 9.0 for s in range(1, 7)}}
    a = {s: (100.0 + 10 * s, False) for s in range(1, 7)}
    b = {s: (155.0, False) for s in range(1, 7)}  # a first on 5 seeds, later on seed 6 (160 vs 155)
    declared = [Endpoint("final_loss", "a", "b"), Endpoint("updates_to", "a", "b", "9.0")]
    results = family_tests(declared, {"final_loss": fin, "updates_to@9.0": {"a": a, "b": b}}, resolution=0.001,
                           margin=0.05)
    assert [type(r.test).__name__ for r in results] == ["TTest", "SignTest"]
    assert results[1].test.p == pytest.approx(float(brute_force_sign_p(1, 5)))
    assert [r.p_holm for r in results] == pytest.approx(holm([r.test.p for r in results]))
    assert results[1].p_holm == pytest.approx(results[1].test.p)  # the larger p of two: Holm keeps it
    assert results[0].p_holm == pytest.approx(2 * results[0].test.p)  # the smaller p doubled: a family of 2
    assert not math.isnan(results[0].p_tost) and math.isnan(results[1].p_tost)
    assert results[0].verdict == "a lower than b"


def test_halfway_not_resolved_yet_is_not_tested_and_still_counts_in_the_family():
    declared = [Endpoint("final_loss", "a", "b"), Endpoint("updates_to", "a", "b", "halfway")]
    fin = {"a": {1: 8.4, 2: 8.5, 3: 8.45}, "b": {1: 9.0, 2: 9.1, 3: 9.0}}
    curves = {"a": {s: {60: 9.5, 120: 8.5} for s in (1, 2, 3)}, "b": {s: {60: 9.9, 120: 9.0} for s in (1, 2, 3)}}
    values = dict(updates_to_values(declared, curves, 120), final_loss=fin)
    assert "updates_to@halfway" not in values
    results = family_tests(declared, values, resolution=0.001)
    assert results[1].test is None and results[1].verdict == "not tested (target not resolved yet)"
    # the declared family is whole: the untested comparison counts with p = 1, so Holm doubles the smaller p
    assert results[0].p_holm == pytest.approx(min(1.0, 2 * results[0].test.p)) and math.isnan(results[1].p_holm)
    values = dict(updates_to_values(declared, curves, 120, halfway=9.0), final_loss=fin)
    assert values["updates_to@halfway"]["a"][1] == (90.0, False) and values["updates_to@halfway"]["b"][1] == (120.0, False)
    results = family_tests(declared, values, resolution=0.001, halfway=9.0)
    assert results[1].target_bits == 9.0 and results[1].diffs == {1: -30.0, 2: -30.0, 3: -30.0}
    assert results[1].test.coverage == 1.0 and math.isinf(results[1].test.low)  # 3 seeds: no 95% interval


# ---------------------------------------------------------------------------------------------- the grammar


def test_parse_round_trips_and_refusals():
    seeds = {"bert-a": [1, 2, 3], "tupe-r": [1, 2, 3]}
    text = "updates_to@9.0:tupe-r:bert-a final_loss:tupe-r:bert-a updates_to@halfway:tupe-r:bert-a"
    parsed = parse_endpoints(text, seeds)
    assert parsed == [Endpoint("updates_to", "tupe-r", "bert-a", "9.0"), Endpoint("final_loss", "tupe-r", "bert-a"),
                      Endpoint("updates_to", "tupe-r", "bert-a", "halfway")]
    assert " ".join(e.text for e in parsed) == text and parse_endpoints(text, seeds) == parsed
    assert [e.target_bits(8.7) for e in parsed] == [9.0, None, 8.7] and parsed[2].target_bits() is None
    assert parsed[0].label == "updates_to@9.0: tupe-r - bert-a" and parsed[1].text == "final_loss:tupe-r:bert-a"
    for bad, message in (("final_loss@9:tupe-r:bert-a", "only updates_to takes a target"),
                         ("loss_auc@halfway:tupe-r:bert-a", "only updates_to takes a target"),
                         ("updates_to:tupe-r:bert-a", "updates_to needs a target"),
                         ("updates_to@:tupe-r:bert-a", "positive number of bits or halfway, not ''"),
                         ("updates_to@-1:tupe-r:bert-a", "positive number of bits or halfway, not '-1'"),
                         ("updates_to@0:tupe-r:bert-a", "not '0'"), ("updates_to@inf:tupe-r:bert-a", "not 'inf'"),
                         ("updates_to@nan:tupe-r:bert-a", "not 'nan'"), ("updates_to@half:tupe-r:bert-a", "not 'half'"),
                         ("updates_to@9:tupe-r:bert-a updates_to@9.0:tupe-r:bert-a", "given twice"),
                         ("updates_to@9:tupe-r", "write MEASURE:A:B"),
                         # one halfway target is resolved (UPDATES_TO_TARGET): from one B's sweep, not two
                         ("updates_to@halfway:tupe-r:bert-a updates_to@halfway:bert-a:tupe-r2",
                          "halfway is one target, resolved from one B's sweep \\(bert-a, not also tupe-r2\\)")):
        with pytest.raises(UsageError, match=message) as caught:
            parse_endpoints(bad, dict(seeds, **{"tupe-r2": [1, 2, 3]}))
        assert "\n" not in str(caught.value)
    assert len(parse_endpoints("updates_to@9:tupe-r:bert-a updates_to@8.5:tupe-r:bert-a", seeds)) == 2
    three = dict(seeds, **{"tupe-a": [1, 2, 3]})  # two halfway questions against one B share its target
    assert len(parse_endpoints("updates_to@halfway:tupe-r:bert-a updates_to@halfway:tupe-a:bert-a", three)) == 2


def test_endpoint_result_defaults_keep_the_t_test_path():
    r = EndpointResult(Endpoint("final_loss", "a", "b"), {}, None, 0.001, None)
    assert r.censored == {} and r.ties == 0 and r.verdict == "not tested (fewer than 2 seeds)"


# ---------------------------------------------------------------------------------------------- the report


def write_curve(out: Path, model: str, seed: int, curve: Mapping[int, float]) -> None:
    """OUT/pretrain/MODEL/seedSEED/train.log with one validation line per point of ``curve``."""
    finished_log(out / "pretrain" / model / f"seed{seed}",
                 "".join(f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "{u}"}}\n'
                         for u, loss in curve.items()))


def test_report_tables_csv_and_halfway_target(tmp_path):
    """Six seeds, 240 updates. tupe-r crosses 9.0 at 150 (9.4 at 120, 8.6 at 180) and bert-a at 210 (9.2 at 180,
    8.8 at 240), but bert-a's seed 6 ends at 9.1: censored at 240, -90 c. All six tupe-r first: p = 2 / 64. At 8.5
    bert-a never gets there: censored on every seed, the warning. halfway (9.5 passed in): 110 against 150. Holm
    over the declared 4 (the halfway one untested, without its target, counting with p = 1): final_loss's tiny p,
    then 3 x 2 / 64 twice."""
    out = tmp_path / "study"
    for s in range(1, 7):
        write_curve(out, "tupe-r", s, {60: 10.0, 120: 9.4, 180: 8.6, 240: round(8.2 - 0.01 * s, 2)})
        write_curve(out, "bert-a", s, {60: 10.2, 120: 9.8, 180: 9.2, 240: 9.1 if s == 6 else 8.8})
    declared = ("final_loss:tupe-r:bert-a updates_to@9.0:tupe-r:bert-a updates_to@8.5:tupe-r:bert-a "
                "updates_to@halfway:tupe-r:bert-a")
    argv = [str(out), "--variants", "tupe-r bert-a", "--pretrain-seeds", "1 2 3 4 5 6", "--total-updates", "240",
            "--endpoints", declared, "--unigram-bits", "10.5"]
    assert sr.main(argv) == 0
    md = (out / "report.md").read_text()
    assert "**one Holm family of 4**" in md and "Those of updates_to by a sign test, below." in md
    assert "| updates_to@9.0: tupe-r - bert-a | 9.0 | -60.0 | -60.0 | -60.0 | -60.0 | -60.0 | -90.0 c | -60.0 | " \
           "[−∞, -60.0] (96.9%) | 6 / 0 / 0 | 0 / 1 | 0.031 |" in md  # seed 6's -90 is an upper bound: -inf below
    assert "| updates_to@halfway: tupe-r - bert-a | halfway (not resolved yet) | — |" in md
    assert "not tested (target not resolved yet)" in md
    for words in ("censored at the budget", "sign test", "order-statistic interval", "No TOST",
                  "**WARNING: updates_to@8.5: tupe-r - bert-a.** bert-a never reached the target on 6 of 6 seeds"):
        assert words in md, words
    rows = {(r["measure"], r["target"]): r for r in csv.DictReader((out / "endpoints.csv").open())}
    assert list(next(iter(rows.values())))[-len(endpoint_report.UPDATES_TO_COLUMNS):] == list(endpoint_report.UPDATES_TO_COLUMNS)
    nine = rows["updates_to", "9.0"]
    assert (nine["a_first"], nine["b_first"], nine["ties"], nine["censored_a"], nine["censored_b"]) == \
           ("6", "0", "0", "0", "1")
    assert nine["method"] == "sign test" and nine["mean"] == nine["sd"] == nine["margin"] == ""
    assert float(nine["median"]) == -60.0 and float(nine["coverage"]) == pytest.approx(62 / 64)
    assert float(nine["p"]) == pytest.approx(2 / 64) and nine["censored_by_pretrain_seed"] == "6:b"
    assert float(nine["p_holm"]) == pytest.approx(6 / 64) and nine["verdict"] == "not resolved"
    assert rows["updates_to", "8.5"]["censored_b"] == "6" and "warning" in rows["updates_to", "8.5"]["verdict"]
    assert rows["final_loss", ""]["method"] == "t-test" and rows["final_loss", ""]["family_size"] == "4"
    assert rows["updates_to", "halfway"]["p"] == "" and rows["updates_to", "halfway"]["target_bits"] == ""

    assert sr.main(argv + ["--updates-to-target", "9.5"]) == 0
    rows = {(r["measure"], r["target"]): r for r in csv.DictReader((out / "endpoints.csv").open())}
    half = rows["updates_to", "halfway"]
    assert float(half["target_bits"]) == 9.5 and half["by_pretrain_seed"] == " ".join(f"{s}:-40.000000"
                                                                                       for s in range(1, 7))
    assert "| updates_to@halfway: tupe-r - bert-a | halfway = 9.5000 |" in (out / "report.md").read_text()
    with pytest.raises(SystemExit):
        sr.main(argv + ["--updates-to-target", "-1"])


def test_report_without_updates_to_keeps_the_published_columns(tmp_path):
    out = tmp_path / "study"
    for s in (1, 2):
        write_curve(out, "tupe-r", s, {50: 9.6, 100: 8.4 + 0.1 * s})
        write_curve(out, "bert-a", s, {50: 9.9, 100: 9.0})
    assert sr.main([str(out), "--variants", "tupe-r bert-a", "--pretrain-seeds", "1 2", "--total-updates", "100",
                    "--endpoints", "final_loss:tupe-r:bert-a", "--unigram-bits", "10"]) == 0
    assert (out / "endpoints.csv").read_text().splitlines()[0] == ",".join(endpoint_report.ENDPOINT_COLUMNS)
    md = (out / "report.md").read_text()
    assert "updates_to@" not in md and "`updates_to`" not in md and "sign test" not in md


def test_figure_panel_draws_the_median_censored_seeds_and_no_interval_below_6_seeds():
    from tupe_study import figure

    a = {s: (100.0, False) for s in (1, 2, 3)}
    b = {1: (150.0, False), 2: (240.0, True), 3: (130.0, False)}
    [r] = family_tests([Endpoint("updates_to", "a", "b", "9.0")], values_of(a, b), resolution=0.001, margin=0.05)
    plt = figure._pyplot()
    fig = plt.figure()
    ax = fig.add_subplot()
    figure.endpoint_panel(ax, r)
    assert ax.get_title() == ("updates_to@9.0: a - b (updates)\nmedian -50.0 [-inf, +inf], Holm p 0.25: not resolved")
    hollow = [c for c in ax.collections if len(c.get_offsets()) == 1 and tuple(c.get_facecolor()[0]) == (1, 1, 1, 1)]
    assert [tuple(c.get_offsets()[0]) for c in hollow] == [(1.0, -140.0)]  # seed 2, censored b: a bound
    assert not ax.patches  # no margin band: the margin is in bits
    assert "no 95% interval" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)


def test_plan_says_the_t_test_plan_does_not_apply_to_updates_to():
    from tupe_study.power import plan_text

    fin = {"a": {1: 8.4, 2: 8.6, 3: 8.5}, "b": {1: 9.0, 2: 9.1, 3: 9.0}}
    text = plan_text([Endpoint("final_loss", "a", "b"), Endpoint("updates_to", "a", "b", "9.0")],
                     {"final_loss": fin}, "pilot", [], 2, 6)
    assert "updates_to@9.0: a - b | — | — | — | — | — | — | — | — (a sign test over seeds" in text
    assert "final_loss: a - b | 3 | -0.6000, -0.5000, -0.5000 |" in text


def test_a_diverged_run_is_named_and_the_report_goes_on(tmp_path):
    """A NaN validation loss (a diverged run) used to stop the report (Holm has no p for it); now the run is named
    among the problems with its update, left out, and the declared test goes on over the other seeds."""
    out = tmp_path / "study"
    for s in (1, 2, 3):
        write_curve(out, "tupe-r", s, {60: 9.5, 120: 8.0 + 0.1 * s})
        write_curve(out, "bert-a", s, {60: 9.6, 120: "nan" if s == 2 else 8.6 + 0.05 * s})
    argv = [str(out), "--variants", "tupe-r bert-a", "--pretrain-seeds", "1 2 3", "--total-updates", "120",
            "--endpoints", "final_loss:tupe-r:bert-a", "--unigram-bits", "10.5"]
    assert sr.main(argv) == 0
    md = (out / "report.md").read_text()
    assert "- bert-a seed 2: validation loss nan at update 120 (diverged): its losses are left out" in md
    (row,) = list(csv.DictReader((out / "endpoints.csv").open()))
    assert row["seeds"] == "2" and row["by_pretrain_seed"].split() == ["1:-0.550000", "3:-0.450000"]


def test_a_loss_auc_of_one_validation_per_curve_is_not_tested_instead_of_a_type_error():
    """VALID_POINTS=1: each curve has its final validation only, so no area; the declared loss_auc is 'not tested'
    and the family's other comparison is still tested (the report raised a TypeError on the missing areas)."""
    from types import SimpleNamespace

    runs_of = {m: [SimpleNamespace(seed=s, final=f + 0.1 * s, curve={240: f + 0.1 * s}) for s in (1, 2, 3)]
               for m, f in (("a", 8.0), ("b", 9.0))}
    declared = [Endpoint("final_loss", "a", "b"), Endpoint("loss_auc", "a", "b")]
    final, auc = endpoint_report.declared_tests(declared, runs_of, 240, 0.001, None, None)
    assert final.test is not None and final.verdict == "a lower than b"
    assert auc.test is None and auc.verdict == "not tested (fewer than 2 seeds)"
