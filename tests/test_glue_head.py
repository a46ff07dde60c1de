"""The sentence classification head: the TUPE release's by default, RoBERTa's on request (docs/glue_protocol.md §6)."""
import torch
from fairseq import options

from model_utils import build, tokens
from tupe_plugin.modules.classification_head import ReleaseClassificationHead


def head_reference(x0: torch.Tensor, head, dropout_before_dense: bool) -> torch.Tensor:
    """The head written out: [dropout ->] dense -> tanh -> dropout -> out_proj, float64, same dropout draws."""
    p = head.dropout.p
    x = x0.double()
    if dropout_before_dense:
        x = torch.nn.functional.dropout(x.float(), p, training=True).double()
    x = torch.tanh(x @ head.dense.weight.double().T + head.dense.bias.double())
    x = torch.nn.functional.dropout(x.float(), p, training=True).double()
    return x @ head.out_proj.weight.double().T + head.out_proj.bias.double()


def head_outputs(style: str):
    model = build("tupe_r_tiny", pooler_dropout=0.3, **({"classification_head_style": style} if style else {}))
    model.register_classification_head("sentence_classification_head", num_classes=3)
    head = model.classification_heads["sentence_classification_head"]
    features, _ = model(tokens(4, 12), features_only=True)  # (B, T, d), eval mode
    head.train()
    torch.manual_seed(11)
    out = head(features)
    torch.manual_seed(11)
    ref = head_reference(features[:, 0, :], head, dropout_before_dense=style == "roberta")
    head.eval()
    return head, out, ref, head(features)


def test_release_head_is_the_default_and_matches_its_reference():
    head, out, ref, _ = head_outputs(style=None)  # args without the option: the release's head
    assert type(head) is ReleaseClassificationHead
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
    _, out_roberta, _, _ = head_outputs(style="roberta")
    assert not torch.allclose(out, out_roberta, atol=1e-3)  # the dropout before dense changes training outputs


def test_roberta_head_on_request_and_both_equal_in_eval():
    head, out, ref, eval_roberta = head_outputs(style="roberta")
    assert type(head) is not ReleaseClassificationHead
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
    _, _, _, eval_release = head_outputs(style="release")
    torch.testing.assert_close(eval_roberta, eval_release)  # same parameters, no dropout at eval


def test_head_style_is_a_model_argument_with_the_release_default():
    parser = options.get_training_parser()
    base = ["data", "--user-dir", "tupe_plugin", "--task", "sentence_prediction", "--arch", "tupe_r_tiny"]
    assert options.parse_args_and_arch(parser, input_args=base).classification_head_style == "release"
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=base + ["--classification-head-style", "roberta"])
    assert args.classification_head_style == "roberta"
