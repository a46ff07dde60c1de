"""Facts with one source: the files that cannot import it (YAML, .env presets, shell, docs) agree with it.

The sources: the paper's GLUE grid (``tupe_glue.tasks.PAPER_LRS``/``PAPER_SEEDS``), the pre-training recipe
(``tupe_pretrain.recipe``), the usage error (``tupe_common.errors.UsageError``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

import pytest

from conftest import ROOT
from tupe_glue.tasks import PAPER_LRS, PAPER_SEEDS, PAPER_TASKS
from tupe_pretrain.recipe import ELECTRA_CHANGES, MLM, recipe

PRESETS = ROOT / "tupe_study" / "presets"
PRETRAIN_YAML = ROOT / "tupe_pretrain" / "config" / "pretrain"


def env_file(path: Path) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def same(written, value: str) -> bool:
    """A value as a config file writes it (a number, a one-element list of fairseq's, a string) equals the
    recipe's ``value`` (as pretrain.sh writes it)."""
    if isinstance(written, (list, tuple)) or type(written).__name__ == "ListConfig":
        (written,) = list(written)
    try:
        return float(written) == float(value)
    except (TypeError, ValueError):
        return str(written) == value


# ---- the paper's GLUE grid ----------------------------------------------------------------------------------


def test_the_paper_grid_is_the_protocols_and_the_base_presets():
    protocol = (ROOT / "docs" / "glue_protocol.md").read_text()
    row = re.search(r"^\| learning rate \| grid \{([^}]*)\} \|$", protocol, re.M)
    assert row and [x.strip() for x in row.group(1).split(",")] == list(PAPER_LRS)
    base = env_file(PRESETS / "base.env")  # "the TUPE paper's setting"
    assert base["LRS"].split() == list(PAPER_LRS) and base["SEEDS"].split() == list(PAPER_SEEDS)


def test_grid_sh_defaults_to_the_one_grid(starts_process):
    """grid.sh's defaults come from tupe_glue.tasks (through tupe_glue.grid's table of its settings)."""
    help_text = starts_process(["bash", str(ROOT / "glue" / "grid.sh"), "--help"]).stdout
    assert re.search(r"^  LRS\s+" + re.escape(" ".join(PAPER_LRS)) + r"\s", help_text, re.M)
    assert re.search(r"^  SEEDS\s+" + re.escape(" ".join(PAPER_SEEDS)) + r"\s", help_text, re.M)
    assert f"auto: the paper's {' '.join(PAPER_TASKS)} and" in help_text


# ---- the pre-training recipe --------------------------------------------------------------------------------


@pytest.mark.parametrize("config,objective", [("tupe_base.yaml", "mlm"), ("electra_base.yaml", "electra")])
def test_the_hydra_configs_write_the_recipe(config, objective):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(PRETRAIN_YAML / config)
    settings = [s for s in recipe(objective).values() if s.yaml]
    wrong = {s.yaml: (OmegaConf.select(cfg, s.yaml), s.value) for s in settings
             if not same(OmegaConf.select(cfg, s.yaml), s.value)}
    assert not wrong, f"{config} differs from tupe_pretrain/recipe.py (key: (yaml, recipe)): {wrong}"


def test_the_base_preset_is_the_recipe():
    base = env_file(PRESETS / "base.env")
    settings = [s for s in MLM if s.study]
    assert {s.name for s in settings} == {"TOKENS_PER_SAMPLE", "SENTENCES_PER_UPDATE", "MAX_SENTENCES",
                                          "TOTAL_UPDATES", "WARMUP", "LR"}
    assert {s.name: base[s.name] for s in settings if not same(base[s.name], s.value)} == {}
    from tupe_study.settings import FIELDS

    (disc,) = [s for s in ELECTRA_CHANGES if s.study]
    assert FIELDS[disc.name].default == disc.value  # the study's default DISC_WEIGHT, a setting of every preset


def test_pretrain_sh_takes_every_default_from_the_recipe(starts_process):
    help_text = starts_process(["bash", str(ROOT / "train_scripts" / "pretrain.sh"), "--help"]).stdout
    defaults = dict(re.findall(r"^  (\w+)\s+(\S+)", help_text, re.M))
    mlm, electra = recipe("mlm"), recipe("electra")
    auto = {"LR", "TOTAL_UPDATES", "GENERATOR_SIZE_DIVISOR"}  # auto: by OBJECTIVE, both values in the help
    assert {n: defaults[n] for n in mlm if n not in auto} == {n: s.value for n, s in mlm.items() if n not in auto}
    assert defaults["DISC_WEIGHT"] == electra["DISC_WEIGHT"].value
    for name in ("LR", "TOTAL_UPDATES"):
        assert defaults[name] == "auto"
        assert f"(auto: {mlm[name].value}; electra {electra[name].value}," in help_text


# ---- the usage error ----------------------------------------------------------------------------------------


def test_one_usage_error_class_everywhere():
    from tupe_glue import tasks
    from tupe_preprocess import download_command, glue_download
    from tupe_study import plan, settings
    from tupe_common.errors import UsageError
    from tupe_tools import errors

    assert {id(m.UsageError) for m in (tasks, download_command, glue_download, plan, settings, errors)} == {id(UsageError)}
    assert issubclass(UsageError, ValueError)  # what tupe_tools.errors treats as the user's to fix
    with pytest.raises(UsageError, match="unknown task"):
        tasks.get_task("NoSuchTask")
    with pytest.raises(SystemExit) as usage:  # a download command's UsageError: argparse's exit 2
        glue_download.main(["--tasks", "NoSuchTask", "--out-dir", str(ROOT / "never-written")])
    assert usage.value.code == 2 and not (ROOT / "never-written").exists()


# ---- the GLUE task registry ---------------------------------------------------------------------------------


def test_one_glue_registry_for_the_download_and_the_binarizer():
    """tupe_preprocess.glue_download writes, and tupe_preprocess.glue_binarize reads, the layouts of tupe_glue.tasks (the
    round trip through both is tests/test_downloads.py); every column a split names is one of its fields."""
    from tupe_glue import tasks
    from tupe_preprocess import glue_binarize, glue_download

    assert glue_download.TASKS is tasks.TASKS and glue_binarize.TASKS is tasks.TASKS
    for task in tasks.TASKS.values():
        assert task.hub_config and len(task.hub_texts) == task.n_inputs, task.name
        assert task.regression == (task.classes is None), task.name  # a label spelling for every hub class id
        for split in task.splits:
            named = (*split.inputs, *split.label_copies, split.label or 1, split.unacceptable_mark or 1, split.index or 1)
            assert split.hub_split and all(1 <= c <= split.n_fields for c in named), (task.name, split.file)
            assert len(set(split.columns)) == split.n_fields, (task.name, split.file)
