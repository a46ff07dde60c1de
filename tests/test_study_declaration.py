"""The study's declaration (``OUT/settings.env``) is its whole design, written before the first pre-training and
compared by meaning: the variants with their seeds, the confirmation and sweep seeds, the LR grid and rule, the
endpoints and the rest. A repeated question, seed, variant or LR is refused before any work, as is a sweep seed
that is also a confirmation seed; another spelling or order of the same declaration resumes; the first line says
when and at which commit it was declared. In-process, except one run of ``python -m study`` for the refusal's
last line (docs/study.md)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import tupe_study.__main__ as study_main
from tupe_study.__main__ import main
import tupe_study.plan as study_plan
from tupe_study.plan import check_settings
from tupe_study.plan import Plan
from tupe_study.settings import UsageError, changed_settings, merged_text, read, recorded_text
from study_logs import write_valid_log

ROOT = Path(__file__).resolve().parents[1]
KNOWN = {"bert-a": "BERT-A", "bert-r": "BERT-R", "tupe-r": "TUPE-R"}  # a registry, without importing the models
TUPE_QUESTION = "final_loss:tupe-r:bert-a loss_auc:tupe-r:bert-a"
DECLARED = re.compile(r"# declared \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ at commit abc1234\n")


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A study's settings (the declaration) and a fixed commit: in-process, check_settings starts no git process."""
    monkeypatch.setattr(study_main, "code_version", lambda: "abc1234")
    monkeypatch.setattr(study_plan, "code_version", lambda: "abc1234")  # check_settings's
    return {"PRESET": "cpu-small", "OUT": str(tmp_path / "study"), "TASKS": "none", "VARIANTS": "bert-a tupe-r",
            "PRETRAIN_SEEDS": "11 12 13", "LR_GRID": "1e-3 3e-4", "SWEEP_SEEDS": "1 2", "ENDPOINTS": TUPE_QUESTION,
            "EQUIVALENCE_BITS": "0.05"}


def declare(env, **changed) -> None:
    check_settings(Plan.from_environ(dict(env, **changed), known=KNOWN))


# ---- refused before any work --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, message", [
    # the old code accepted each of these (a family of 2; seeds trained twice; a variant silently merged; ...)
    ("ENDPOINTS", "final_loss:tupe-r:bert-a final_loss:bert-a:tupe-r",
     "ENDPOINTS entries 'final_loss:tupe-r:bert-a' and 'final_loss:bert-a:tupe-r' ask one question"),
    ("ENDPOINTS", "final_loss:tupe_r:bert-a loss_auc:tupe-r:bert-a final_loss:bert_a:tupe-r",
     "entries 'final_loss:tupe_r:bert-a' and 'final_loss:bert_a:tupe-r' ask one question"),
    ("PRETRAIN_SEEDS", "1 1 2", "PRETRAIN_SEEDS='1 1 2': seed 1 is given twice; give each seed once"),
    ("SWEEP_SEEDS", "1 2 1", "SWEEP_SEEDS='1 2 1': seed 1 is given twice"),
    ("VARIANTS", "bert-a:11,12 tupe-r:11,11,12", "VARIANTS entry 'tupe-r:11,11,12': seed 11 is given twice"),
    ("VARIANTS", "bert-a tupe-r bert-a", "VARIANTS entries 'bert-a' and 'bert-a' name bert-a twice"),
    ("VARIANTS", "bert-a tupe-r bert_a:11,12", "VARIANTS entries 'bert-a' and 'bert_a:11,12' name bert-a twice"),
    ("LR_GRID", "1e-3 3e-4 0.001", "LR_GRID='1e-3 3e-4 0.001': 1e-3 and 0.001 are one LR \\(1e-3\\), given twice"),
    ("LRS", "5e-4 0.0005", "LRS='5e-4 0.0005': 5e-4 and 0.0005 are one LR \\(5e-4\\), given twice"),  # one run folder
    ("SEEDS", "1 2 1", "SEEDS='1 2 1': seed 1 is given twice"),
    ("TASKS", "RTE MRPC RTE", "TASKS='RTE MRPC RTE': task RTE is given twice"),
    ("SWEEP_SEEDS", "1 12", "SWEEP_SEEDS='1 12' shares seed\\(s\\) 12 with the confirmation seeds"),
    ("VARIANTS", "bert-a tupe-r:2,11,12,13", "SWEEP_SEEDS='1 2' shares seed\\(s\\) 2 with the confirmation seeds"),
])
def test_a_repeated_or_shared_value_is_refused_in_one_line_before_any_work(env, name, value, message):
    with pytest.raises(UsageError, match=message) as refused:
        Plan.from_environ(dict(env, **{name: value}), known=KNOWN)
    assert "\n" not in str(refused.value)
    assert not os.path.exists(env["OUT"])  # nothing written
    Plan.from_environ(env, known=KNOWN)  # the declaration itself is fine


def test_the_sweep_and_confirmation_seeds_may_not_meet_even_through_pretrain_seeds_alone(env):
    """Every variant with its own seeds: PRETRAIN_SEEDS is still the declared confirmation seeds."""
    with pytest.raises(UsageError, match="shares seed\\(s\\) 1 2 with the confirmation"):
        Plan.from_environ(dict(env, VARIANTS="bert-a:11,12 tupe-r:11,12", PRETRAIN_SEEDS="1 2"), known=KNOWN)


# ---- recorded, and compared by meaning ----------------------------------------------------------------------


def test_the_whole_design_is_recorded_with_when_and_at_which_commit(env):
    declare(env)
    text = (Path(env["OUT"]) / "settings.env").read_text()
    assert DECLARED.fullmatch(text.splitlines(keepends=True)[0])
    for line in ("VARIANTS=bert-a tupe-r", "PRETRAIN_SEEDS=11 12 13", "LR_GRID=1e-3 3e-4", "SWEEP_SEEDS=1 2",
                 "LR_RULE=lowest-mean-final", f"ENDPOINTS={TUPE_QUESTION}", "EQUIVALENCE_BITS=0.05", "TOTAL_UPDATES=1200",
                 "VALID_POINTS=20", "VALID_STEPS=20"):
        assert f"\n{line}\n" in text
    declare(env)  # resumed: written once
    assert (Path(env["OUT"]) / "settings.env").read_text() == text


@pytest.mark.parametrize("name, value", [
    ("VARIANTS", "tupe-r bert-a"),  # report order: display only
    ("VARIANTS", "tupe_r,bert_a"),
    ("PRETRAIN_SEEDS", "13 11 12"),
    ("PRETRAIN_SEEDS", "11,12,13"),
    ("LR_GRID", "3e-4 0.001"),
    ("SWEEP_SEEDS", "2 1"),
    ("ENDPOINTS", "loss_auc:tupe_r:bert_a final_loss:tupe-r:bert-a"),
    ("EQUIVALENCE_BITS", "5e-2"),
])
def test_the_same_declaration_in_another_spelling_or_order_resumes(env, name, value):
    declare(env)
    text = (Path(env["OUT"]) / "settings.env").read_text()
    declare(env, **{name: value})
    assert (Path(env["OUT"]) / "settings.env").read_text() == text  # as declared, not rewritten


def test_own_seeds_in_another_order_are_the_same_variant():
    from tupe_study.settings import _same

    assert _same("VARIANTS", "bert-a:2,1 tupe_r", "tupe-r bert-a:1,2")
    assert not _same("VARIANTS", "bert-a:1,2 tupe-r", "bert-a:1,2,3 tupe-r")
    assert not _same("VARIANTS", "bert-a tupe-r", "bert-a:1 tupe-r")  # its own seeds, or PRETRAIN_SEEDS': refused


@pytest.mark.parametrize("name, value", [
    ("VARIANTS", "bert-a tupe-r bert-r"), ("VARIANTS", "bert-a tupe-r:11,12"), ("PRETRAIN_SEEDS", "11 12 13 14"),
    ("LR_GRID", "1e-3 3e-4 1e-4"), ("SWEEP_SEEDS", "1 2 3"),
    ("ENDPOINTS", "final_loss:bert-a:tupe-r loss_auc:tupe-r:bert-a"),  # turned round: the report's signs change
    ("TOTAL_UPDATES", "1300"), ("VALID_POINTS", "10"),
])
def test_another_design_is_refused_on_resume_naming_what_changed(env, capsys, name, value):
    declare(env)
    capsys.readouterr()
    with pytest.raises(UsageError, match=f"differs from this run's settings in {name} \\(the lines above") as refused:
        declare(env, **{name: value})
    assert "\n" not in str(refused.value)
    assert f"> {name}={value}\n" in capsys.readouterr().err


def test_comment_lines_are_ignored_on_comparison_and_kept_on_merge(env):
    """The declared-at line (and any note) is not a setting, even with a '=' in it; a merge (the first run with
    ELECTRA records its settings) keeps it first."""
    declare(env)
    path = Path(env["OUT"]) / "settings.env"
    text = path.read_text()
    noted = text + "# a note: TOTAL_UPDATES=5\n"
    now = recorded_text(read(env))
    assert changed_settings(noted, now) == [] and merged_text(noted, now) == noted
    path.write_text(noted)
    declare(env, OBJECTIVES="mlm electra", GENERATOR_SIZE_DIVISOR="4")
    merged = path.read_text()
    assert merged == noted + "GENERATOR_SIZE_DIVISOR=4\nDISC_WEIGHT=50\n"
    assert DECLARED.fullmatch(merged.splitlines(keepends=True)[0]) and merged.count("# declared") == 1


def test_a_study_recorded_before_the_design_was_resumes_without_it(env):
    """A settings.env written before VARIANTS and PRETRAIN_SEEDS were recorded (and before the declared-at line):
    those two are not compared (the study never declared them), nor added after the fact; the rest is, as before."""
    older = re.sub(r"(VARIANTS|PRETRAIN_SEEDS)=.*\n", "", recorded_text(read(env)))
    path = Path(env["OUT"]) / "settings.env"
    path.parent.mkdir(parents=True)
    path.write_text(older)
    declare(env, VARIANTS="bert-r tupe-r bert-a", PRETRAIN_SEEDS="21 22")
    assert path.read_text() == older
    with pytest.raises(UsageError, match="in TOTAL_UPDATES"):
        declare(env, TOTAL_UPDATES="1300")


# ---- the gpu study: a design sequential in its seeds ---------------------------------------------------------


def test_the_gpu_study_rewrites_its_seeds_line_and_compares_the_rest():
    from tupe_study import gpu_schedule

    first = "# declared 2026-12-06T00:00:00Z at commit abc1234\nPRESET=gpu-9min\nVARIANTS=bert-a tupe-r\n" \
            "PRETRAIN_SEEDS=1 2 3\nTOTAL_UPDATES=1200\n"
    second = gpu_schedule.seeds_recorded(first, "1 2 3 4 5 6")
    assert second == first.replace("PRETRAIN_SEEDS=1 2 3\n", gpu_schedule.SEQUENTIAL + "PRETRAIN_SEEDS=1 2 3 4 5 6\n")
    assert gpu_schedule.seeds_recorded(second, "1 2 3 4 5 6") == second  # the comment once
    assert gpu_schedule.seeds_recorded("PRESET=gpu-9min\n", "1 2") == "PRESET=gpu-9min\n"  # an older study: no line


# ---- --plan needs the pilot and the endpoints only ----------------------------------------------------------


@pytest.fixture
def pilot(tmp_path) -> Path:
    pilot = tmp_path / "pilot"
    for seed, (t, b) in {1: ((9.7, 8.2), (9.9, 9.0)), 2: ((9.6, 8.7), (9.5, 9.0)), 3: ((10.1, 7.9), (10.2, 9.0))}.items():
        write_valid_log(pilot, "tupe-r", seed, t)
        write_valid_log(pilot, "bert-a", seed, b)
    (pilot / "timings.tsv").write_text("".join(f"pretrain\tx {s}\t600\t2026-01-01T00:00:00Z\thost\n" for s in range(4)))
    return pilot


def test_plan_needs_only_the_endpoints(pilot, monkeypatch, capsys):
    """Only ENDPOINTS set (no TASKS, VARIANTS, PRETRAIN_SEEDS, OUT): the models are the endpoints', and the power is
    given per seed count; with seeds declared, with them."""
    for name in ("TASKS", "TASKS_DIR", "VARIANTS", "PRETRAIN_SEEDS", "OUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ENDPOINTS", "final_loss:tupe_r:bert-a")
    assert main(["--plan", str(pilot)]) == 0
    out = capsys.readouterr().out
    assert "No seeds declared (PRETRAIN_SEEDS and VARIANTS unset): the power is given per seed count" in out
    assert "| power with 3 / 6 / 10 seeds" in out
    assert re.search(r"final_loss: tupe-r - bert-a \| 3 \| -0.8000, -0.3000, -1.1000 \|.*\| 0\.\d\d / 0\.\d\d / "
                     r"\d\.\d\d$", out, re.M)
    assert "Pre-training: 2 model(s) at about 10.0 min per run" in out and "0.3 h of part time per seed" in out
    monkeypatch.setenv("PRETRAIN_SEEDS", "11 12 13 14 15 16")
    assert main(["--plan", str(pilot)]) == 0
    out = capsys.readouterr().out
    assert "| power with 6 seeds" in out and "2 model(s) x 6 seed(s)" in out and "No seeds declared" not in out
    monkeypatch.setenv("ENDPOINTS", "final_loss:tupe-r:bert-x")
    monkeypatch.delenv("PRETRAIN_SEEDS")
    assert main(["--plan", str(pilot)]) == 2
    assert "'bert-x' is not a registered variant" in capsys.readouterr().err
    monkeypatch.setenv("ENDPOINTS", "final_loss:tupe-r:bert-a final_loss:bert-a:tupe-r")
    assert main(["--plan", str(pilot)]) == 2 and "ask one question" in capsys.readouterr().err


# ---- through the command -----------------------------------------------------------------------------------


def test_the_command_refuses_another_design_with_one_error_line_last(tmp_path, starts_process):
    """python -m study: the first run (--slurm: records, trains nothing) declares, at this checkout's commit; a rerun
    with other seeds exits 2, the differing lines first and the error line last."""
    from conftest import run as run_cli

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PRESET="tiny", OUT=str(tmp_path / "study"), TASKS="none", VARIANTS="nope bert-a", C4_DIR=str(tmp_path),
               PRETRAIN_SEEDS="1 2", GPUS="0")

    def run(**changed):  # forked from the tests' warm interpreter (conftest.run)
        return run_cli([sys.executable, "-m", "tupe_study", "--slurm"], ROOT, check=False, timeout=300,
                       env=dict(env, **changed))

    first = run()
    assert first.returncode == 0, first.stderr[-2000:]
    line = (tmp_path / "study" / "settings.env").read_text().splitlines()[0]
    assert re.fullmatch(r"# declared \S+Z at commit ([0-9a-f]{7,}(-dirty)?|unknown)", line)
    assert run(PRETRAIN_SEEDS="2,1", VARIANTS="bert-a nope").returncode == 0  # the same design
    changed = run(PRETRAIN_SEEDS="1 2 3")
    lines = changed.stderr.strip().splitlines()
    assert changed.returncode == 2 and lines[-2:] == ["> PRETRAIN_SEEDS=1 2 3", lines[-1]]
    assert lines[-1].startswith("study.sh: error: ") and "differs from this run's settings in PRETRAIN_SEEDS" in lines[-1]
