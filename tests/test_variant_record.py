"""A variant record written by a newer plugin is refused, naming the upgrade: never read as a wrong model (one
field more, or a choice this version does not know); a record that is not a variant is refused by what the
encodings declare (validate)."""
import pytest
import torch

from model_utils import build
from tupe_plugin.checkpoint_info import info_from_state
from tupe_core.record import PositionalVariant
from tupe_core.registry import VARIANTS
from tupe_core.facts import VARIANT_KEY
from tupe_core.record import ATTENTION_BLOCKS, NewerRecordError


def test_a_longer_record_of_a_newer_plugin_is_refused_naming_the_upgrade():
    newer = torch.cat([VARIANTS["tupe_r"].to_tensor(), torch.tensor([0])])  # one field this version lacks
    with pytest.raises(NewerRecordError, match=r"has 15 fields but this tupe_plugin knows 14.*newer.*upgrade"):
        PositionalVariant.from_tensor(newer)
    model = build("tupe_r_tiny")
    state = model.state_dict()
    state[VARIANT_KEY] = newer
    with pytest.raises(NewerRecordError, match="upgrade tupe_plugin"):
        build("tupe_r_tiny").load_state_dict(state)
    with pytest.raises(NewerRecordError):  # tupe-checkpoint-info, tupe-pos-maps, tupe-export-hf read it so
        info_from_state({"model": state, "cfg": {"model": {"arch": "tupe_r_tiny"}}}, "ckpt.pt")


def test_a_choice_appended_by_a_newer_plugin_is_refused_not_wrapped():
    record = VARIANTS["rope"].to_tensor()
    record[list(PositionalVariant.__dataclass_fields__).index("attention_block")] = len(ATTENTION_BLOCKS)
    with pytest.raises(NewerRecordError, match=r"--attention-block choice #6.*newer tupe_plugin"):
        PositionalVariant.from_tensor(record)
    record[list(PositionalVariant.__dataclass_fields__).index("attention_block")] = -1  # no wrap to the last
    with pytest.raises(NewerRecordError):
        PositionalVariant.from_tensor(record)


@pytest.mark.parametrize("flags, named", [
    (dict(untie_cls=True, input_pe=True), "--untie-cls is a setting of --untied-pos (Tupe) or --rel-pos (T5Relative), "
                                          "not of this variant's LearnedAbsolute: drop it"),
    (dict(pos_mixed_terms=True, rel_pos=True), "--pos-mixed-terms is a setting of --untied-pos (BertAd), not of this "
                                               "variant's T5Relative: drop it"),
    (dict(untied_pos=True, pos_mixed_terms=True, untie_cls=True), "--untie-cls is a setting of --untied-pos (Tupe) or "
                                                                  "--rel-pos (T5Relative), not of this variant's BertAd"),
    (dict(input_pe=True, sinusoidal_pe=True), "--sinusoidal-pe cannot be combined with --input-pe (it is the only "
                                              "position signal of its variant)"),
    (dict(alibi=True, encoding_id=VARIANTS["kerple"].encoding_id), "--alibi cannot be combined with a registered "
                                                                   "encoding without flags"),
    (dict(no_position=True, alibi=True), "the NoPE arch (nope_*) takes no positional flags"),
    (dict(), "this variant has no position information at all"),
])
def test_validate_refuses_by_the_encodings_declarations(flags, named):
    """validate's refusals come from what the encodings declare (reads, combines, switches), not from a list of
    flags in record.py: a setting no encoding of the variant reads, an only signal beside another, no signal."""
    import re

    with pytest.raises(ValueError, match=re.escape(named)):
        PositionalVariant(**flags).validate()
    for variant in VARIANTS.values():  # every registered variant passes its own checks
        variant.validate()
