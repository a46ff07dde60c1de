"""Left-padded input: refused where token i gets position i (a shift would be silent), run where positions follow
the tokens; tests/test_hf_export.py checks the same cases on the export."""
import pytest
import torch

from model_utils import LEFT_PADDING_REFUSED, PAD, build, left_padded, tokens


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


def test_a_relative_bias_with_the_cls_untie_refuses_left_padding():
    """T5's relative bias alone takes left padding (a term of j - i only), but with --untie-cls its [CLS] row and
    column are position 0's, which left padding moves: the same bias class answers by its options."""
    x = tokens(3, 12)
    model = build("t5_rel_tiny", untie_cls=True)
    model(x, features_only=True)
    with pytest.raises(ValueError, match=r"left-padded input .*pad on the right"):
        model(left_padded(x, 4), features_only=True)
    build("t5_rel_tiny")(left_padded(x, 4), features_only=True)  # without the untie: runs
