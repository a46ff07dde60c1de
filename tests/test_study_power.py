"""``study.sh --plan`` (tupe_study/power.py): the power of the paired t-test over pre-training seeds against the audit's
figures, a simulation and scipy's noncentral t; the plan read from a pilot folder and from a published study.csv."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tupe_study import stats
from tupe_study.power import paired_t_power, plan_text, pilot_values, pretrain_seconds, seeds_needed
from study_logs import write_valid_log

TUPE_QUESTION = "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"


def test_power_of_the_paired_t_test_against_the_audits_figures_and_a_simulation():
    """The audit: at the cpu-small effect (paired d = 1.68) a paired t-test has power 0.37 with 3 seeds, 0.80 with
    5 (0.799: 80% needs 6), 0.90 with 6. A simulation of the test itself (40,000 studies of n normal differences, the t-test of
    tupe_study.stats) agrees within its own error, also at 2 seeds (1 degree of freedom) and with no effect (the level)."""
    assert [round(paired_t_power(1.68, n), 2) for n in (3, 5, 6)] == [0.37, 0.80, 0.90]
    rng = np.random.default_rng(50)
    for d, n, alpha in ((1.68, 2, 0.05), (1.68, 6, 0.025), (0.0, 4, 0.05), (0.8, 10, 0.05)):
        x = d + rng.normal(size=(40000, n))
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
        simulated = np.mean(np.abs(t) > stats.t_quantile(1 - alpha / 2, n - 1))
        assert paired_t_power(d, n, alpha) == pytest.approx(simulated, abs=0.01)
    assert seeds_needed(1.68, 0.8, 0.05) == 6 and seeds_needed(1.68, 0.9, 0.05) == 6
    assert seeds_needed(1.68, 0.8, 0.025) == 7 and seeds_needed(0.0, 0.8, 0.05) is None


def test_power_against_scipys_noncentral_t():
    scipy_stats = pytest.importorskip("scipy.stats")
    for d, n, alpha in ((0.3, 2, 0.05), (1.68, 3, 0.05), (0.5, 30, 0.01), (2.5, 4, 0.025)):
        c = scipy_stats.t.ppf(1 - alpha / 2, n - 1)
        ncp = d * math.sqrt(n)
        exact = scipy_stats.nct.sf(c, n - 1, ncp) + scipy_stats.nct.cdf(-c, n - 1, ncp)
        assert paired_t_power(d, n, alpha) == pytest.approx(exact, abs=1e-6)


def test_plan_from_a_pilot_folder_and_from_a_published_csv(tmp_path):
    """A pilot of 3 seeds: final differences -0.8, -0.3, -1.1 (mean -0.7333, SD 0.4041, d 1.81), AUC differences
    (means of the two validations) -0.5, -0.1, -0.6 (mean -0.4, SD 0.2646, d 1.51). Its timings give the
    pre-training time of 2 models x 6 seeds. A study.csv gives the final losses only."""
    pilot = tmp_path / "pilot"
    for seed, (t, b) in {1: ((9.7, 8.2), (9.9, 9.0)), 2: ((9.6, 8.7), (9.5, 9.0)), 3: ((10.1, 7.9), (10.2, 9.0))}.items():
        write_valid_log(pilot, "tupe-r", seed, t)
        write_valid_log(pilot, "bert-a", seed, b)
    (pilot / "timings.tsv").write_text("".join(f"pretrain\tx {s}\t{600 + 60 * s}\t2026-01-01T00:00:00Z\thost\n"
                                               for s in range(6)) + "prep\tall\t60\t2026-01-01T00:00:00Z\thost\n")
    from tupe_study.endpoints import parse_endpoints

    endpoints = parse_endpoints(TUPE_QUESTION, {"tupe-r": [11, 12], "bert-a": [11, 12]})
    write_valid_log(pilot, "tupe-r", 4, (9.8,))  # still running: validated at update 50 of 100, no final loss
    values, source = pilot_values(str(pilot), ["tupe-r", "bert-a"])
    assert values["final_loss"]["tupe-r"] == {1: 8.2, 2: 8.7, 3: 7.9}
    assert 4 not in values["loss_auc"]["tupe-r"] and "(left out, unfinished before update 100: tupe-r seed 4)" in source
    assert values["loss_auc"]["bert-a"] == pytest.approx({1: 9.45, 2: 9.25, 3: 9.6})
    assert pretrain_seconds(str(pilot)) == [600, 660, 720, 780, 840, 900]
    text = plan_text(endpoints, values, source, pretrain_seconds(str(pilot)), models=2, seeds=6)
    d = (0.7333333333 / 0.4041451884)
    line = next(x for x in text.splitlines() if x.startswith("final_loss"))
    assert line.startswith("final_loss: tupe-r - bert-a | 3 | -0.8000, -0.3000, -1.1000 | -0.7333 | 0.4041 | 1.81 | "
                           f"{seeds_needed(d, 0.8, 0.025)} | {seeds_needed(d, 0.9, 0.025)} | "
                           f"{paired_t_power(d, 6, 0.025):.2f}")
    auc = next(x for x in text.splitlines() if x.startswith("loss_auc"))
    d = 0.4 / math.sqrt(0.07)  # squared deviations 0.01 + 0.09 + 0.04 over 2
    assert (f"| -0.5000, -0.1000, -0.6000 | -0.4000 | 0.2646 | 1.51 | {seeds_needed(d, 0.8, 0.025)} | "
            f"{seeds_needed(d, 0.9, 0.025)} | {paired_t_power(d, 6, 0.025):.2f}") in auc
    assert "alpha = 0.05 / 2 = 0.025" in text
    # 12 runs of 12.5 min: 2.5 h of part time, 1.25 h in 2 lanes
    assert "2 model(s) x 6 seed(s) = 12 runs of about 12.5 min each" in text and "about 1.2 h with --lanes 2" in text
    csv_file = tmp_path / "study.csv"
    csv_file.write_text("variant,objective,final_valid_loss_by_seed\nbert-a,mlm,1:8.8430 2:8.7720 3:8.7840\n"
                        "tupe-r,mlm,1:8.0100 2:8.5110 3:7.6520\n")
    values, source = pilot_values(str(csv_file), ["tupe-r", "bert-a"])
    text = plan_text(endpoints, values, source, [], models=2, seeds=6)
    assert "| -0.8330, -0.2610, -1.1320 | -0.7420 | 0.4426 | 1.68 | 7 | 8 | 0.79" in text
    assert "loss_auc: tupe-r - bert-a | 0 |" in text and "no timings.tsv" in text


def test_plan_command_needs_declared_endpoints(tmp_path, monkeypatch, capsys):
    from tupe_study.__main__ import main

    csv_file = tmp_path / "study.csv"
    csv_file.write_text("variant,objective,final_valid_loss_by_seed\nbert-a,mlm,1:8.8 2:8.7\ntupe-r,mlm,1:8.0 2:8.5\n")
    monkeypatch.setenv("VARIANTS", "bert-a tupe-r")
    monkeypatch.setenv("PRETRAIN_SEEDS", "11 12 13")
    monkeypatch.setenv("TASKS", "none")
    monkeypatch.delenv("ENDPOINTS", raising=False)
    assert main(["--plan", str(csv_file)]) == 2 and "--plan needs ENDPOINTS" in capsys.readouterr().err
    monkeypatch.setenv("ENDPOINTS", "final_loss:tupe-r:bert-a")
    assert main(["--plan", str(csv_file)]) == 0
    out = capsys.readouterr().out
    assert "Declared family: 1 comparison(s)" in out and "final_loss: tupe-r - bert-a | 2 | -0.8000, -0.2000" in out
    assert main(["--plan", str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize("header, row, said", [
    ("variant,objective,final_valid_loss", "{v},mlm,8.8", "no column 'final_valid_loss_by_seed' (its columns: variant, "
                                                            "objective, final_valid_loss)"),
    ("model,final_valid_loss_by_seed", "{v},1:8.8 2:8.7", "no column 'variant' (its columns: model, "
                                                          "final_valid_loss_by_seed)"),
    ("variant,final_valid_loss_by_seed", "{v},1=8.8 2:8.7", "line 2: final_valid_loss_by_seed is '1=8.8 2:8.7', not "
                                                            "SEED:LOSS pairs"),
])
def test_plan_names_what_a_csv_lacks(tmp_path, monkeypatch, capsys, header, row, said):
    """A CSV without the columns --plan reads (it planned from no pilot values, silently), or with a cell it cannot
    read (a ValueError's traceback): one line naming the column, exit 2."""
    from tupe_study.__main__ import main

    csv_file = tmp_path / "study.csv"
    csv_file.write_text("\n".join([header, row.format(v="bert-a"), row.format(v="tupe-r")]) + "\n")
    monkeypatch.setenv("ENDPOINTS", "final_loss:tupe-r:bert-a")
    monkeypatch.setenv("TASKS", "none")
    for name in ("VARIANTS", "PRETRAIN_SEEDS"):
        monkeypatch.delenv(name, raising=False)
    assert main(["--plan", str(csv_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"study.sh: error: --plan {csv_file}: {said}"), err
    assert len(err.splitlines()) == 1
