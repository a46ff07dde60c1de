"""The study's MODEL_ARGS is parsed once, where the settings are read, into a ``tupe_core.facts.ModelArgs``: the
plan and the stages carry the object, settings.env records the text as written (as before), and the fairseq words
are built from the object where a command is built. A malformed one is refused when the settings are read."""
from __future__ import annotations

import dataclasses
import os

import pytest

from tupe_common.errors import UsageError
from tupe_core.facts import SIZES, ModelArgs, ModelSize
from tupe_study.settings import PRESETS_DIR, StudyConfig, changed_settings, read, read_preset, recorded_text

PRESETS = sorted(f[:-4] for f in os.listdir(PRESETS_DIR) if f.endswith(".env"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_presets_model_args_is_an_object_whose_fairseq_words_are_the_text_as_written(preset):
    text = read_preset(os.path.join(PRESETS_DIR, f"{preset}.env"))["MODEL_ARGS"]
    config = read({"PRESET": preset})
    assert isinstance(config.MODEL_ARGS, ModelArgs)
    assert config.MODEL_ARGS.fairseq_args() == text.split()  # what the stages passed before: f"{MODEL_ARGS} ..."
    assert config.text("MODEL_ARGS") == text and f"\nMODEL_ARGS={text}\n" in recorded_text(config)
    assert changed_settings(recorded_text(config), recorded_text(config)) == []


def test_the_size_is_the_archs_with_the_size_flags_over_it_and_other_flags_pass_on():
    config = read({"PRESET": "gpu-9min"})
    assert config.MODEL_ARGS.over(SIZES[config.SIZE]) == ModelSize(layers=4, embed_dim=512, heads=8, ffn_dim=2048)
    assert config.MODEL_ARGS.rest == ("--tupe-attention", "sdpa")
    spelt = ModelArgs.parse("--tupe-attention sdpa --encoder-layers=4 --encoder-normalize-before")
    assert spelt.fairseq_args() == ["--encoder-layers", "4", "--tupe-attention", "sdpa", "--encoder-normalize-before"]
    assert spelt.over(SIZES["tiny"]) == ModelSize(layers=4, embed_dim=64, heads=4, ffn_dim=128)


@pytest.mark.parametrize("text", ["none", ""])
def test_no_model_args_is_the_archs_size_recorded_as_the_empty_text_as_before(text):
    config = read({"PRESET": "cpu-small", "MODEL_ARGS": text} if text else {"PRESET": "tiny"})
    assert config.MODEL_ARGS == ModelArgs() and config.MODEL_ARGS.fairseq_args() == []
    assert "\nMODEL_ARGS=\n" in recorded_text(config)  # before: Plan.from_environ made none the empty text


@pytest.mark.parametrize("text,said", [
    ("--encoder-layers four", "--encoder-layers takes a positive whole number, not 'four'"),
    ("--encoder-layers 0", "--encoder-layers takes a positive whole number, not '0'"),
    ("--encoder-layers", "--encoder-layers has no value (a positive whole number)"),
    ("--encoder-layers --tupe-attention sdpa", "--encoder-layers has no value (a positive whole number)"),
    ("--encoder-layers 4 --encoder-layers 6", "--encoder-layers is given twice"),
    ("--encoder-layers 4 5", "'5' is not a flag (a size flag takes one value)"),
    ("encoder-layers 4", "'encoder-layers' is not a flag"),
    ("--encoder-layer 4", "--encoder-layer is not fairseq's name of a size: did you mean --encoder-layers?"),
    ("--encoder_embed_dim 128", "--encoder_embed_dim is not fairseq's name of a size: did you mean --encoder-embed-dim?"),
    ("--encoder-ffn-embed 512", "--encoder-ffn-embed is not fairseq's name of a size: did you mean "
                                "--encoder-ffn-embed-dim?"),
])
def test_a_malformed_model_args_is_refused_when_the_settings_are_read_naming_the_setting(text, said):
    """Before, the text went on to fairseq-train as it was: refused there, after the data was prepared (or, for
    a misspelt size, trained at the arch's size while the study's generator check read another)."""
    with pytest.raises(UsageError) as e:
        read({"PRESET": "cpu-small", "MODEL_ARGS": text})
    assert str(e.value).startswith(f"MODEL_ARGS='{text}': {said}")


def test_a_replaced_config_keeps_the_object_and_refuses_what_is_not_one():
    config = read({"PRESET": "cpu-small"})
    assert dataclasses.replace(config, LR="1e-3").MODEL_ARGS is config.MODEL_ARGS  # not re-read through its text
    other = ModelArgs.parse("--encoder-layers 2")
    assert dataclasses.replace(config, MODEL_ARGS=other).MODEL_ARGS is other
    with pytest.raises(UsageError, match="^MODEL_ARGS must be ModelArgs or its text, not 2$"):
        dataclasses.replace(config, MODEL_ARGS=2)
    assert StudyConfig.tunables()[[t.name for t in StudyConfig.tunables()].index("MODEL_ARGS")].kind == ""


def test_a_settings_env_written_before_compares_and_renders_byte_for_byte():
    """The archives of docs/results: their settings.env's MODEL_ARGS line is what this code records."""
    from tupe_study.settings import _lines

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "results")
    checked = 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "settings.env")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            recorded = _lines(f.read())
        if "MODEL_ARGS" not in recorded:
            continue
        config = read({"PRESET": "cpu-small", "MODEL_ARGS": recorded["MODEL_ARGS"] or "none"})
        assert config.text("MODEL_ARGS") == recorded["MODEL_ARGS"]
        diff = changed_settings(f"MODEL_ARGS={recorded['MODEL_ARGS']}\n", recorded_text(config))
        assert [line for line in diff if "MODEL_ARGS" in line] == []
        checked += 1
    assert checked >= 5


def test_the_pretraining_stage_passes_the_objects_fairseq_words(tmp_path, monkeypatch):
    from tupe_pretrain import pretrain
    from tupe_study.plan import Plan
    from tupe_study import stages
    from tupe_study.stages import PartFailed, pretrain_into

    plan = Plan.from_environ({"OUT": str(tmp_path / "s"), "PRESET": "tiny", "TASKS": "none", "VARIANTS": "bert-a",
                              "MODEL_ARGS": "--encoder-layers 3 --tupe-attention sdpa"}, known={"bert-a": "BERT-A"})
    seen = []

    def refuse(config, environ, say=None):
        seen.append(config)
        raise UsageError("stop here")

    monkeypatch.setattr(pretrain, "prepare", refuse)
    monkeypatch.setattr(stages, "prep_done", lambda plan: True)
    with pytest.raises(PartFailed):
        pretrain_into(plan, "bert-a", 1, str(tmp_path / "run"), plan.config.LR)
    words = seen[0].EXTRA_ARGS.split()
    assert words[:4] == ["--encoder-layers", "3", "--tupe-attention", "sdpa"] and "--validate-interval-updates" in words
