"""Silent wrong results refused or fixed: a variant record of a newer plugin, left-padded input, and the
BERT-Ad position-position map of a checkpoint (against a plain per-head reference written here)."""
import pytest
import torch

from model_utils import LEFT_PADDING_REFUSED, PAD, build, left_padded, tokens
from tupe_plugin.analysis.checkpoint_maps import positional_logits
from tupe_plugin.checkpoint_info import info_from_state
from tupe_plugin.models import VARIANTS, PositionalVariant
from tupe_plugin.models.tupe_roberta import VARIANT_KEY
from tupe_plugin.positional.record import ATTENTION_BLOCKS, NewerRecordError


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


@pytest.mark.parametrize("variant", list(LEFT_PADDING_REFUSED))
def test_left_padding_follows_the_one_rule(variant):
    """Refused where token i gets position i (a shift would be silent); run where positions follow the tokens
    (fairseq's learned input PE numbers the tokens after the pads: BERT-A) or there are none (NoPE), and then the
    real tokens' features equal those of the sequence alone. tests/test_hf_export.py: the same cases."""
    model, x = build(f"{variant}_tiny"), tokens(3, 12)
    right = x.clone()
    right[0, 8:] = PAD  # right padding, and no padding at all, run
    model(right, features_only=True)
    model(x, features_only=True)
    if LEFT_PADDING_REFUSED[variant]:
        with pytest.raises(ValueError, match=r"left-padded input \(batch rows \[0\] have padding before real tokens\)"
                                             r".*pad on the right"):
            model(left_padded(x, 4), features_only=True)
        return
    with torch.no_grad():
        padded, _ = model(left_padded(x, 4), features_only=True)  # (B, T, C)
        alone, _ = model(x[:1, :8], features_only=True)
    torch.testing.assert_close(padded[0, 4:], alone[0], rtol=1e-5, atol=1e-5)


def test_bert_ad_checkpoint_map_is_the_scaled_position_position_term():
    """(LN(p_i) U^Q + b)(LN(p_j) U^K + b)^T / sqrt(4 d_head) per head, token i on table row i + 1."""
    model, T = build("bert_ad_tiny"), 10
    sd = model.state_dict()
    args = model.args
    info = {"encoder_embed_dim": args.encoder_embed_dim, "encoder_attention_heads": args.encoder_attention_heads,
            "max_positions": args.max_positions, "encoder_layers": args.encoder_layers}
    got = positional_logits(sd, info, T)
    pos = model.encoder.sentence_encoder.positions
    d, H = args.encoder_embed_dim, args.encoder_attention_heads
    dh = d // H
    with torch.no_grad():
        p = torch.nn.functional.layer_norm(pos.pos.weight[1: T + 1], (d,), pos.pos_ln.weight, pos.pos_ln.bias).double()
        q = p @ pos.pos_q_linear.weight.double().t() + pos.pos_q_linear.bias.double()
        k = p @ pos.pos_k_linear.weight.double().t() + pos.pos_k_linear.bias.double()
    for h in range(H):
        want = q[:, h * dh:(h + 1) * dh] @ k[:, h * dh:(h + 1) * dh].t() / (4 * dh) ** 0.5
        torch.testing.assert_close(torch.from_numpy(got[h]), want, rtol=1e-5, atol=1e-6)
