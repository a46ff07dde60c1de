"""Every tupe_plugin positional variant as a ``transformers`` encoder (``tupe-export-hf``).

Written by the tupe_plugin project (not copied from transformers). The positional term and the attention
blocks are tupe_plugin's own modules, not a restatement: ``tupe-export-hf`` copies ``variants.py``,
``positional_term.py``, the attention modules and ``blocks.py`` (plain torch) next to this file. What
this file restates is fairseq's (fairseq 0.12.3), which the exported folder cannot import: the embedding,
the encoder layer and the heads of RoBERTa, with fairseq's parameter names, so that features and logits
equal fairseq's. tupe_plugin's ``tests/test_hf_export.py`` checks that for every registered variant. Inputs
must be right-padded, as fairseq's batches are (the model refuses left padding). The math is in
tupe_plugin's ``docs/hf_export.md``. Loaded with ``trust_remote_code=True``.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from .blocks import build_attention
from .configuration_tupe import TupeConfig
from .masks import attention_mask as additive_mask  # the name attention_mask is the input's
from .masks import compute_dtype
from .pam import PamSelfAttention, gaussian_distance_init
from .positional_term import PositionalTerm, SinusoidalInputPositions, TupePositions, gaussian_by_distance

# fairseq 0.12.3 utils.get_activation_fn: gelu in float32, gelu_accurate its tanh approximation
ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x.float()).type_as(x),
    "gelu_accurate": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3)))),
    "relu": F.relu,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


def refuse_left_padding(keep: Tensor) -> None:
    """``keep``: (B, T), False at padding. Positions, the [CLS] token of the classifier and the untied [CLS]
    terms are counted from column 0, as in fairseq's right-padded batches: a left-padded row would shift them."""
    shifted = (keep[:, 1:] & ~keep[:, :-1]).any(dim=1)  # a real token after a padded one
    if bool(shifted.any()):
        rows = shifted.nonzero().flatten().tolist()
        raise ValueError(
            f"attention_mask rows {rows[:5]} are left-padded (padding before real tokens): this model counts "
            "positions and reads its [CLS] token from column 0, so pad on the right (tokenizer.padding_side = "
            "'right', the tokenizer's default)"
        )


class TupeLayer(nn.Module):
    """fairseq 0.12.3 TransformerEncoderLayerBase (Post-LN unless ``normalize_before``) with the variant's
    attention block, as tupe_plugin's ``TupeEncoderLayer``; time-first (T, B, C) as fairseq."""

    def __init__(self, config: TupeConfig):
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.normalize_before = config.normalize_before
        self.self_attn = build_attention(config.positional_variant, d, config.num_attention_heads,
                                         config.attention_probs_dropout_prob, "auto", config.max_position_embeddings)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, config.intermediate_size), nn.Linear(config.intermediate_size, d)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor, mask: Optional[Tensor], positions: PositionalTerm,
                key_padding_mask: Optional[Tensor]) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, mask, positions, key_padding_mask)[0])
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = residual + self.dropout(self.fc2(self.activation_dropout(self.act(self.fc1(x)))))
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


class TupePreTrainedModel(PreTrainedModel):
    config_class = TupeConfig
    base_model_prefix = "tupe"
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """transformers' default init for weights the export does not hold (e.g. a new classifier), the plugin's
        for its own parameters, and the fixed tables (transformers builds the model on the meta device)."""
        super()._init_weights(module)
        if isinstance(module, TupeLMHead):
            init.zeros_(module.bias)
        if isinstance(module, (TupePositions, SinusoidalInputPositions)):
            for name, table in module.fixed_tables().items():
                init.copy_(getattr(module, name), table)
        if isinstance(module, TupePositions) and hasattr(module, "distance_bias"):
            init.copy_(module.distance_bias, gaussian_by_distance(module.max_positions).expand_as(module.distance_bias))
        if isinstance(module, PamSelfAttention) and hasattr(module, "pos_weight"):
            init.copy_(module.pos_weight, gaussian_distance_init(module.num_heads, module.max_positions))


class TupeModel(TupePreTrainedModel):
    """The encoder: ``last_hidden_state`` equals fairseq's ``extract_features`` (B, T, C)."""

    # one model.safetensors holds the encoder and both heads; each class takes what it has
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"^classifier\."]

    def __init__(self, config: TupeConfig):
        super().__init__(config)
        d, pad, P = config.hidden_size, config.pad_token_id, config.max_position_embeddings
        variant = config.positional_variant
        self.padding_idx = pad
        self.embed_scale = config.embed_scale
        self.embed_tokens = nn.Embedding(config.vocab_size, d, padding_idx=pad)
        self.embed_positions = None
        if variant.input_pe:  # fairseq's LearnedPositionalEmbedding: positions pad+1 .. over real tokens
            self.embed_positions = nn.Embedding(P + pad + 1, d, padding_idx=pad)
        elif variant.sinusoidal_pe:
            self.embed_positions = SinusoidalInputPositions(d, P, variant.sinusoidal_scaled)
        self.layernorm_embedding = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.layernorm_embedding else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.positions = TupePositions(variant, d, config.num_attention_heads, P, config.num_hidden_layers)
        self.layers = nn.ModuleList(TupeLayer(config) for _ in range(config.num_hidden_layers))
        self.layer_norm = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.normalize_before else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Optional[Tensor] = None,
        output_hidden_states: bool = False,
        return_dict: bool = True,
        **kwargs,
    ):
        if attention_mask is None:
            attention_mask = input_ids.ne(self.padding_idx).long()
        keep = attention_mask.bool()  # (B, T), False at padding
        has_pads = not bool(keep.all())
        if has_pads:
            refuse_left_padding(keep)
        # fairseq 0.12.3 TransformerEncoderBase.forward_embedding and the padding zeroed by forward_scriptable
        x = self.embed_scale * self.embed_tokens(input_ids)  # (B, T, C)
        if isinstance(self.embed_positions, nn.Embedding):
            k = keep.long()
            x = x + self.embed_positions(torch.cumsum(k, dim=1) * k + self.padding_idx)  # fairseq's make_positions
        elif self.embed_positions is not None:
            x = x + self.embed_positions(input_ids)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)
        if has_pads:
            x = x * keep.unsqueeze(-1).type_as(x)
        x = x.transpose(0, 1)  # (T, B, C), as fairseq's layers

        # as tupe_plugin's TupeTransformerEncoder: the positional term and the masks once per forward
        positions = self.positions(input_ids.size(1))
        pad = ~keep if has_pads else None
        dtype = compute_dtype(x)  # autocast's where it is on, else x's
        if positions.bias is not None and positions.bias.dim() == 4:  # a learned prior per layer
            masks = [additive_mask(b, pad, dtype) for b in positions.bias]
        else:
            masks = [additive_mask(positions.bias, pad, dtype)] * len(self.layers)
        hidden_states = [x] if output_hidden_states else None
        for layer, mask in zip(self.layers, masks):
            x = layer(x, mask, positions, pad)
            if output_hidden_states:
                hidden_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        out = BaseModelOutput(
            last_hidden_state=x.transpose(0, 1),
            hidden_states=tuple(h.transpose(0, 1) for h in hidden_states) if hidden_states else None,
        )
        return out if return_dict else out.to_tuple()


class TupeLMHead(nn.Module):
    """RoBERTa's LM head: dense -> act -> LayerNorm -> tied embedding projection + bias."""

    def __init__(self, config: TupeConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.lm_head_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, features: Tensor, embed_weight: Tensor) -> Tensor:
        return F.linear(self.layer_norm(self.act(self.dense(features))), embed_weight) + self.bias


class TupeForMaskedLM(TupePreTrainedModel):
    _keys_to_ignore_on_load_unexpected = [r"^classifier\."]

    def __init__(self, config: TupeConfig):
        super().__init__(config)
        self.tupe = TupeModel(config)
        self.lm_head = TupeLMHead(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.tupe.embed_tokens

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: bool = False, return_dict: bool = True, **kwargs):
        out = self.tupe(input_ids, attention_mask, output_hidden_states=output_hidden_states)
        logits = self.lm_head(out.last_hidden_state, self.tupe.embed_tokens.weight)  # (B, T, V)
        loss = None
        if labels is not None:  # -100 = not a masked position
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1), ignore_index=-100)
        result = MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return result if return_dict else result.to_tuple()


class TupeClassificationHead(nn.Module):
    """fairseq's sentence classification head on the ``<s>`` features.

    ``roberta`` style: dropout -> dense -> act -> dropout -> out_proj (fairseq RobertaClassificationHead);
    ``release`` style: dense -> act -> dropout -> out_proj (the official TUPE code's head).
    """

    def __init__(self, config: TupeConfig):
        super().__init__()
        if config.classification_head_style not in ("roberta", "release"):
            raise ValueError(f"classification_head_style must be 'roberta' or 'release', got "
                             f"{config.classification_head_style!r}")
        self.dropout_first = config.classification_head_style == "roberta"
        self.dense = nn.Linear(config.hidden_size, config.classifier_inner_dim)
        self.act = ACTIVATIONS[config.classifier_act]
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.classifier_inner_dim, config.num_labels)

    def forward(self, features: Tensor) -> Tensor:
        x = features[:, 0, :]  # <s> (the [CLS] token)
        if self.dropout_first:
            x = self.dropout(x)
        return self.out_proj(self.dropout(self.act(self.dense(x))))


class TupeForSequenceClassification(TupePreTrainedModel):
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]

    def __init__(self, config: TupeConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.tupe = TupeModel(config)
        self.classifier = TupeClassificationHead(config)
        self.post_init()

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: bool = False, return_dict: bool = True, **kwargs):
        out = self.tupe(input_ids, attention_mask, output_hidden_states=output_hidden_states)
        logits = self.classifier(out.last_hidden_state)  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:  # regression (STS-B), as fairseq's sentence_prediction
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.view(-1))
        result = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return result if return_dict else result.to_tuple()
