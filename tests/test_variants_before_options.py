"""Every registered variant builds, records, exports, runs and trains as it did when
``tests/data/variants_before_options.pt`` was written (``tests/make_variant_fixtures.py``): the guard of the
refactor that gives each encoding its own options. Exact: the refactor changes no number. The record itself changed
(JSON of (encoding, options) where an integer tensor of flags was, and the HF config's ``positional_encodings``
where one key per flag was): the old record and the old config decode to the same variant, and an old state loads
strictly with its old record.

Exact up to the CPU's float32 round-off: the fixture was written on an Intel Xeon; on an AMD EPYC the same code gives
parameters, features and losses that differ by at most 7e-7 (other vector kernels, another order of the sums), so
floats are compared within ``ROUND_OFF`` (a change of the math moves them by orders of magnitude more) and everything
else exactly."""
from __future__ import annotations

import pytest
import torch

from conftest import ROOT
from make_variant_fixtures import padded_batch, training_losses
from model_utils import build
from tupe_core.facts import VARIANT_KEY
from tupe_core.registry import VARIANTS, from_config, from_record

FIXTURE = ROOT / "tests" / "data" / "variants_before_options.pt"
ROUND_OFF = dict(rtol=1e-5, atol=2e-6)  # float32 round-off of another CPU's kernels (docstring)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, floats up to ``ROUND_OFF``."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, **ROUND_OFF)


@pytest.fixture(scope="module")
def before():
    return torch.load(FIXTURE, map_location="cpu", weights_only=False)


def variants():
    return list(torch.load(FIXTURE, map_location="cpu", weights_only=False)["variants"])


# registered after the fixture was written, with their options from the start: nothing of theirs to guard
REGISTERED_AFTER = ["fire"]


def test_the_fixture_holds_every_registered_variant(before):
    from tupe_core.registry import VARIANTS

    assert list(before["variants"]) + REGISTERED_AFTER == list(VARIANTS) and len(before["variants"]) == 18


@pytest.mark.parametrize("name", variants())
def test_a_variant_builds_the_same_parameters_runs_and_trains_the_same(name, before):
    old = before["variants"][name]
    model = build(f"{name}_tiny", max_positions=before["max_positions"], seed=0, **before["sizes"])
    state = model.state_dict()
    assert list(state) == list(old["state"])  # the same names, in the same order
    for key, value in old["state"].items():
        if key != VARIANT_KEY:  # the record: compared by what it decodes to, below
            assert same(state[key], value), key
    variant = model.positional_variant
    assert variant == VARIANTS[name] and variant.name == name
    assert from_record(state[VARIANT_KEY]) == from_record(old["record"]) == variant  # the old record: the same variant
    assert from_config(old["hf_config"], name) == from_config(old["hf_config"]) == variant  # the old HF config too
    assert torch.equal(before["tokens"], padded_batch())
    with torch.no_grad():
        features, _ = model(before["tokens"], features_only=True)
    assert same(features, old["features"])
    assert training_losses(model) == pytest.approx(old["losses"], rel=ROUND_OFF["rtol"], abs=ROUND_OFF["atol"])


def test_an_old_hf_config_loads_as_its_variant(before):
    """An export written before (one config key per field of the old record) gives the same variant, and the config
    it writes now holds the record's entries."""
    pytest.importorskip("transformers")
    from tupe_tools.hf.remote.configuration_tupe import TupeConfig

    for name, old in before["variants"].items():
        config = TupeConfig(tupe_variant=name, **old["hf_config"])
        assert config.positional_variant == VARIANTS[name], name
        assert config.to_dict()["positional_encodings"] == VARIANTS[name].entries()
        assert not set(old["hf_config"]) & set(config.to_dict())


@pytest.mark.parametrize("name", ["tupe_r", "deberta_rel", "pam_window", "kerple"])
def test_a_checkpoint_written_before_loads_strictly_with_the_same_features(name, before):
    """A model of another seed takes the old state strictly and gives its features: the record and every
    parameter name are read as written."""
    old = before["variants"][name]
    model = build(f"{name}_tiny", max_positions=before["max_positions"], seed=1, **before["sizes"])
    model.load_state_dict(old["state"])
    assert model.positional_variant.name == name
    with torch.no_grad():
        features, _ = model(before["tokens"], features_only=True)
    assert same(features, old["features"])
