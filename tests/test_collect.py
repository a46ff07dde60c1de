"""tupe_glue.collect on synthetic run folders, checked against a hand computation; tupe_glue.published."""
from __future__ import annotations

import csv
import json
import os
import random
import re
import statistics
import struct

import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from conftest import best_per_subset  # noqa: E402
from tupe_glue import collect  # noqa: E402
from tupe_glue.published import COLUMNS, TABLE1  # noqa: E402
from tupe_glue.tasks import PAPER_LRS, PAPER_SEEDS  # noqa: E402

LRS = list(PAPER_LRS)  # the runs are made at the paper's grid, which tupe_glue.collect expects by default
SEEDS = [int(s) for s in PAPER_SEEDS]
# paper column -> (task folder, subset, metric); written out here, independent of tupe_glue.collect
PAPER = {"MNLI-m": ("MNLI", "valid", "accuracy"), "MNLI-mm": ("MNLI", "valid1", "accuracy"),
         "QNLI": ("QNLI", "valid", "accuracy"), "QQP": ("QQP", "valid", "accuracy"),
         "SST": ("SST-2", "valid", "accuracy"), "CoLA": ("CoLA", "valid", "mcc"),
         "MRPC": ("MRPC", "valid", "accuracy"), "RTE": ("RTE", "valid", "accuracy"),
         "STS": ("STS-B", "valid", "pearson")}
LOG_TASKS = {"MNLI", "CoLA", "RTE"}  # these write fairseq logs; the others result.json


def simple_line(subset: str, metric: str, value: float, epoch: int) -> str:
    return (f"2024-01-01 00:00:0{epoch} | INFO | {subset} | epoch {epoch:03d} | valid on '{subset}' subset | "
            f"loss 0.5{epoch} | nll_loss 0.01 | {metric} {value} | wps 100 | wpb 160 | bsz 8 | "
            f"num_updates {epoch * 10}\n")


def make_runs(root, skip=()):
    """Synthetic grid; returns {column: {lr: [per-seed best scores]}} for the hand computation."""
    rng = random.Random(7)
    truth = {c: {lr: [] for lr in LRS} for c in PAPER}
    for task in sorted({t for t, _, _ in PAPER.values()}):
        cols = [c for c, (t, _, _) in PAPER.items() if t == task]
        for i, lr in enumerate(LRS):
            for seed in SEEDS:
                if (task, lr, seed) in skip or task in skip:
                    continue
                d = root / task / f"lr{lr}_seed{seed}"
                d.mkdir(parents=True)
                if task in LOG_TASKS:
                    lines, seen = [], {c: [] for c in cols}
                    for epoch in range(1, 4):  # three validations
                        for c in cols:
                            _, subset, metric = PAPER[c]
                            v = round(rng.uniform(50, 90) + 2 * i, 1)
                            seen[c].append(v)
                            lines.append(simple_line(subset, metric, v, epoch))
                        lines.append(f"2024-01-01 | INFO | train | epoch {epoch:03d} | loss 0.4 | accuracy 99.9\n")
                    (d / "train.log").write_text("".join(lines))
                    # the best validation of the first column (MNLI-m); the others read at that validation
                    k = max(range(3), key=lambda j: (seen[cols[0]][j], j))
                    for c in cols:
                        truth[c][lr].append(seen[c][k])
                else:
                    v = rng.uniform(60, 95) + i
                    metric = PAPER[cols[0]][2]
                    (d / "result.json").write_text(json.dumps(
                        {"task": task, "lr": float(lr), "seed": seed, "metric": metric,
                         "best_valid": {"valid": v}, "checkpoint_variant": "tupe_r"}))
                    truth[cols[0]][lr].append(v)
    return truth


def hand_table(truth):
    """Median per LR, best LR's median (MNLI-mm: at MNLI-m's best LR) -- with statistics.median only."""
    best, best_lr = {}, {}
    for c, by_lr in truth.items():
        medians = {lr: statistics.median(v) for lr, v in by_lr.items() if v}
        best_lr[c] = max(medians, key=medians.get) if medians else None
        best[c] = medians[best_lr[c]] if medians else None
    mm = truth["MNLI-mm"][best_lr["MNLI-m"]]
    best["MNLI-mm"] = statistics.median(mm) if mm else None
    return best


def our_row(stdout: str, name: str):
    row = next(line for line in stdout.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in row.strip("|").split("|")][1:]


def test_full_grid_matches_hand_computation(tmp_path, capsys):
    truth = make_runs(tmp_path / "runs")
    best = hand_table(truth)
    avg = sum(best[c] for c in COLUMNS) / 9
    out_csv = tmp_path / "t.csv"
    rc = collect.main([str(tmp_path / "runs"), "--row-name", "mine", "--out-csv", str(out_csv),
                       "--out-png", str(tmp_path / "t.png"), "--strict"])
    stdout = capsys.readouterr().out
    assert rc == 0
    assert our_row(stdout, "mine") == [f"{best[c]:.2f}" for c in COLUMNS] + [f"{avg:.2f}"]
    assert "- none: every column has its full grid" in stdout
    for model in ("BERT-A", "BERT-R", "TUPE-A", "TUPE-R"):
        assert our_row(stdout, f"{model} (published)")[-1] == f"{TABLE1[model].avg:.2f}"
    # every LR spelt as the run folders spell it (lr2e-5_seed1: tupe_common.numbers.spelling), not 2e-05
    lines = stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| Column | metric |")))
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[header:header + 11]]
    assert cells[0][2:-2] == [f"lr {lr}" for lr in LRS]
    assert {row[-2].split(" (")[0] for row in cells[2:]} <= set(LRS)  # each column's best LR

    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    assert [r["model"] for r in rows] == ["mine", "BERT-A", "BERT-R", "TUPE-A", "TUPE-R"]
    assert rows[0]["complete"] == "yes"
    for c in COLUMNS:
        assert float(rows[0][c]) == pytest.approx(best[c], abs=1e-4)
    assert float(rows[0]["Avg"]) == pytest.approx(avg, abs=1e-4)
    assert float(rows[4]["CoLA"]) == 63.56 and float(rows[4]["Avg"]) == 85.04

    with open(tmp_path / "t_per_lr.csv") as f:
        detail = list(csv.DictReader(f))
    assert len(detail) == 9 * len(LRS) and {r["lr"] for r in detail} == set(LRS)
    m_medians = {lr: statistics.median(v) for lr, v in truth["MNLI-m"].items()}
    for c, by_lr in truth.items():
        medians = {lr: statistics.median(v) for lr, v in by_lr.items()}
        best_lr = max(medians, key=medians.get) if c != "MNLI-mm" else max(m_medians, key=m_medians.get)
        for r in (r for r in detail if r["column"] == c):
            lr = LRS[[float(x) for x in LRS].index(float(r["lr"]))]
            assert float(r["median"]) == pytest.approx(medians[lr], abs=1e-4)
            assert int(r["n_seeds"]) == 5
            assert (r["best_lr"] == "yes") == (lr == best_lr)


def test_even_seed_count_median_is_mean_of_middle_two(tmp_path, capsys):
    for seed, v in zip(SEEDS[:4], [70.0, 90.0, 71.0, 60.0]):
        d = tmp_path / "runs" / "RTE" / f"lr1e-5_seed{seed}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({"metric": "accuracy", "best_valid": {"valid": v}}))
    collect.main([str(tmp_path / "runs"), "--expected-lrs", "1e-5", "--seeds", "4",
                  "--out-csv", str(tmp_path / "a.csv"), "--out-png", str(tmp_path / "a.png")])
    stdout = capsys.readouterr().out
    assert "| RTE | accuracy | 70.50 (4) | 1e-5 | 70.50 |" in stdout  # as its folders lr1e-5_seed*


def test_missing_runs_are_reported_not_averaged(tmp_path, capsys):
    runs = tmp_path / "runs"
    make_runs(runs, skip={("RTE", "3e-5", 3), "QQP", ("MRPC", "5e-5", 1), ("MRPC", "5e-5", 2),
                          ("MRPC", "5e-5", 3), ("MRPC", "5e-5", 4), ("MRPC", "5e-5", 5)})
    bad = runs / "CoLA" / "lr2e-5_seed9"
    bad.mkdir()
    (bad / "train.log").write_text(simple_line("valid", "accuracy", 55.0, 1))  # no mcc: no --report-mcc
    (runs / "STS-B" / "notes").mkdir()
    rc = collect.main([str(runs), "--variant-name", "mine", "--expected-seeds", "1,2,3,4,5",  # --row-name's old name
                       "--out-csv", str(tmp_path / "m.csv"), "--out-png", str(tmp_path / "m.png"), "--strict"])
    stdout = capsys.readouterr().out
    assert rc == 1
    row = our_row(stdout, "mine")
    assert row[-1] == "incomplete"
    assert row[COLUMNS.index("QQP")] == "—"
    assert row[COLUMNS.index("RTE")].endswith("*") and row[COLUMNS.index("MRPC")].endswith("*")
    assert not row[COLUMNS.index("QNLI")].endswith("*")
    assert "- QQP: no runs" in stdout
    assert "- RTE lr 3e-5: 4 seeds, missing seed(s) 3" in stdout
    assert "- MRPC lr 5e-5: no runs" in stdout
    assert re.search(r"lr2e-5_seed9/train\.log: no validation line with 'mcc'.*--report-mcc", stdout)
    assert "notes: not a run folder name" in stdout
    with open(tmp_path / "m.csv") as f:
        ours = next(csv.DictReader(f))
    assert ours["complete"] == "no" and ours["Avg"] == "" and ours["QQP"] == ""


def test_fairseq_log_formats(tmp_path):
    log = tmp_path / "hydra_train.log"
    log.write_text(
        simple_line("valid", "accuracy", 71.5, 1) + simple_line("valid1", "accuracy", 70.0, 1)
        + simple_line("valid", "accuracy", 73.2, 2) + simple_line("valid1", "accuracy", 69.0, 2)
        + '2024-01-01 00:00:03 | INFO | valid | {"epoch": 3, "valid_loss": "0.4", "valid_accuracy": "72.9"}\n'
        + '[2024-01-01 00:00:04,000][valid1][INFO] - {"epoch": 4, "valid1_accuracy": "74.1"}\n'
        + "[2024-01-01 00:00:05,000][valid][INFO] - epoch 005 | valid on 'valid' subset | accuracy 73.0\n"
        + '2024-01-01 | INFO | train | {"epoch": 4, "train_accuracy": "99"}\n'
    )
    assert best_per_subset(str(log), "accuracy") == {"valid": 73.2, "valid1": 74.1}
    assert best_per_subset(str(log), "mcc") == {}


def test_result_json_checks(tmp_path):
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"metric": "pearson", "scale": "fraction", "best_valid": {"valid": {"pearson": 0.8912}}}))
    assert collect.read_result_json(str(p), "STS-B", "pearson") == {"valid": pytest.approx(89.12)}
    p.write_text(json.dumps({"metric": "accuracy", "best_valid": {"valid": 61.0}}))
    with pytest.raises(ValueError, match="paper's metric for CoLA is 'mcc'"):
        collect.read_result_json(str(p), "CoLA", "mcc")
    p.write_text('{"metric": "accuracy",\n "best_valid": ')
    with pytest.raises(ValueError, match="line 2"):
        collect.read_result_json(str(p), "RTE", "accuracy")


def test_a_score_outside_its_metrics_range_is_refused(tmp_path):
    p = tmp_path / "result.json"
    for metric, value, scale in (("accuracy", 9999, "percent"), ("accuracy", 1.5, "fraction"), ("mcc", -101, "percent")):
        p.write_text(json.dumps({"metric": metric, "scale": scale, "best_valid": {"valid": value}}))
        with pytest.raises(ValueError, match=rf"best_valid\['valid'\] = {value} is outside {metric}'s range"):
            collect.read_result_json(str(p), "CoLA" if metric == "mcc" else "RTE", metric)
    p.write_text(json.dumps({"metric": "mcc", "best_valid": {"valid": -12.5}}))  # a negative MCC is a score
    assert collect.read_result_json(str(p), "CoLA", "mcc") == {"valid": -12.5}


def test_runs_of_two_checkpoints_make_no_row(tmp_path, capsys):
    """One row of the table is one model: runs fine-tuned from two checkpoints (by the fingerprint they record,
    or, older runs, by their checkpoint's path) are refused (exit 1), naming both; one checkpoint is a row."""
    def run(lr, seed, inputs=None, checkpoint="/ckpt/a.pt"):
        d = tmp_path / "runs" / "RTE" / f"lr{lr}_seed{seed}"
        d.mkdir(parents=True)
        result = {"task": "RTE", "metric": "accuracy", "best_valid": {"valid": 60.0 + seed}, "checkpoint": checkpoint}
        if inputs:
            result["inputs"] = inputs
        (d / "result.json").write_text(json.dumps(result))

    run("2e-5", 1, {"checkpoint": "aaaa"})
    run("2e-5", 2, {"checkpoint": "aaaa"})
    assert collect.main([str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    (tmp_path / "runs" / "glue_results.csv").unlink()
    run("2e-5", 3, {"checkpoint": "bbbb"})
    assert collect.main([str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "2 different checkpoints (aaaa: 2 run(s)" in err and "bbbb: 1 run(s)" in err and "error:" in err
    assert not (tmp_path / "runs" / "glue_results.csv").exists()

    # a run from before runs recorded their inputs: the same checkpoint as a newer run of its path
    for seed in (1, 2, 3):
        (tmp_path / "runs" / "RTE" / f"lr2e-5_seed{seed}" / "result.json").unlink()
        (tmp_path / "runs" / "RTE" / f"lr2e-5_seed{seed}").rmdir()
    run("2e-5", 1, {"checkpoint": "aaaa"})
    run("2e-5", 2)
    assert collect.main([str(tmp_path / "runs")]) == 0
    run("2e-5", 3, checkpoint="/ckpt/b.pt")
    assert collect.main([str(tmp_path / "runs"), "--force"]) == 1
    err = capsys.readouterr().err
    assert "2 different checkpoints (aaaa: 1 run(s)" in err and "/ckpt/b.pt: 1 run(s)" in err


def test_runs_outside_the_expected_grid_are_listed_not_counted(tmp_path, capsys):
    """An earlier grid's runs left in RUNS (seeds 6 and 7, an LR of another grid) change no cell: the protocol's
    cell is the median of the expected seeds at the expected LRs; each stray run is listed. Without
    --expected-seeds, more seeds than --seeds at one LR leave the column incomplete."""
    runs = tmp_path / "runs"
    best = hand_table(make_runs(runs))

    def stray(name, score):
        d = runs / "RTE" / name
        d.mkdir()
        (d / "result.json").write_text(json.dumps({"task": "RTE", "metric": "accuracy", "best_valid": {"valid": score}}))

    for name in ("lr5e-5_seed6", "lr5e-5_seed7", "lr1e-4_seed1", "lr1e-4_seed2", "lr1e-4_seed3"):
        stray(name, 99.0)
    rc = collect.main([str(runs), "--row-name", "mine", "--expected-seeds", "1,2,3,4,5,", "--strict",
                       "--out-csv", str(tmp_path / "a.csv"), "--out-png", str(tmp_path / "a.png")])
    stdout = capsys.readouterr().out
    row = our_row(stdout, "mine")
    assert row[COLUMNS.index("RTE")] == f"{best['RTE']:.2f}" and row[-1] == f"{sum(best.values()) / 9:.2f}"
    assert "seed 6 is not an expected seed (--expected-seeds 1,2,3,4,5): not counted" in stdout
    assert stdout.count("LR 1e-4 is not in the expected grid (--expected-lrs 2e-5,3e-5,4e-5,5e-5): not counted") == 3
    assert rc == 1  # --strict: a stray run is a problem

    rc = collect.main([str(runs), "--row-name", "mine", "--force",
                       "--out-csv", str(tmp_path / "a.csv"), "--out-png", str(tmp_path / "a.png")])
    stdout = capsys.readouterr().out
    row = our_row(stdout, "mine")
    assert row[COLUMNS.index("RTE")].endswith("*") and row[-1] == "incomplete"
    assert "RTE lr 5e-5: 7 seeds, more than the 5 expected (--seeds)" in stdout


def test_one_tasks_runs_of_other_settings_make_no_table(tmp_path, capsys):
    """One column is one protocol: RTE's runs made with two METRIC_AVERAGING values are refused (exit 1),
    naming the setting and a run of each; a number spelt two ways (EPOCHS 10 and 1e1) is one setting, auto matches
    a value, and binaries made again (another fingerprint of the same task) are the same task."""
    def run(seed, averaging, epochs="10"):
        d = tmp_path / "runs" / "RTE" / f"lr2e-5_seed{seed}"
        d.mkdir(parents=True)
        inputs = {"task": "RTE", "lr": "2e-5", "seed": str(seed), "checkpoint": "aaaa", "data": "dddd",
                  "METRIC_AVERAGING": averaging, "EPOCHS": epochs}
        (d / "result.json").write_text(json.dumps({"task": "RTE", "metric": "accuracy", "checkpoint": "/ck/a.pt",
                                                   "best_valid": {"valid": 60.0 + seed}, "inputs": inputs}))

    run(1, "dev_set")
    run(2, "dev_set", epochs="1e1")
    run(4, "dev_set", epochs="auto")  # auto may be 10 for RTE
    data = tmp_path / "runs" / "RTE" / "lr2e-5_seed4" / "result.json"  # binaries made again: another fingerprint
    data.write_text(data.read_text().replace('"dddd"', '"eeee"'))
    assert collect.main([str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    run(3, "per_batch")
    assert collect.main([str(tmp_path / "runs"), "--force"]) == 1
    err = capsys.readouterr().err
    assert "RTE: its runs were made with 2 different settings (METRIC_AVERAGING dev_set vs per_batch; e.g." in err
    assert "lr2e-5_seed3" in err and "EPOCHS" not in err


@pytest.mark.parametrize("option, value, says", [
    ("--expected-seeds", "1,x", "--expected-seeds 1,x: not a comma-separated list of integers"),
    ("--expected-lrs", "2e-5,abc", "--expected-lrs 2e-5,abc: not a comma-separated list of numbers"),
    ("--expected-lrs", ",", "--expected-lrs: no LR given")])
def test_a_malformed_grid_is_a_usage_line(tmp_path, capsys, option, value, says):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as exited:
        collect.main([str(tmp_path / "runs"), option, value])
    assert exited.value.code == 2 and says in capsys.readouterr().err


def test_png_is_a_png(tmp_path, capsys):
    make_runs(tmp_path / "runs")
    png = tmp_path / "plot.png"
    collect.main([str(tmp_path / "runs"), "--out-csv", str(tmp_path / "c.csv"), "--out-png", str(png)])
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 500 and height > 200


# ---- tupe_glue/published.py ---------------------------------------------------------------------------


def test_published_avg_is_mean_of_nine_columns():
    assert len(TABLE1) == 8
    for row in TABLE1.values():
        assert len(row.scores) == 9
        assert abs(sum(row.scores) / 9 - row.avg) <= 0.005, row.model


def test_published_rows_match_the_protocol_doc():
    """tupe_glue/published.py and the table of docs/glue_protocol.md §7 (copied from the paper) agree."""
    text = open(os.path.join(REPO, "docs", "glue_protocol.md"), encoding="utf-8").read()
    table = text.split("## 7. Published results")[1].split("## 8.")[0]
    found = 0
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 12 or cells[0] not in TABLE1:
            continue
        row = TABLE1[cells[0]]
        assert row.scores == tuple(float(x) for x in cells[2:11]) and row.avg == float(cells[11])
        assert row.steps == cells[1]
        found += 1
    assert found == 8


def test_a_named_output_that_exists_is_refused_without_force(tmp_path, capsys):
    """--out-csv/--out-png name the user's files: an existing one is kept (exit 2, nothing written) unless --force;
    the default RUNS_DIR/glue_results.* are collect's own and rewritten on every collect."""
    make_runs(tmp_path / "runs")
    mine = tmp_path / "mine.csv"
    mine.write_text("the user's own table\n")
    with pytest.raises(SystemExit) as stop:
        collect.main([str(tmp_path / "runs"), "--out-csv", str(mine), "--out-png", str(tmp_path / "c.png")])
    assert stop.value.code == 2 and f"--out-csv {mine} exists; pass --force" in capsys.readouterr().err
    assert mine.read_text() == "the user's own table\n" and not (tmp_path / "c.png").exists()
    assert collect.main([str(tmp_path / "runs"), "--out-csv", str(mine), "--out-png", str(tmp_path / "c.png"),
                         "--force"]) == 0
    assert mine.read_text() != "the user's own table\n"  # replaced with --force
    for _ in range(2):  # the defaults: rewritten
        assert collect.main([str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs" / "glue_results.csv").exists()
