"""One spelling per number (tupe_common.numbers): ``1e-3`` and ``0.001`` are one run wherever a number names
something. A run folder is found by value (``lr0.001_seed1`` made before is the run of ``1e-3``; ``lr5e-4_seed1``
keeps its name), a new one takes the short spelling, a list holding two spellings of one value is refused, and
tupe_glue.collect counts no seed twice. In-process, on made-up run folders; the real ``finetune.sh`` skip is in
tests/test_glue_scripts.py."""
from __future__ import annotations

import json

import pytest

from tupe_glue import collect, finetune
from tupe_glue.grid import main_sh
from tupe_study.plan import Plan
from tupe_study.runs import read_finetune_dir
from tupe_study.sweep import sweep_dir
from tupe_common.errors import UsageError
from tupe_common.numbers import check_once, named, values_of


def finished(run_dir, score: float = 60.0, **inputs: str) -> None:
    """A finished RTE run: result.json as glue/finetune.sh writes it (its inputs, when given)."""
    run_dir.mkdir(parents=True)
    result = {"task": "RTE", "metric": "accuracy", "best_valid": {"valid": score}, "checkpoint": "/c.pt"}
    if inputs:
        result["inputs"] = inputs
    (run_dir / "result.json").write_text(json.dumps(result))


def test_a_folder_is_found_by_value_and_a_new_one_takes_the_short_spelling(tmp_path):
    assert named(str(tmp_path), "lr{}_seed{}", 0.001, 1) == "lr1e-3_seed1"  # nothing there: the short spelling
    assert named(str(tmp_path / "absent"), "lr{}", 0.0005) == "lr5e-4"
    (tmp_path / "lr0.001_seed1").mkdir()  # made before, spelt otherwise
    (tmp_path / "lr5e-4_seed1").mkdir()  # as typed before: keeps its name
    assert named(str(tmp_path), "lr{}_seed{}", float("1e-3"), 1) == "lr0.001_seed1"
    assert named(str(tmp_path), "lr{}_seed{}", 0.0005, 1) == "lr5e-4_seed1"
    assert named(str(tmp_path), "lr{}_seed{}", 0.001, 2) == "lr1e-3_seed2"  # another seed is another run
    (tmp_path / "lr1e-3_seed1").mkdir()
    with pytest.raises(UsageError, match="lr0.001_seed1 and lr1e-3_seed1 name one run"):
        named(str(tmp_path), "lr{}_seed{}", 0.001, 1)
    assert values_of("lr{}_seed{}", "lr2e-05_seed-3") == (2e-5, -3.0)
    assert values_of("lr{}_seed{}", "lr1e999_seed1") is None and values_of("lr{}", "lr1e-3.lock") is None


def test_finetune_names_the_run_by_value_and_compares_its_record_by_value(tmp_path):
    runs = str(tmp_path)
    values = finetune.run_values  # the command line's LR and SEED, as finetune.sh reads them
    assert finetune.run_dirs(runs, "RTE", *values("0.001", "01")) == (f"{runs}/RTE/lr1e-3_seed1",
                                                                      f"{runs}/.partial/RTE/lr1e-3_seed1")
    assert finetune.run_lock(runs, "RTE", *values("1e-3", "1")) == finetune.run_lock(runs, "RTE", *values("0.001", "1"))  # one lock
    finished(tmp_path / "RTE" / "lr1e-3_seed1", lr="1e-3", seed="1", EPOCHS="2")
    assert finetune.run_dirs(runs, "RTE", *values("0.001", "1"))[0] == f"{runs}/RTE/lr1e-3_seed1"
    result = str(tmp_path / "RTE" / "lr1e-3_seed1" / "result.json")
    assert finetune.other_inputs(result, {"lr": "0.001", "seed": "1", "EPOCHS": "2"}, "/c.pt") is None
    assert finetune.other_inputs(result, {"lr": "2e-3", "seed": "1", "EPOCHS": "2"}, "/c.pt") == "lr 1e-3 -> 2e-3"


def test_grid_counts_a_run_spelt_otherwise_as_done_and_refuses_two_spellings_of_one_lr(tmp_path, capsys):
    runs = tmp_path / "runs"
    finished(runs / "RTE" / "lr0.001_seed1")  # finetune.sh RTE 0.001 1, before
    env = {"RUNS": str(runs), "TASKS": "RTE", "LRS": "1e-3 5e-4", "SEEDS": "1", "GLUE_BIN": str(tmp_path)}
    assert main_sh(["--list"], env) == 0
    assert capsys.readouterr().out.splitlines() == ["0\tRTE\t1e-3\t1\tdone", "1\tRTE\t5e-4\t1\ttodo"]
    assert main_sh(["--list"], dict(env, LRS="1e-3 0.001")) == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("grid.sh: error: LRS='1e-3 0.001': 1e-3 and 0.001 are one LR "
                                                        "(1e-3), given twice; give each LR once")
    finished(runs / "RTE" / "lr1e-3_seed1")  # the same run twice: refused, not guessed
    assert main_sh(["--list"], env) == 2
    assert "lr0.001_seed1 and lr1e-3_seed1 name one run (lr1e-3_seed1 in its one spelling)" in capsys.readouterr().err


def test_collect_counts_a_seed_once_whatever_its_spelling(tmp_path, capsys):
    """lr0.001_seed1 and lr1e-3_seed2 are two seeds of one LR; lr1e-3_seed1 beside lr0.001_seed1 is one seed
    twice: a problem, neither counted (the old code counted both, 3 seeds from 2)."""
    rte = tmp_path / "runs" / "RTE"
    finished(rte / "lr0.001_seed1", 60.0)
    finished(rte / "lr1e-3_seed2", 70.0)
    problems = []
    assert sorted(r[:2] for r in collect.run_folders(str(rte), problems)) == [(0.001, 1), (0.001, 2)] and not problems
    finished(rte / "lr1e-3_seed1", 80.0)
    assert collect.run_folders(str(rte), problems) == [(0.001, 2, str(rte / "lr1e-3_seed2"))]
    assert problems == [f"{rte / 'lr0.001_seed1'} and {rte / 'lr1e-3_seed1'} are one run (LR 1e-3, seed 1) spelt "
                        "twice: neither counted; move all but one away"]
    assert collect.main([str(tmp_path / "runs"), "--expected-lrs", "1e-3", "--expected-seeds", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "| RTE | accuracy | 70.00 (1) |" in out and "are one run (LR 1e-3, seed 1) spelt twice" in out
    with pytest.raises(SystemExit):
        collect.main([str(tmp_path / "runs"), "--expected-lrs", "1e-3,0.001"])
    assert "--expected-lrs 1e-3,0.001: 1e-3 and 0.001 are one LR (1e-3), given twice" in capsys.readouterr().err


def test_the_study_finds_its_runs_by_value(tmp_path):
    env = {"PRESET": "cpu-small", "OUT": str(tmp_path / "study"), "TASKS": "RTE", "VARIANTS": "bert-a",
           "PRETRAIN_SEEDS": "1", "LRS": "5e-4 1e-3", "SEEDS": "1"}
    plan = Plan.from_environ(env, known={"bert-a": "BERT-A"})
    runs = tmp_path / "study" / "finetune" / "bert-a" / "seed1"
    finished(runs / "RTE" / "lr0.001_seed1")  # spelt otherwise by an earlier study
    assert plan.finetune_dir("bert-a", 1, "RTE", "1e-3", 1) == str(runs / "RTE" / "lr0.001_seed1")
    assert plan.finetune_dir("bert-a", 1, "RTE", "5e-4", 1) == str(runs / "RTE" / "lr5e-4_seed1")
    finished(runs / "RTE" / "lr1e-3_seed1")
    problems = []
    assert read_finetune_dir(str(runs), problems) == [] and "spelt twice" in problems[0]
    with pytest.raises(UsageError, match="LRS='5e-4 0.0005': 5e-4 and 0.0005 are one LR"):
        Plan.from_environ(dict(env, LRS="5e-4 0.0005"), known={"bert-a": "BERT-A"})
    (tmp_path / "study" / "sweep" / "bert-a" / "lr0.001").mkdir(parents=True)
    assert sweep_dir(str(tmp_path / "study"), "bert-a", 1e-3, 2).endswith("sweep/bert-a/lr0.001/seed2")


def test_check_once_compares_numbers_by_value_and_text_as_text():
    check_once("X", ["1e-3", "1e-4", "RTE", "rte"], "value")
    for values, says in ((["1e-3", "0.001"], "1e-3 and 0.001 are one LR (1e-3), given twice"),
                         ([1, 2, 1], "LR 1 is given twice"), (["RTE", "RTE"], "LR RTE is given twice")):
        with pytest.raises(UsageError, match=f"^X: {says.replace('(', '.').replace(')', '.')}; give each LR once$"):
            check_once("X", values, "LR")
