"""A variant record written by a newer plugin is refused, naming the upgrade: never read as a wrong model (an
encoding or an option this version does not know; in an old integer record, one field more or a choice the frozen
table does not have); flags that are not a variant are refused by what the encodings declare."""
import json

import pytest
import torch

from model_utils import build
from tupe_tools.checkpoint_record import info_from_state
from tupe_core import legacy_record
from tupe_core.registry import VARIANTS, from_flags, from_record
from tupe_core.facts import VARIANT_KEY
from tupe_core import registry
from tupe_core.record import NewerRecordError, PositionalVariant


def json_record(entries) -> torch.Tensor:
    return torch.tensor(list(json.dumps(entries).encode()), dtype=torch.uint8)


def old_record(name: str) -> torch.Tensor:
    """The integer record the plugin wrote for registered variant ``name`` before the JSON record."""
    values = {**{n: d for n, d, _ in legacy_record.FIELDS}, **legacy_record.VARIANT_FIELDS[name]}
    return torch.tensor([c.index(values[n]) if c else int(values[n]) for n, _, c in legacy_record.FIELDS])


def test_a_record_holds_its_encodings_and_their_options_as_json():
    record = VARIANTS["tupe_r"].to_tensor()
    assert record.dtype == torch.uint8 and json.loads(bytes(record.tolist())) == [
        {"encoding": "tupe", "untie_cls": True, "rel_pos": True, "rel_pos_bins": 32, "max_rel_pos": 128}]
    assert json.loads(bytes(VARIANTS["nope"].to_tensor().tolist())) == []
    for name, variant in VARIANTS.items():  # every registered variant, and its old integer record: itself
        assert from_record(variant.to_tensor()) == variant, name
        if name in legacy_record.VARIANT_FIELDS:  # registered before the JSON record (FIRE came after)
            assert from_record(old_record(name)) == variant, name
    assert set(legacy_record.VARIANT_FIELDS) < set(VARIANTS)


@pytest.mark.parametrize("entries, named", [
    ([{"encoding": "xpos", "scale_base": 512}], r"encoding 'xpos' is not registered in this process.*newer.*upgrade"),
    ([{"encoding": "rope", "rope_interleaved": True}], r"'rope' has options \['rope_interleaved'\].*newer.*upgrade"),
    ([{"encoding": "pam", "mode": "mixture"}], r"'pam': Pam's mode must be one of .*newer tupe_plugin"),
])
def test_an_encoding_or_option_of_a_newer_plugin_is_refused_naming_the_upgrade(entries, named):
    with pytest.raises(NewerRecordError, match=named):
        from_record(json_record(entries))


def test_a_longer_record_of_a_newer_plugin_is_refused_naming_the_upgrade():
    newer = torch.cat([old_record("tupe_r"), torch.tensor([0])])  # one field the frozen table lacks
    with pytest.raises(NewerRecordError, match=r"has 15 fields but this tupe_plugin knows 14.*newer.*upgrade"):
        from_record(newer)
    newer = json_record([{"encoding": "tupe", "untie_cls": True, "rel_pos": True, "rel_pos_bins": 32,
                          "max_rel_pos": 128, "rope_in_tupe": True}])
    model = build("tupe_r_tiny")
    state = model.state_dict()
    state[VARIANT_KEY] = newer
    with pytest.raises(NewerRecordError, match="upgrade tupe_plugin"):
        build("tupe_r_tiny").load_state_dict(state)
    with pytest.raises(NewerRecordError):  # tupe-checkpoint-info, tupe-pos-maps, tupe-export-hf read it so
        info_from_state({"model": state, "cfg": {"model": {"arch": "tupe_r_tiny"}}}, "ckpt.pt")


def test_a_choice_beyond_the_old_table_is_refused_not_wrapped():
    record = old_record("rope")
    record[legacy_record.NAMES.index("attention_block")] = 6
    with pytest.raises(NewerRecordError, match=r"--attention-block choice #6.*newer tupe_plugin"):
        from_record(record)
    record[legacy_record.NAMES.index("attention_block")] = -1  # no wrap to the last
    with pytest.raises(NewerRecordError):
        from_record(record)


@pytest.mark.parametrize("flags, named", [
    (dict(untie_cls=True, input_pe=True), "--untie-cls is a setting of --untied-pos (Tupe) or --rel-pos (T5Relative), "
                                          "not of this variant's LearnedAbsolute: drop it"),
    (dict(pos_mixed_terms=True, rel_pos=True), "--pos-mixed-terms is a setting of --untied-pos (BertAd), not of this "
                                               "variant's T5Relative: drop it"),
    (dict(untied_pos=True, pos_mixed_terms=True, untie_cls=True), "--untie-cls is a setting of --untied-pos (Tupe) or "
                                                                  "--rel-pos (T5Relative), not of this variant's BertAd"),
    (dict(input_pe=True, sinusoidal_pe=True), "--sinusoidal-pe cannot be combined with --input-pe (it is the only "
                                              "position signal of its variant)"),
    (dict(alibi=True, arch_encodings=("kerple",)), "--alibi cannot be combined with a registered encoding without "
                                                   "flags"),
    (dict(no_position=True, alibi=True), "the NoPE arch (nope_*) takes no positional flags"),
    (dict(), "this variant has no position information at all"),
])
def test_validate_refuses_by_the_encodings_declarations(flags, named):
    """The refusals of flags come from what the encodings declare (their options' flags, combines, selected_by), not
    from a list of flags: a setting no encoding of the variant reads, an only signal beside another, no signal."""
    import re

    with pytest.raises(ValueError, match=re.escape(named)):
        from_flags(flags)
    for variant in VARIANTS.values():  # every registered variant passes its own checks
        assert from_flags(registry.flag_values(variant)) == variant


def test_a_variant_is_checked_by_its_encodings_whatever_made_it():
    """The rules between encodings hold for a variant from a record too: at most one encoding at the input and one
    at the attention, and none beside an encoding that is its variant's only signal."""
    alibi, rope = VARIANTS["alibi"].encodings[0], VARIANTS["rope"].encodings[0]
    with pytest.raises(ValueError, match="Alibi is the only position signal of its variant: it cannot be combined "
                                         "with LearnedAbsolute"):
        registry.check(PositionalVariant((VARIANTS["bert_a"].encodings[0], alibi)))
    with pytest.raises(ValueError, match="at most one encoding at the input, then one at the attention"):
        registry.check(PositionalVariant((rope, alibi)))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_checkpoint_of_other_max_positions_is_refused_by_name_or_loads(name):
    """A checkpoint trained with --max-positions 64 into a model with 128: a variant with parameters per position or
    distance (each encoding says: PositionalEncoding.trained_positions) is refused before loading, naming the fix;
    every other variant loads it whole (no size mismatch left for load_state_dict to find)."""
    state = build(f"{name}_tiny", max_positions=64).state_dict()
    model = build(f"{name}_tiny", max_positions=128)
    sized = sorted(k for k, v in model.state_dict().items() if k in state and v.shape != state[k].shape)
    if sized:
        with pytest.raises(ValueError, match="trained with 64 positions but this model has 128; pass "
                                             "--max-positions 64"):
            model.upgrade_state_dict_named(state, "")
    else:
        model.upgrade_state_dict_named(state, "")
        model.load_state_dict(state)
