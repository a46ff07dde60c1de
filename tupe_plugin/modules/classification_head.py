"""Sentence classification heads: the TUPE release's (default of ``tupe_roberta``) and RoBERTa's.

Both read the first token (``<s>``, the [CLS] position) and have the same parameters (``dense``,
``out_proj``), so a checkpoint loads into either; they differ only in where dropout is applied while
training (``docs/glue_protocol.md`` §6):

- ``release``: ``dense -> tanh -> dropout -> out_proj`` (the official code's BERT head);
- ``roberta``: ``dropout -> dense -> tanh -> dropout -> out_proj`` (fairseq's RobertaClassificationHead).

``--classification-head-style release|roberta`` picks one; the choice is stored in the model's args,
hence in every checkpoint.
"""
from typing import Dict, Type

from fairseq.models.roberta.model import RobertaClassificationHead
from fairseq.utils import safe_getattr
from torch import Tensor, nn

from tupe_core.encoder_stack import DEFAULT_HEAD_STYLE, HEAD_STYLES


class ReleaseClassificationHead(RobertaClassificationHead):
    """The TUPE release's head: no dropout before ``dense`` (else as RoBERTa's)."""

    def forward(self, features: Tensor, **kwargs) -> Tensor:
        x = features[:, 0, :]  # (B, d): <s>, the [CLS] position
        x = self.activation_fn(self.dense(x))  # (B, inner)
        return self.out_proj(self.dropout(x))  # (B, classes)


# the fairseq class of each of tupe_core's HEAD_STYLES (the exported model's heads are the same two styles)
HEAD_CLASSES: Dict[str, Type[RobertaClassificationHead]] = dict(zip(HEAD_STYLES, (ReleaseClassificationHead,
                                                                                 RobertaClassificationHead)))


def head_style(args) -> str:
    """The model's ``classification_head_style`` (the release's when the args predate the option)."""
    style = safe_getattr(args, "classification_head_style", None) or DEFAULT_HEAD_STYLE
    if style not in HEAD_STYLES:
        raise ValueError(f"classification_head_style={style!r}: choose from {', '.join(HEAD_STYLES)}")
    return style


def build_classification_head(args, num_classes: int, inner_dim: int = None) -> nn.Module:
    """The head of ``args``' style with the constructor arguments fairseq's RoBERTa uses."""
    return HEAD_CLASSES[head_style(args)](
        input_dim=args.encoder_embed_dim,
        inner_dim=inner_dim or args.encoder_embed_dim,
        num_classes=num_classes,
        activation_fn=args.pooler_activation_fn,
        pooler_dropout=args.pooler_dropout,
        q_noise=args.quant_noise_pq,
        qn_block_size=args.quant_noise_pq_block_size,
        do_spectral_norm=args.spectral_norm_classification_head,
    )
