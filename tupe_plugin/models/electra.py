"""ELECTRA's replaced-token detection around the plugin's encoder (Clark et al., ICLR 2020).

A small generator (masked LM) fills the masked positions with samples; the discriminator, a
``tupe_roberta`` encoder of the same positional variant, labels every token original or replaced. Both
are built from the run's ``--arch`` and variant flags; the generator has the same depth and the width,
FFN and heads divided by ``--generator-size-divisor`` (ELECTRA: 3 at base, 4 at small/large).

Shared between the two networks, as in the official code (``model/modeling.py``, one embedding scope):
the token embeddings, the input position embeddings (BERT-A's learned table, the fixed sinusoidal one)
and the embedding LayerNorm, one module each, at the discriminator's width; the generator projects their
output to its width (``embed_projection``) and its output layer is tied to the shared token embeddings
(dense to the embedding width, gelu, LayerNorm, ``E^T`` + bias). Everything a variant adds inside
attention (TUPE's position table and U^Q/U^K, relative tables, priors, RoPE/DeBERTa/PAM weights) is per
network: it lives at each network's width and heads. docs/electra.md has the reasons and sources.

State-dict keys: the discriminator is ``encoder.*``, the same keys as an MLM ``tupe_roberta`` without its
``encoder.lm_head`` (so it fine-tunes as one); the generator is ``generator.*``, the replaced-token head
``discriminator_head.*``. A ``tupe_roberta`` model loading such a state keeps the discriminator
(:func:`keep_discriminator`, in models/electra_checkpoint.py with the rest of the checkpoint surgery).

The training step makes the host wait for the device nowhere (no boolean-mask indexing, no ``.item()``):
the task's batches carry the masked positions as flat indices computed in the data loader
(:func:`find_masked_positions`), so every size is known on the host; docs/electra.md.
"""
from __future__ import annotations

import argparse
import logging
from typing import Any, Dict, NamedTuple, Optional

import torch
from fairseq import utils
from fairseq.models.roberta.model import RobertaLMHead
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from omegaconf import OmegaConf, open_dict
from torch import Tensor, nn

from tupe_core.encoder_stack import Padding
from tupe_core.facts import generator_divisor, generator_sizes
from tupe_core.record import PositionalVariant

from ..modules.encoder import TupeTransformerEncoder
from .tupe_roberta import TupeRobertaModel

logger = logging.getLogger(__name__)


class ElectraOutput(NamedTuple):
    gen_logits: Tensor  # (M, V) generator logits at the M masked positions (row-major order)
    sampled: Tensor  # (M,) tokens sampled from them
    disc_logits: Tensor  # (B, T) discriminator logit of "replaced" for every position
    replaced: Tensor  # (B, T) bool: masked and the sample differs from the original
    masked: Tensor  # (B, T) bool: the positions the task selected
    masked_positions: Tensor  # (M,) their flat indices into (B * T), row-major: the rows of gen_logits


def find_masked_positions(targets: Tensor, padding_idx: int) -> Tensor:
    """(M,) the flat indices into (B * T), in row-major order, of the positions the task selected (those
    whose target is not pad). ``nonzero`` has a data-dependent size: on a GPU tensor the host waits for the
    device, so the electra task calls this in its collater, on the CPU batch (tasks/electra.py)."""
    return targets.ne(padding_idx).flatten().nonzero().squeeze(1)


def _namespace(args: Any) -> argparse.Namespace:
    if OmegaConf.is_config(args):
        return argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    return argparse.Namespace(**vars(args))


class GeneratorTransformerEncoder(TupeTransformerEncoder):
    """The plugin's encoder at the generator's width over the discriminator's embedding layer."""

    def __init__(self, args, dictionary, shared: TupeTransformerEncoder, variant: PositionalVariant):
        super().__init__(args, dictionary, shared.embed_tokens, variant)
        # before sharing the positions and LayerNorm, which keep their values; the token embeddings, passed to the
        # encoder above, are drawn again from the same distribution (init_bert_params), as a new model's would be
        self.apply(init_bert_params)
        width, embed_width = args.encoder_embed_dim, shared.embed_tokens.embedding_dim
        # one module each, owned by both networks (ELECTRA's shared embedding scope)
        self.embed_tokens = shared.embed_tokens
        self.embed_positions = shared.embed_positions
        self.layernorm_embedding = shared.layernorm_embedding
        self.embed_projection = nn.Linear(embed_width, width) if width != embed_width else None
        if self.embed_projection is not None:
            init_bert_params(self.embed_projection)
        if self.layer_norm is not None:  # fairseq sizes the final (pre-LN) norm by the embedding width
            self.layer_norm = LayerNorm(width)

    def forward_embedding(self, src_tokens: Tensor, token_embedding: Optional[Tensor] = None,
                          position_ids: Optional[Tensor] = None):
        x, embed = super().forward_embedding(src_tokens, token_embedding, position_ids)  # (B, T, embedding width)
        return (x if self.embed_projection is None else self.embed_projection(x)), embed


class GeneratorLMHead(RobertaLMHead):
    """ELECTRA's generator output: dense to the embedding width, activation, LayerNorm, ``E^T`` + bias."""

    def __init__(self, width: int, embed_tokens: nn.Embedding, activation_fn: str):
        super().__init__(embed_tokens.embedding_dim, embed_tokens.num_embeddings, activation_fn, embed_tokens.weight)
        self.dense = nn.Linear(width, embed_tokens.embedding_dim)
        init_bert_params(self.dense)


class Generator(nn.Module):
    """The masked-LM generator: its encoder (``sentence_encoder``) and tied output layer (``lm_head``)."""

    def __init__(self, args, dictionary, shared: TupeTransformerEncoder, variant: PositionalVariant):
        super().__init__()
        self.sentence_encoder = GeneratorTransformerEncoder(args, dictionary, shared, variant)
        self.lm_head = GeneratorLMHead(args.encoder_embed_dim, shared.embed_tokens, args.activation_fn)

    def forward(self, src_tokens: Tensor, masked_positions: Tensor, padding: Optional[Padding] = None) -> Tensor:
        features = self.sentence_encoder(src_tokens, padding=padding)["encoder_out"][0].transpose(0, 1)  # (B, T, G)
        # one gather of the M masked rows by their flat indices; RobertaLMHead's own selection is
        # features[bool mask], whose size the host would wait for (nonzero), in forward and backward
        features = features.reshape(-1, features.size(-1)).index_select(0, masked_positions)  # (M, G)
        return self.lm_head(features)  # (M, V)


class DiscriminatorHead(nn.Module):
    """ELECTRA's replaced-token head: dense, activation, dense to one logit per token."""

    def __init__(self, width: int, activation_fn: str):
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.out_proj = nn.Linear(width, 1)
        self.apply(init_bert_params)

    def forward(self, features: Tensor) -> Tensor:
        return self.out_proj(self.activation_fn(self.dense(features))).squeeze(-1)  # (B, T)


class ElectraModel(TupeRobertaModel):
    """Generator + discriminator; built by the ``electra`` task around the ``tupe_roberta`` model that
    ``--arch`` builds (tasks/electra.py), so every arch and variant trains with ELECTRA too."""

    def __init__(self, args, encoder, generator: Generator, discriminator_head: DiscriminatorHead):
        super().__init__(args, encoder)
        self.generator = generator
        self.discriminator_head = discriminator_head

    @classmethod
    def from_discriminator(cls, discriminator: TupeRobertaModel, divisor: int) -> "ElectraModel":
        """The ELECTRA model whose discriminator is ``discriminator`` (its MLM head removed) and whose
        generator is the same variant at 1/``divisor`` of its width (0: ELECTRA's default for the size)."""
        args, encoder = discriminator.args, discriminator.encoder
        sizes = generator_sizes(args, generator_divisor(args, divisor))
        gen_args = _namespace(args)
        gen_args.encoder_embed_dim = sizes["generator_embed_dim"]
        gen_args.encoder_ffn_embed_dim = sizes["generator_ffn_embed_dim"]
        gen_args.encoder_attention_heads = sizes["generator_attention_heads"]
        variant = discriminator.positional_variant
        generator = Generator(gen_args, encoder.dictionary, encoder.sentence_encoder, variant)
        del encoder.lm_head  # the discriminator predicts no tokens (the generator does)
        head = DiscriminatorHead(args.encoder_embed_dim, args.activation_fn)
        _record(args, sizes)
        logger.info("ELECTRA generator: " + ", ".join(f"{k[len('generator_'):]} {v}" for k, v in sizes.items()))
        return cls(args, encoder, generator, head)

    def forward(self, src_tokens: Tensor, targets: Optional[Tensor] = None,
                masked_positions: Optional[Tensor] = None, **kwargs):
        """With ``targets`` (the task's originals at the masked positions, pad elsewhere): the generator's
        predictions there, one sample each (float32 softmax without <pad>, no gradient), and the discriminator's logits
        on the input with the samples in place. ``masked_positions``: the task's batches carry them
        (:func:`find_masked_positions`); without, they are computed here (a host wait on a GPU). Without
        ``targets``: the discriminator as a ``tupe_roberta`` model."""
        if targets is None:
            return super().forward(src_tokens, **kwargs)
        padding_idx = self.encoder.sentence_encoder.padding_idx
        if masked_positions is None:
            masked_positions = find_masked_positions(targets, padding_idx)
        # the samples replace real tokens and are never <pad>, so both encoders see one padding layout: one host
        # wait for it (and the left-padding check), not one per encoder
        encoder = self.encoder.sentence_encoder
        padding = encoder.has_padding(src_tokens.eq(padding_idx))  # and each token's position, if left-padded
        gen_logits = self.generator(src_tokens, masked_positions, padding)  # (M, V)
        with torch.no_grad():
            probs = torch.softmax(gen_logits, dim=-1, dtype=torch.float32)  # (M, V)
            # never <pad>: in the discriminator's input it would read as padding (no token), and the encoder
            # refuses padding before a real token
            probs[:, padding_idx] = 0
            sampled = sample_rows(probs)  # (M,)
            corrupted = src_tokens.flatten().scatter(0, masked_positions, sampled).view_as(src_tokens)  # (B, T)
            masked = targets.ne(padding_idx)
            replaced = masked & corrupted.ne(targets)  # a sample equal to the original counts as original
        # RobertaEncoder.extract_features, with the known padding
        features = encoder(corrupted, padding=padding)["encoder_out"][0].transpose(0, 1)  # (B, T, D)
        return ElectraOutput(gen_logits, sampled, self.discriminator_head(features), replaced, masked,
                             masked_positions)

    def keep_discriminator(self, state_dict: Dict[str, Tensor], name: str) -> None:
        """An ELECTRA model keeps its generator (TupeRobertaModel drops it)."""


def sample_rows(probs: Tensor) -> Tensor:
    """One index per row of ``probs`` (N, V), drawn with those probabilities: by the inverse of each row's
    cumulative sum at one uniform number. Same distribution as ``torch.multinomial(probs, 1)``, which on CPU
    draws V exponential numbers per row (N x V, a vocabulary's worth for every masked token)."""
    cdf = probs.cumsum(-1)  # (N, V)
    u = torch.rand(probs.size(0), 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    # right=True: the first index whose cumulative sum exceeds u, so a zero-probability entry is never drawn;
    # the clamp covers u equal to the total by rounding
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=probs.size(-1) - 1)


def _record(args: Any, sizes: Dict[str, int]) -> None:
    """The generator's sizes in the model config, so the checkpoint says them (tupe-checkpoint-info)."""
    if OmegaConf.is_config(args):
        with open_dict(args):
            for k, v in sizes.items():
                args[k] = v
    else:
        for k, v in sizes.items():
            setattr(args, k, v)
