"""Left-padded input: every variant takes it, by its encodings' declarations (``left_padding``): a term of j - i only
as it is, a term of positions with each token's position (``position_ids``); an encoding that declares it cannot is
refused by the variant's name. tests/test_hf_export.py checks the same cases on the export."""
import pytest
import torch

from model_utils import LEFT_PADDED, PAD, build, left_padded, tokens
from tupe_core.base import POSITIONS, REFUSED, at_positions, token_positions
from tupe_core.tupe import Tupe


@pytest.mark.parametrize("variant", LEFT_PADDED)
def test_left_padding_gives_the_features_of_the_sequence_alone(variant):
    """Right padding and no padding run; a left-padded row's real tokens get the features of the sequence alone:
    positions that follow the tokens (fairseq's learned input PE numbers the tokens after the pads: BERT-A), terms
    of j - i only, or terms of each token's position, passed in (TUPE, BERT-Ad, sinusoids, the fixed prior).
    Measured with positions not passed (the rule before): 9e-4 to 1.8 for those; with them: at most 2.4e-7."""
    model, x = build(f"{variant}_tiny"), tokens(3, 12)
    right = x.clone()
    right[0, 8:] = PAD  # right padding, and no padding at all, run
    model(right, features_only=True)
    model(x, features_only=True)
    with torch.no_grad():
        padded, _ = model(left_padded(x, 4), features_only=True)  # (B, T, C)
        alone, _ = model(x[:1, :8], features_only=True)
    torch.testing.assert_close(padded[0, 4:], alone[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", LEFT_PADDED)
def test_left_padding_gives_the_gradient_of_the_sequence_alone(variant):
    """The terms of positions read at each token's position are differentiable: the positional parameters get,
    from a left-padded row's real tokens, the gradient they get from the sequence alone (the gather's backward
    adds into the shared term)."""
    model, x = build(f"{variant}_tiny"), tokens(1, 12)
    params = dict(model.encoder.sentence_encoder.positions.named_parameters())

    def gradients(row, real):
        model.zero_grad()
        features, _ = model(row, features_only=True)
        features[0, real].pow(2).sum().backward()
        return {name: p.grad.clone() for name, p in params.items() if p.grad is not None}

    padded, alone = gradients(left_padded(x, 4), slice(4, 12)), gradients(x[:, :8], slice(0, 8))
    assert padded.keys() == alone.keys()
    for name in padded:
        torch.testing.assert_close(padded[name], alone[name], rtol=1e-5, atol=1e-6)


def test_a_relative_bias_with_the_cls_untie_reads_positions():
    """T5's relative bias alone takes left padding as it is (a term of j - i only), but with --untie-cls its [CLS]
    row and column are position 0's: the same bias class answers by its options, and with each token's position
    the left-padded row equals the sequence alone (4.8e-4 without them)."""
    x = tokens(3, 12)
    model = build("t5_rel_tiny", untie_cls=True)
    assert model.encoder.sentence_encoder.left_padding == POSITIONS
    with torch.no_grad():
        padded, _ = model(left_padded(x, 4), features_only=True)
        alone, _ = model(x[:1, :8], features_only=True)
    torch.testing.assert_close(padded[0, 4:], alone[0], rtol=1e-5, atol=1e-5)
    assert build("t5_rel_tiny").encoder.sentence_encoder.left_padding != POSITIONS  # without the untie: as it is


def test_an_encoding_that_declares_it_refuses_left_padding_by_name(monkeypatch):
    """The refusal is a declaration: an encoding whose math cannot take left padding says REFUSED and the encoder
    refuses such a batch, naming the variant, before any work; right padding still runs."""
    monkeypatch.setattr(Tupe, "left_padding", REFUSED)
    model, x = build("tupe_r_tiny"), tokens(3, 12)
    right = x.clone()
    right[0, 8:] = PAD
    model(right, features_only=True)
    with pytest.raises(ValueError, match=r"left-padded input \(batch rows \[0\] have padding before real tokens\): "
                                         r"positional variant 'tupe_r' .*pad on the right"):
        model(left_padded(x, 4), features_only=True)


def test_positions_count_real_tokens_and_a_right_padded_batch_gets_none():
    pad = torch.tensor([[True, True, False, False, False], [False, False, False, True, True]])
    assert token_positions(pad).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 2, 2]]
    bias = torch.arange(2 * 5 * 5, dtype=torch.float64).view(2, 5, 5)
    got = at_positions(bias, token_positions(pad))  # (B, H, T, T)
    assert got.shape == (2, 2, 5, 5) and torch.equal(got[0, :, 2:, 2:], bias[:, :3, :3])
    assert torch.equal(got[1, :, :3, :3], bias[:, :3, :3])
    model = build("tupe_r_tiny")
    enc = model.encoder.sentence_encoder
    right = tokens(2, 6)
    right[0, 4:] = PAD
    assert enc.has_padding(right.eq(PAD)) == (True, None)  # no positions: the forward without them, as before
    assert enc.has_padding(tokens(2, 6).eq(PAD)) == (False, None)
