"""docs/extending.md holds: a positional encoding defined and registered outside tupe_plugin (tests/data/toy_pe: one
file, one registry line) gets its archs, its checkpoint record, the refusal to load as another variant, the
analysis map and a real fairseq-train run, with nothing else changed."""
from __future__ import annotations

import sys

import pytest
import torch

from conftest import PRETRAIN_ARGS, ROOT, run, train_losses
from model_utils import build, tokens

from tupe_plugin.models import VariantMismatchError
from tupe_core.facts import VARIANT_KEY
from tupe_core.registry import VARIANTS
from tupe_core import legacy_record, registry
from tupe_core.registry import encodings, from_record

TOY = "toy_linear_bias"


@pytest.fixture(scope="module", autouse=True)
def toy_pe():
    """The toy registered as --user-dir tests/data/toy_pe registers it, for this module's tests only: the other
    modules of this process loop over the registry and must not meet it (fairseq's archs of it stay, unused)."""
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    try:
        import toy_pe

        yield toy_pe
    finally:
        sys.path.remove(str(ROOT / "tests" / "data"))
        VARIANTS.pop(TOY, None)
        registry.ABOUT.pop(TOY, None)
        registry.ENCODINGS.pop("toy_linear_distance", None)


def test_the_toy_is_registered_with_its_archs_and_record(toy_pe):
    from fairseq.models import ARCH_MODEL_REGISTRY

    variant = VARIANTS[TOY]
    assert variant.names() == ("toy_linear_distance",) and variant.name == TOY
    assert encodings(variant)[1] is toy_pe.LinearDistanceBias
    assert from_record(variant.to_tensor()) == variant
    # its checkpoints written before the JSON record: an integer record naming it by a checksum of the variant's name
    old = torch.tensor([0, 0, 0, 0, 0, 32, 128, 0, 0, 0, 0, 0, 1, legacy_record.encoding_id(TOY)])
    assert from_record(old) == variant
    assert {f"{TOY}_{size}" for size in ("base", "large", "tiny")} <= set(ARCH_MODEL_REGISTRY)


def test_the_toy_bias_reaches_every_layer_and_loads_only_as_itself():
    model = build(f"{TOY}_tiny", max_positions=16, seed=1)
    enc = model.encoder.sentence_encoder
    with torch.no_grad():
        enc.positions.slope.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    bias = enc.positions(6).bias
    for h, s in enumerate([0.1, 0.2, 0.3, 0.4]):
        want = torch.tensor([[-s * abs(j - i) for j in range(6)] for i in range(6)])
        torch.testing.assert_close(bias[h], want)
    x = tokens(2, 6)
    other = build(f"{TOY}_tiny", max_positions=16, seed=2)  # other weights and the initial slopes 0.5
    with torch.no_grad():
        assert not torch.allclose(other(x)[0], model(x)[0], atol=1e-3)  # so equal outputs below come from the load
    other.load_state_dict(model.state_dict())  # its own record: loads
    torch.testing.assert_close(other.encoder.sentence_encoder.positions.slope, torch.tensor([0.1, 0.2, 0.3, 0.4]))
    with torch.no_grad():
        torch.testing.assert_close(other(x)[0], model(x)[0])
    with pytest.raises(VariantMismatchError, match=f"'{TOY}'.*--arch {TOY}_base") as err:
        build("alibi_tiny", max_positions=16).load_state_dict(model.state_dict(), strict=False)
    assert "flags" not in str(err.value)  # no flag combination reaches it: the hint names its arch only


def test_the_toy_declares_its_option_its_flag_and_its_check():
    """One option in the toy's module (docs/extending.md): its flag, its check, its place in the record, and a
    checkpoint of another value refused as another variant."""
    assert registry.flags()["toy_initial_slope"].default == 0.5
    model = build(f"{TOY}_tiny", max_positions=16, toy_initial_slope=0.25)
    variant = model.positional_variant
    assert variant.name == "custom" and variant.options("toy_linear_distance").toy_initial_slope == 0.25
    assert variant.entries() == [{"encoding": "toy_linear_distance", "toy_initial_slope": 0.25}]
    torch.testing.assert_close(model.encoder.sentence_encoder.positions.slope, torch.full((4,), 0.25))
    with pytest.raises(VariantMismatchError, match="'custom'"):
        build(f"{TOY}_tiny", max_positions=16).load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="--toy-initial-slope must be positive, got -1"):
        build(f"{TOY}_tiny", toy_initial_slope=-1.0)


def test_fairseq_train_trains_the_toy_from_its_user_dir(lm_bin, tmp_path, starts_process):
    args = [a if a != "tupe_plugin" else str(ROOT / "tests" / "data" / "toy_pe") for a in PRETRAIN_ARGS]
    p = run(["fairseq-train", str(lm_bin), *args, "--arch", f"{TOY}_tiny", "--max-update", "20",
             "--toy-initial-slope", "0.25", "--save-dir", str(tmp_path / "ckpt")])
    losses = train_losses(p.stdout + p.stderr)
    assert len(losses) >= 3 and losses[-1] < losses[0]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    record = state["model"][VARIANT_KEY]
    assert from_record(record).entries() == [{"encoding": "toy_linear_distance", "toy_initial_slope": 0.25}]
    slope = state["model"]["encoder.sentence_encoder.positions.slope"]
    assert not torch.allclose(slope, torch.full_like(slope, 0.25))  # trained: the bias has its gradient


def test_the_export_refuses_an_encoding_it_cannot_ship(tmp_path):
    pytest.importorskip("transformers")
    from tupe_tools.hf.export import ExportError, export

    model = build(f"{TOY}_tiny", max_positions=16)
    torch.save({"args": model.args, "model": model.state_dict()}, tmp_path / "toy.pt")
    with pytest.raises(ExportError, match="LinearDistanceBias is defined outside tupe_core.*move its module"):
        export(str(tmp_path / "toy.pt"), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()
