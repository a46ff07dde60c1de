"""Code that restates fairseq's (fairseq 0.12.3) cannot drift from it unnoticed.

``tupe_core/encoder_stack.py`` restates fairseq's layer forward, layer loop and activations for the fairseq
model and the exported one alike, ``tupe_core/learned_absolute.py`` its learned positions, and the exported
model (``tupe_tools/hf/remote/modeling_tupe.py``, which cannot import fairseq) the embedding and the RoBERTa
heads. Two checks:
the source of each fairseq original against the hash of the version restated (a new fairseq fails here,
naming what to review), and the restated forwards against fairseq's own on the same weights and input.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect

import pytest
import torch
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from model_utils import build, tokens
from tupe_core.facts import RECORD_BUFFER
from tupe_core.masks import attention_mask
from tupe_core.base import PositionalTerm

# fairseq object -> (sha256 prefix of its source in fairseq 0.12.3, where it is restated)
RESTATED = {
    "fairseq.modules.transformer_layer:TransformerEncoderLayerBase.forward":
        ("e2def0f25e8b4141", "tupe_core/encoder_stack.py layer_forward (the fairseq and the exported layer)"),
    "fairseq.models.transformer.transformer_encoder:TransformerEncoderBase.forward_scriptable":
        ("d14f4646ff38666d", "tupe_plugin/modules/encoder.py TupeTransformerEncoder.forward_scriptable, "
                             "tupe_core/encoder_stack.py run_layers, tupe_tools/hf/remote/modeling_tupe.py TupeModel"),
    "fairseq.models.transformer.transformer_encoder:TransformerEncoderBase.forward_embedding":
        ("66206302027e840d", "tupe_plugin/modules/encoder.py TupeTransformerEncoder.forward_embedding, "
                             "tupe_tools/hf/remote/modeling_tupe.py TupeModel.forward"),
    "fairseq.modules.learned_positional_embedding:LearnedPositionalEmbedding.forward":
        ("e592a2918e1059e7", "tupe_core/learned_absolute.py LearnedAbsolute.forward"),
    "fairseq.utils:make_positions": ("1a3a7031a7045ed2", "tupe_core/learned_absolute.py LearnedAbsolute.forward"),
    "fairseq.utils:get_activation_fn": ("1b69db73ed66ee80", "tupe_core/encoder_stack.py ACTIVATIONS"),
    "fairseq.models.roberta.model:RobertaLMHead.forward": ("53ada5c83087a369", "tupe_tools/hf/remote/modeling_tupe.py TupeLMHead"),
    "fairseq.models.roberta.model:RobertaClassificationHead.forward":
        ("e9438fc5db13822a", "tupe_tools/hf/remote/modeling_tupe.py TupeClassificationHead"),
}


@pytest.mark.parametrize("name", list(RESTATED))
def test_fairseq_originals_are_the_restated_version(name):
    module, qualname = name.split(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    digest = hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]
    want, where = RESTATED[name]
    assert digest == want, (f"fairseq's {qualname} is not the fairseq 0.12.3 source restated in {where}: "
                            "review the restatement against it, then update RESTATED")


def off_init(model: torch.nn.Module) -> torch.nn.Module:
    """Weights moved off BERT's small init, so that attention is far from uniform (a wrong scale shows)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model


def padded(batch: int = 3, length: int = 10) -> torch.Tensor:
    x = tokens(batch, length, seed=2)
    x[1, 6:] = 1  # <pad>
    x[2, 3:] = 1
    return x


def test_the_encoder_layer_equals_fairseqs():
    """TupeEncoderLayer with no positional term is fairseq's layer (its MultiheadAttention has the same names)."""
    model = off_init(build("bert_a_tiny", max_positions=16, seed=3))
    ours = model.encoder.sentence_encoder.layers[0]
    theirs = TransformerEncoderLayerBase(TransformerConfig.from_namespace(model.args)).eval()
    theirs.load_state_dict(ours.state_dict())
    pad = padded().eq(1)
    x = torch.randn(pad.size(1), pad.size(0), model.args.encoder_embed_dim)  # (T, B, C)
    with torch.no_grad():
        got = ours(x, attention_mask(None, pad, x.dtype), PositionalTerm(None), pad)
        want = theirs(x, encoder_padding_mask=pad)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_the_encoder_forward_equals_fairseqs():
    """BERT-A (fairseq's own learned input PE, no positional term) through TupeTransformerEncoder is fairseq's
    TransformerEncoder with the same weights."""
    model = off_init(build("bert_a_tiny", max_positions=16, seed=4))
    ours = model.encoder.sentence_encoder
    args = argparse.Namespace(**vars(model.args))
    args.no_token_positional_embeddings = False  # fairseq's own LearnedPositionalEmbedding, ours is LearnedAbsolute
    theirs = TransformerEncoder(args, ours.dictionary, ours.embed_tokens).eval()
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and unexpected == [f"positions.{RECORD_BUFFER}"]
    x = padded()
    with torch.no_grad():
        got = ours(x, return_all_hiddens=True)
        want = theirs(x, return_all_hiddens=True)
    keep = x.ne(1).t()  # (T, B): padded rows are not compared (fairseq zeroes them only at the input)
    torch.testing.assert_close(got["encoder_out"][0][keep], want["encoder_out"][0][keep], rtol=0, atol=1e-5)
    assert len(got["encoder_states"]) == len(want["encoder_states"]) == model.args.encoder_layers + 1
    assert torch.equal(got["encoder_padding_mask"][0], want["encoder_padding_mask"][0])
