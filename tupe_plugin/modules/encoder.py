"""fairseq's Transformer encoder with the positional term computed once and fed to every layer."""
from __future__ import annotations

from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor

from .attention import BiasedSelfAttention, attention_mask
from .positional_term import PositionalTerm, TupePositions


class TupeEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer (Post-LN by default) whose attention takes an additive bias."""

    def __init__(self, cfg: TransformerConfig, scale_factor: float, attention_impl: str):
        self.scale_factor, self.attention_impl = scale_factor, attention_impl
        super().__init__(cfg)

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig) -> BiasedSelfAttention:
        return BiasedSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            scale_factor=self.scale_factor,
            impl=self.attention_impl,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )

    def forward(self, x: Tensor, mask: Optional[Tensor], positions: PositionalTerm) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, mask, positions.query, positions.key)
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
    """The encoder of ``tupe_roberta``. ``args`` carries the variant flags (see variants.py)."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        self.positions = TupePositions(
            embed_dim=args.encoder_embed_dim,
            num_heads=args.encoder_attention_heads,
            max_positions=args.max_positions,
            untied_pos=args.untied_pos,
            untie_cls=args.untie_cls,
            rel_pos=args.rel_pos,
            mixed_terms=args.pos_mixed_terms,
            rel_pos_bins=args.rel_pos_bins,
            max_rel_pos=args.max_rel_pos,
            scale_factor=args.attn_scale_factor,
            distance_prior=args.distance_prior,
            num_layers=args.encoder_layers,
        )

    def build_encoder_layer(self, cfg):
        checkpoint = cfg.checkpoint_activations
        layer = TupeEncoderLayer(
            TransformerConfig.from_namespace(cfg), self.args.attn_scale_factor, self.args.attention_impl
        )
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        padding_mask = src_tokens.eq(self.padding_idx)  # (B, T)
        has_pads = bool(padding_mask.any())
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)  # (B, T, C)
        if has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # (T, B, C)

        positions = self.positions(src_tokens.size(1))  # once per forward, shared by all layers
        pad = padding_mask if has_pads else None
        if positions.bias is not None and positions.bias.dim() == 4:  # a learned prior per layer
            masks = [attention_mask(b, pad, x.dtype) for b in positions.bias]
        else:
            masks = [attention_mask(positions.bias, pad, x.dtype)] * len(self.layers)

        encoder_states = [x] if return_all_hiddens else []
        for layer, mask in zip(self.layers, masks):
            x = layer(x, mask, positions)
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
