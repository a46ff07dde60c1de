"""The study's statistics (study.stats, study.compare, the report's verdicts): Student's t against closed forms
and a plain integration, Holm against hand-adjusted p-values, the hierarchical bootstrap level by level, and
what the report settles on made-up studies whose per-seed differences are known."""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from study import compare, runs, stats
from study import report as sr

# ---------------------------------------------------------------------------------------------- Student's t


def t_density(x: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
        * (1 + x * x / df) ** (-(df + 1) / 2)


def t_cdf_by_integration(t: float, df: float, steps: int = 20000) -> float:
    """1/2 + the integral of the density from 0 to t, Simpson's rule in float64."""
    h = t / steps
    total = t_density(0, df) + t_density(t, df)
    total += sum((4 if i % 2 else 2) * t_density(i * h, df) for i in range(1, steps))
    return 0.5 + total * h / 3


def test_t_distribution_against_closed_forms_and_integration():
    """df = 1 (Cauchy: 1/2 + atan(t)/pi) and df = 2 (1/2 + t / (2 sqrt(2 + t^2))) in closed form; other df against
    Simpson's rule on the density; the quantiles against the closed form for df = 2 (t = a sqrt(2 / (1 - a^2)),
    a = 2q - 1) and the printed table values of t_{0.975}."""
    for t in (0.0, 0.3, 1.0, 2.5, 12.7, 300.0):
        for sign in (1, -1):
            assert stats.t_cdf(sign * t, 1) == pytest.approx(0.5 + math.atan(sign * t) / math.pi, abs=1e-13)
            assert stats.t_cdf(sign * t, 2) == pytest.approx(0.5 + sign * t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    for df in (3, 4.5, 7, 30):
        for t in (0.2, 1.0, 2.0, 4.0):
            assert stats.t_cdf(t, df) == pytest.approx(t_cdf_by_integration(t, df), abs=1e-10)
    # far tails: p = 1 - |t| / sqrt(2 + t^2) at df = 2, relative accuracy where the p is tiny
    for t in (50.0, 1000.0):
        exact = 2 / (math.sqrt(2 + t * t) * (math.sqrt(2 + t * t) + t))  # 1 - t/sqrt(2+t^2), without cancellation
        assert stats.t_two_sided_p(t, 2) == pytest.approx(exact, rel=1e-9)
    for q in (0.6, 0.9, 0.975, 0.9995):
        a = 2 * q - 1
        assert stats.t_quantile(q, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), rel=1e-10)
        assert stats.t_quantile(1 - q, 2) == pytest.approx(-a * math.sqrt(2 / (1 - a * a)), rel=1e-10)
    for df, table in ((1, 12.7062), (2, 4.3027), (5, 2.5706), (30, 2.0423)):
        assert stats.t_quantile(0.975, df) == pytest.approx(table, abs=1e-4)
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_t_distribution_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")  # installed with the test extra (scikit-learn); the study needs none
    for df in (1, 2, 3, 5, 10, 100):
        for t in (0.1, 1.0, 2.13, 5.0, 40.0):
            assert stats.t_two_sided_p(t, df) == pytest.approx(2 * scipy_stats.t.sf(t, df), rel=1e-9)
        for q in (0.975, 0.99999):
            assert stats.t_quantile(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-9)


def test_t_test_of_three_pre_training_seeds_by_hand():
    """The audit's case: TUPE-R - BERT-A on the average per pre-training seed, +1.41, +0.51, +3.27. By hand: mean
    1.73; squared deviations 0.1024 + 1.4884 + 2.3716 = 3.9624, s^2 = 1.9812, se = sqrt(1.9812 / 3) = 0.81265;
    t_{0.975, 2} = 0.95 sqrt(2 / 0.0975) = 4.30265: [1.73 - 3.4966, 1.73 + 3.4966] = [-1.77, +5.23]; t = 2.1288,
    p = 1 - t / sqrt(2 + t^2) = 0.167. Three signs that agree: settled by the old rule, not by this test."""
    got = stats.t_test([1.41, 0.51, 3.27])
    se = math.sqrt(3.9624 / 2 / 3)
    half = 0.95 * math.sqrt(2 / 0.0975) * se
    t = 1.73 / se
    assert got.n == 3 and got.mean == pytest.approx(1.73)
    assert (got.low, got.high) == pytest.approx((1.73 - half, 1.73 + half), abs=1e-9)
    assert (round(got.low, 2), round(got.high, 2)) == (-1.77, 5.23)
    assert got.p == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    assert round(got.p, 2) == 0.17
    # no spread: nothing to test against (p 0 when the mean is not 0, 1 when it is)
    assert stats.t_test([2.0, 2.0]).p == 0.0 and stats.t_test([0.0, 0.0, 0.0]).p == 1.0
    with pytest.raises(ValueError):
        stats.t_test([1.0])


# --------------------------------------------------------------------------------------------------- Holm


def test_holm_against_hand_adjusted_p_values():
    """m = 4: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04, made monotone -> 0.02,
    0.03, 0.06, 0.06; back in the given order. Capped at 1; a single test keeps its p."""
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # 2 x 0.5 = 1, then max(1, 0.6)
    assert stats.holm([0.2]) == pytest.approx([0.2])
    assert stats.holm([0.01, 0.01, 0.5]) == pytest.approx([0.03, 0.03, 0.5])  # ties: 3 x .01, max(.03, 2 x .01)
    assert stats.holm([]) == []
    assert stats.holm_by_key({"x": 0.04, "y": 0.001}) == pytest.approx({"x": 0.04, "y": 0.002})
    with pytest.raises(ValueError):
        stats.holm([0.1, math.nan])


# ------------------------------------------------------------------------------------- the bootstraps


def test_bootstrap_p_from_the_standard_error():
    rng = np.random.default_rng(0)
    draws = rng.normal(0.0, 1.0, 200000)
    assert stats.bootstrap_p(draws, 2.0) == pytest.approx(math.erfc(2 / math.sqrt(2)), abs=1e-3)  # 0.0455
    assert stats.bootstrap_p(draws, 0.0) == pytest.approx(1.0)
    assert stats.bootstrap_p(np.zeros(10), 0.0) == 1.0 and stats.bootstrap_p(np.zeros(10), 1.0) == 0.0
    assert stats.bootstrap_p(draws, 40.0) < 1e-300 or stats.bootstrap_p(draws, 40.0) == 0.0  # no floor at 1/resamples


def constant_rows(values_by_seed: Dict[int, List[float]], examples: int = 5):
    """(a, b, groups) whose row r has the constant difference given for it, grouped by pre-training seed."""
    diffs = [(s, v) for s, vs in values_by_seed.items() for v in vs]
    a = np.array([[v] * examples for _, v in diffs])
    return a, np.zeros_like(a), [s for s, _ in diffs]


def test_hierarchical_bootstrap_resamples_each_level_where_it_belongs():
    """Level by level against the exact variance of the bootstrap mean (population variances, as resampling
    with replacement gives):

    * seeds only: six seeds, each with three runs that agree, every example alike: the variance is that of a
      mean of 6 draws of the seed values, var(x) / 6. A resampling of the 18 runs as independent would give
      var(x) / 18: the runs of a seed are not more evidence about other pre-trainings.
    * runs within seeds: every seed's mean the same, its runs apart: sum over seeds of var_s / F_s, over n^2.
    * examples: one seed, one run: var(examples) / N.
    """
    x = [4.0, 3.0, 5.0, -2.0, -3.0, 4.0]
    got = stats.hierarchical_bootstrap([constant_rows({s: [v] * 3 for s, v in enumerate(x, 1)})], resamples=10000)
    exact = np.var(x) / 6
    assert got.var() == pytest.approx(exact, rel=0.04)
    assert got.mean() == pytest.approx(np.mean(x), abs=0.05)
    assert abs(got.var() - np.var(x) / 18) > 0.5 * exact  # not the flat resampling's

    runs_apart = {1: [0.0, 10.0], 2: [3.0, 5.0, 4.0], 3: [-1.0, 9.0]}  # means 5, 4, 4; variances 25, 2/3, 25
    got = stats.hierarchical_bootstrap([constant_rows(runs_apart)], resamples=10000, seed=1)
    seed_means = [np.mean(v) for v in runs_apart.values()]
    within = sum(np.var(v) / len(v) for v in runs_apart.values()) / 9
    # E over the seed draws of the within part, plus the variance of the drawn seeds' means: both levels
    assert got.var() == pytest.approx(within + np.var(seed_means) / 3, rel=0.05)

    a = np.array([[0.0, 100.0, 100.0, 0.0, 100.0, 0.0, 0.0, 0.0]])
    got = stats.hierarchical_bootstrap([(a, np.zeros_like(a), [1])], resamples=10000, seed=2)
    assert got.var() == pytest.approx(np.var(a) / 8, rel=0.04)


def test_hierarchical_bootstrap_draws_the_seeds_once_for_every_column():
    """Two columns whose per-seed differences cancel exactly (+x_s and -x_s on the same checkpoints): their
    average is 0 on every resample only if a resample draws the same pre-training seeds for both."""
    x = {1: [2.0], 2: [-1.0], 3: [5.0], 4: [0.5], 5: [3.0], 6: [-4.0]}
    first = constant_rows(x)
    second = constant_rows({s: [-v for v in vs] for s, vs in x.items()})
    both = stats.hierarchical_bootstrap([first, second], resamples=500, seed=4)
    assert np.abs(both).max() < 1e-12
    alone = stats.hierarchical_bootstrap([first], resamples=500, seed=4)
    assert alone.std() > 0.5


def test_hierarchical_bootstrap_with_a_metric_draws_the_same():
    """A metric recomputed per run (here the mean again) gives the same distribution for the same draws."""
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2, (6, 30)) * 100.0, rng.integers(0, 2, (6, 30)) * 100.0
    groups = [1, 1, 2, 2, 3, 3]
    plain = stats.hierarchical_bootstrap([(a, b, groups)], resamples=300, seed=7)
    with_metric = stats.hierarchical_bootstrap([(a, b, groups)], [np.zeros(30)], [lambda g, p: float(np.mean(p))],
                                               resamples=300, seed=7)
    assert with_metric == pytest.approx(plain)
    with pytest.raises(ValueError, match="every pre-training seed"):
        stats.hierarchical_bootstrap([(a, b, groups), (a[:2], b[:2], [1, 1])], resamples=5)


# ---------------------------------------------------------------------------- verdicts on made-up studies

N = 1000  # dev examples per task: a difference of k examples is k / 10 points


def write_run(run: Path, task: str, seed: int, right: int) -> None:
    """A finished run of a custom task at LR 1e-4: the first ``right`` of N dev examples right."""
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(
        {"task": task, "lr": 1e-4, "seed": seed, "metric": "accuracy", "best_valid": {"valid": 100 * right / N}}))
    gold = ["1", "0"] * (N // 2)
    pred = [g if i < right else ("0" if g == "1" else "1") for i, g in enumerate(gold)]
    (run / "predictions.json").write_text(json.dumps(
        {"task": task, "metric": "accuracy", "subsets": {"valid": {"gold": gold, "pred": pred}}}))


def make_seeded_study(out: Path, right: Dict[str, Dict[int, List[int]]], tasks=("task-a",)) -> str:
    """right[variant][pre-training seed] = the examples each fine-tuning run gets right (the same on every task);
    returns the --variants argument."""
    for v, by_seed in right.items():
        for ps, counts in by_seed.items():
            d = out / "pretrain" / v / f"seed{ps}"
            d.mkdir(parents=True)
            (d / "train.log").write_text(f'x | INFO | valid | {{"valid_loss": "{2.0 + ps / 10}", "valid_num_updates": "100"}}\n')
            for task in tasks:
                for k, r in enumerate(counts, 1):
                    write_run(out / "finetune" / v / f"seed{ps}" / task / f"lr1e-4_seed{k}", task, k, r)
    return " ".join(f"{v}:{','.join(str(s) for s in by_seed)}" for v, by_seed in right.items())


def intervals_of(out: Path, variants: str, resamples: int = 300) -> Dict:
    problems: List[str] = []
    study = runs.load_study(str(out), runs.parse_variants(variants, [1]), problems)
    columns = sorted({c for v in study for s in v.seeds for c in s.tasks})
    return {(iv.a, iv.b, iv.column): iv for iv in compare.bootstrap_pairs(study, columns, problems, resamples)}


def run_matrix(right: Dict[int, List[int]]) -> np.ndarray:
    return np.array([[100.0 * (i < r) for i in range(N)] for counts in right.values() for r in counts])


def test_three_seeds_that_agree_in_sign_are_not_settled(tmp_path):
    """A - B by pre-training seed +2, +1, +4 points (20, 10 and 40 examples), every fine-tuning run of a seed alike.
    The paired bootstrap over the 9 runs as if independent excludes 0 (the old verdict: settled, every seed the
    same sign); the t-test over the 3 seeds does not (mean 2.33, s = 1.528, t = 2.646, p = 1 - t / 3 = 0.118)."""
    a_right = {1: [520] * 3, 2: [510] * 3, 3: [540] * 3}
    b_right = {s: [500] * 3 for s in (1, 2, 3)}
    variants = make_seeded_study(tmp_path, {"A": a_right, "B": b_right})
    iv = intervals_of(tmp_path, variants)["A", "B", "task-a"]
    assert iv.method == compare.T_TEST and iv.seeds == 3 and iv.by_seed == pytest.approx({1: 2.0, 2: 1.0, 3: 4.0})
    t = (7 / 3) / (math.sqrt(7 / 3) / math.sqrt(3))  # s^2 = ((1/3)^2 + (4/3)^2 + (5/3)^2) / 2 = 7/3
    assert iv.p == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-9) and round(iv.p, 3) == 0.118
    assert iv.low < 0 < iv.high and iv.verdict == "not settled"
    flat = stats.percentile_interval(stats.paired_bootstrap(run_matrix(a_right), run_matrix(b_right), resamples=500))
    assert flat[0] > 0  # what the old rule read as settled


def test_six_seeds_that_disagree_in_sign_are_not_settled(tmp_path):
    """Six pre-training seeds, A - B +4, +3, +5, -2, -3, +4 points, the three fine-tuning runs of each seed in
    perfect agreement: the hierarchical bootstrap's interval holds 0 (its seeds are the unit), where resampling
    the 18 runs as independent excludes it."""
    per_seed = [40, 30, 50, -20, -30, 40]
    a_right = {s: [500 + d] * 3 for s, d in enumerate(per_seed, 1)}
    b_right = {s: [500] * 3 for s in a_right}
    variants = make_seeded_study(tmp_path, {"A": a_right, "B": b_right})
    iv = intervals_of(tmp_path, variants, resamples=1000)["A", "B", "task-a"]
    assert iv.method == compare.HIERARCHICAL and iv.seeds == 6
    assert iv.diff == pytest.approx(np.mean(per_seed) / 10)
    assert iv.low < 0 < iv.high and iv.verdict == "not settled" and iv.p > 0.05
    flat = stats.percentile_interval(stats.paired_bootstrap(run_matrix(a_right), run_matrix(b_right), resamples=1000))
    assert flat[0] > 0


def test_six_seeds_with_a_large_difference_are_settled(tmp_path):
    """Six seeds, A - B +8 to +11 points, the fine-tuning runs of a seed 1 point apart: settled by the hierarchical
    bootstrap, on each task and their average (3 comparisons, Holm over the 3)."""
    per_seed = [80, 100, 90, 110, 70, 100]
    a_right = {s: [500 + d - 10, 500 + d, 500 + d + 10] for s, d in enumerate(per_seed, 1)}
    b_right = {s: [500, 505, 495] for s in a_right}
    variants = make_seeded_study(tmp_path, {"A": a_right, "B": b_right}, tasks=("task-a", "task-b"))
    got = intervals_of(tmp_path, variants, resamples=500)
    assert sorted(got) == [("A", "B", c) for c in ("average", "task-a", "task-b")]
    for iv in got.values():
        assert iv.method == compare.HIERARCHICAL and iv.verdict == "settled"
        assert 0 < iv.low < iv.diff < iv.high and iv.diff == pytest.approx(np.mean(per_seed) / 10)
        test = stats.t_test(list(iv.by_seed.values()))
        assert iv.p >= test.p  # the larger of the t-test's and the bootstrap's
        assert iv.p_adjusted <= min(1.0, 3 * iv.p) * (1 + 1e-12) and iv.p_adjusted <= 0.05


def test_verdicts_need_the_holm_adjusted_p():
    iv = compare.Interval("a", "b", "SST-2", 2.0, 0.5, 3.5, {1: 1.5, 2: 2.5}, 6, 1000, compare.T_TEST, 0.001, 0.04)
    assert iv.verdict == "settled" and iv.method_label == "t-test over 2 pre-training seeds"
    iv.p_adjusted = 0.06  # the same p among more comparisons
    assert iv.verdict == "not settled"
    one = compare.Interval("a", "b", "SST-2", 2.0, 0.5, 3.5, {1: 2.0}, 3, 1000, compare.PAIRED_BOOTSTRAP, 1e-6, 1e-5)
    assert one.verdict == "dev set only (1 pre-training seed)"
    assert compare.Interval("a", "b", "SST-2", 2.0, 0.5, 3.5, {1: 2.0}, 3, 1000).verdict == "not settled"  # no p yet


def test_loss_differences_are_t_tested_over_pre_training_seeds():
    """a - b: -0.5, -0.4, -0.45 bits (t = -0.45 / (0.05 / sqrt 3) = -15.6, df 2: p = 1 - 15.6 / sqrt(2 + 15.6^2)
    = 0.0041); a - c: -0.1, +0.2, +0.1 (signs differ); b - c: +0.4, +0.6, +0.55. Holm over the 3 tested pairs;
    a pair with one shared seed (d) is not tested."""
    values = {"a": {1: 3.0, 2: 3.2, 3: 3.05}, "b": {1: 3.5, 2: 3.6, 3: 3.5}, "c": {1: 3.1, 2: 3.0, 3: 2.95},
              "d": {3: 1.0}}
    pairs = {(p.a, p.b): p for p in compare.paired_differences(values)}
    ab, ac, bc = pairs["a", "b"], pairs["a", "c"], pairs["b", "c"]
    assert ab.diffs == pytest.approx({1: -0.5, 2: -0.4, 3: -0.45}) and ab.mean == pytest.approx(-0.45)
    t = -0.45 / (0.05 / math.sqrt(3))
    assert ab.test.p == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-9)
    raw = [ab.test.p, ac.test.p, bc.test.p]
    assert [ab.p_adjusted, ac.p_adjusted, bc.p_adjusted] == pytest.approx(stats.holm(raw))
    assert ab.settled and not ac.settled
    assert pairs["a", "d"].test is None and not pairs["a", "d"].settled and math.isnan(pairs["a", "d"].p_adjusted)
    # two seeds: one degree of freedom, t_{0.975, 1} = 12.7: -0.5, -0.4 (t = -9) is not settled
    two = compare.paired_differences({"a": {1: 3.0, 2: 3.2}, "b": {1: 3.5, 2: 3.6}})[0]
    assert two.test.p == pytest.approx(1 - 2 * math.atan(9) / math.pi) and not two.settled


def plain_holm(p: List[float]) -> List[float]:
    """Holm as the textbook writes it: sort, multiply by m, m - 1, ..., keep it from falling, cap at 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, best = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        best = max(best, min(1.0, (len(p) - rank) * p[i]))
        out[i] = best
    return out


def test_report_counts_its_comparisons_and_chance_verdicts(tmp_path):
    """Three models, three pre-training seeds, two tasks: 3 pairs x (2 tasks + the average) = 9 comparisons, of
    which 9 x 0.05 = 0.45 would exclude 0 by chance alone. Per seed (points): A - B +2, +1, +4 (agreeing signs,
    p 0.118: not settled); A - C +10, +11, +9 (t = 17.3, p 0.0033, times at most 9 after Holm: settled); B - C
    +8, +10, +5 (p 0.034: not after Holm). differences.csv has the method, the seeds, p and Holm's p; the t-interval
    is the hand-computed one."""
    b = {s: [500] * 3 for s in (1, 2, 3)}
    a = {1: [520] * 3, 2: [510] * 3, 3: [540] * 3}
    c = {s: [a[s][0] - d] * 3 for s, d in zip((1, 2, 3), (100, 110, 90))}
    variants = make_seeded_study(tmp_path, {"A": a, "B": b, "C": c}, tasks=("task-a", "task-b"))
    assert sr.main([str(tmp_path), "--variants", variants, "--total-updates", "100", "--resamples", "300"]) == 0
    rows = list(csv.DictReader((tmp_path / "differences.csv").open()))
    assert len(rows) == 9 and {r["task"] for r in rows} == {"task-a", "task-b", "average"}
    assert all(r["method"] == compare.T_TEST and r["pretrain_seeds"] == "3" for r in rows)
    assert [float(r["p_holm"]) for r in rows] == pytest.approx(plain_holm([float(r["p"]) for r in rows]), rel=1e-5)
    by = {(r["a"], r["b"], r["task"]): r for r in rows}
    for task in ("task-a", "task-b", "average"):
        assert by["A", "B", task]["verdict"] == "not settled" and by["B", "C", task]["verdict"] == "not settled"
        assert by["A", "C", task]["verdict"] == "settled"
    ac = by["A", "C", "task-a"]
    seeds = [float(x.split(":")[1]) for x in ac["by_pretrain_seed"].split()]
    assert seeds == pytest.approx([10.0, 11.0, 9.0])
    half = 0.95 * math.sqrt(2 / 0.0975) * statistics.stdev(seeds) / math.sqrt(3)
    assert (float(ac["low"]), float(ac["high"])) == pytest.approx((10 - half, 10 + half), rel=1e-5)
    md = (tmp_path / "report.md").read_text()
    excluded = sum(float(r["low"]) > 0 or float(r["high"]) < 0 for r in rows)
    assert (f"**9 comparisons** (3 pairs of models, each on every column and the average). If no two models "
            f"differed, about 9 x 0.05 = 0.45 of them would have a 95% interval that excludes 0 by chance alone; "
            f"{excluded} do here.") in md
    assert "the chance that even one verdict below comes from chance alone is at most 5%" in md
    assert "Methods: t-test over pre-training seeds: 9. Verdicts: not settled: 6; settled: 3." in md
    assert "| A - C | task-a | +10.00 |" in md and "t-test over 3 pre-training seeds" in md
    assert "Settled: A above C (task-a); A above C (task-b); A above C (average)." in md
    # the loss table: three seeds per pair, t-tested (losses 2.1, 2.2, 2.3 for every model: every difference 0)
    assert "| A - B | 0.000 | 0.000 | 0.000 | 0.000 | [+0.000, +0.000] | 1.000 | 1.000 | no |" in md


def test_correlations_are_holm_adjusted_over_the_four_measures_and_given_without_the_weak_variants():
    from study import report, stats

    values = {"a": (0.1, 0.9, 0.2, 0.5, 70.0), "b": (0.3, 0.7, 0.1, 0.6, 72.0), "c": (0.2, 0.8, 0.4, 0.1, 71.0),
              "d": (0.5, 0.4, 0.3, 0.3, 74.0), "e": (0.4, 0.6, 0.5, 0.2, 48.7)}  # e: at chance, the weak one
    rows = [{"variant": n, "objective": "mlm", "loc_pos": v[0], "sym_pos": v[1], "loc_attn": v[2], "sym_attn": v[3],
             "downstream_avg": v[4]} for n, v in values.items()]
    corr = report.correlations(rows) + report.correlations(rows, ["e"])
    assert len(corr) == 8 and len({c["measure"] for c in corr}) == 8  # the CSV's rows keep apart
    full, without = corr[:4], corr[4:]
    assert all(c["n"] == 5 for c in full) and all(c["n"] == 4 for c in without)
    assert all(c["without"] == "e" and "without e" in c["measure"] for c in without)
    for group in (full, without):
        raw = [c["spearman_p"] for c in group]
        order = sorted(range(4), key=lambda i: raw[i])  # Holm by hand: p_(k) * (4 - k), running maximum, at most 1
        want, running = [0.0] * 4, 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, raw[i] * (4 - rank)))
            want[i] = running
        assert [c["spearman_p_holm"] for c in group] == pytest.approx(want)
    xs = [values[n][0] for n in "abcd"]
    assert without[0]["spearman"] == pytest.approx(stats.spearman(xs, [values[n][4] for n in "abcd"]))
