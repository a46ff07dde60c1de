"""fairseq's Transformer encoder with the positional term computed once and fed to every layer."""
from __future__ import annotations

from typing import Dict, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor, nn

from ..models.variants import PositionalVariant
from .attend import Dropout
from .attention import SelfAttention
from .blocks import build_attention
from .masks import attention_mask, compute_dtype
from .positional_term import PositionalTerm, SinusoidalInputPositions, TupePositions


def fairseq_block(block: nn.Module, q_noise: float, qn_block_size: int) -> nn.Module:
    """``block`` (plain torch, ``modules/blocks.py``) with fairseq's parts, in place: ``FairseqDropout`` for
    each ``Dropout`` (fairseq's ``--retain-dropout`` reaches it) and ``quant_noise`` on each ``nn.Linear``
    (``--quant-noise-pq``; without it, nothing)."""
    for name, child in list(block.named_children()):
        if isinstance(child, Dropout):
            setattr(block, name, FairseqDropout(child.p, module_name=type(block).__name__))
        elif isinstance(child, nn.Linear):
            quant_noise(child, q_noise, qn_block_size)  # registers its hook on child itself
    return block


def has_padding(padding_mask: Tensor, variant: PositionalVariant) -> bool:
    """Whether the (B, T) batch has pads, in the one host sync the forward needs anyway; refuses left padding
    (a row that starts with a pad and ends with a token) for every variant that reads positions by token
    index: only fairseq's learned input PE alone (BERT-A: it numbers tokens after the pads) and NoPE are
    indifferent to where the pads are."""
    if variant.no_position or (variant.input_pe and not (variant.untied_pos or variant.rel_pos)):
        return bool(padding_mask.any())
    left = padding_mask[:, 0] & ~padding_mask[:, -1]  # (B,)
    any_pad, any_left = torch.stack([padding_mask.any(), left.any()]).tolist()
    if any_left:
        raise ValueError(
            f"left-padded input (batch row {int(left.nonzero()[0])} starts with padding): positional variant "
            f"'{variant.name}' gives token i position i, so left padding would silently shift every position; "
            "pad on the right, as fairseq's masked_lm and sentence_prediction tasks do (RightPadDataset)"
        )
    return any_pad


class TupeEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer (Post-LN by default) whose attention block is chosen by the variant."""

    def __init__(self, cfg: TransformerConfig, variant: PositionalVariant, attention_path: str, max_positions: int):
        self.variant, self.attention_path, self.max_positions = variant, attention_path, max_positions
        super().__init__(cfg)  # calls build_self_attention

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig) -> SelfAttention:
        """The variant's block (``modules/blocks.py``) with fairseq's dropout and quant-noise."""
        block = build_attention(self.variant, embed_dim, cfg.encoder.attention_heads, cfg.attention_dropout,
                                self.attention_path, self.max_positions)  # --tupe-attention
        return fairseq_block(block, self.quant_noise, self.quant_noise_block_size)

    # Restates fairseq 0.12.3 (the ve-fairseq 0.12.3 wheel) TransformerEncoderLayerBase.forward;
    # tests/test_restated_code.py fails when fairseq's source changes, and compares the two on one input.
    # Changed: one additive mask (positional bias + key padding, built once per forward) and the
    # PositionalTerm go to the attention block instead of key_padding_mask/attn_mask; no -1e8 attn_mask
    # conversion, no fc_result return.
    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor],
        positions: PositionalTerm,
        key_padding_mask: Optional[Tensor] = None,
    ) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, mask, positions, key_padding_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.fc2(self.activation_dropout_module(self.activation_fn(self.fc1(x))))
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class TupeTransformerEncoder(TransformerEncoder):
    """The encoder of ``tupe_roberta``, built for one ``PositionalVariant`` (models/variants.py)."""

    def __init__(self, args, dictionary, embed_tokens, variant: PositionalVariant):
        self.variant = variant  # read by build_encoder_layer during super().__init__
        super().__init__(args, dictionary, embed_tokens)
        self.positions = TupePositions(
            variant, args.encoder_embed_dim, args.encoder_attention_heads, args.max_positions, args.encoder_layers
        )
        if variant.sinusoidal_pe:  # fairseq built none (no_token_positional_embeddings)
            self.embed_positions = SinusoidalInputPositions(
                args.encoder_embed_dim, args.max_positions, variant.sinusoidal_scaled)

    def build_encoder_layer(self, cfg):
        checkpoint = cfg.checkpoint_activations
        layer = TupeEncoderLayer(
            TransformerConfig.from_namespace(cfg), self.variant, self.args.tupe_attention, self.args.max_positions
        )
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    # Restates fairseq 0.12.3 (the ve-fairseq 0.12.3 wheel) TransformerEncoderBase.forward_scriptable;
    # tests/test_restated_code.py fails when fairseq's source changes, and compares the two on one input.
    # Changed: the positional term is computed once and combined with the key-padding mask into one
    # additive mask per forward (one per layer index for a per-layer prior), given to every layer;
    # fc_results stay empty.
    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        padding_mask = src_tokens.eq(self.padding_idx)  # (B, T)
        has_pads = has_padding(padding_mask, self.variant)
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)  # (B, T, C)
        if has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # (T, B, C)

        positions = self.positions(src_tokens.size(1))  # once per forward, shared by all layers
        pad = padding_mask if has_pads else None
        # padded key columns get a large finite negative logit (attention.padding_value), not -inf: a
        # sequence without a real token gives finite rows, not NaN.
        # cast to the compute dtype here, once per forward, not in every layer
        dtype = compute_dtype(x)
        if positions.bias is not None and positions.bias.dim() == 4:  # a learned prior per layer
            masks = [attention_mask(b, pad, dtype) for b in positions.bias]
        else:
            masks = [attention_mask(positions.bias, pad, dtype)] * len(self.layers)  # one tensor for all

        index = self._layer_index()
        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:  # with --encoder-layerdrop, a random subset of the layers
            x = layer(x, masks[index[id(layer)]], positions, pad)  # each layer its own mask, by index
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)
        return {
            "encoder_out": [x],  # (T, B, C)
            "encoder_padding_mask": [padding_mask],  # (B, T)
            "encoder_embedding": [encoder_embedding],  # (B, T, C)
            "encoder_states": encoder_states,  # list of (T, B, C)
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }

    def _layer_index(self) -> Dict[int, int]:
        """id(layer) -> its index in the full stack (LayerDropModuleList iterates only the kept ones)."""
        return {id(layer): i for i, layer in enumerate(nn.ModuleList.__iter__(self.layers))}
