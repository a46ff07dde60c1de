"""Every positional variant of tupe_core as a ``transformers`` encoder (``tupe-export-hf``).

Written by the tupe_plugin project (not copied from transformers). The positional encodings, the attention
blocks and the encoder's forward are the project's own modules, not a restatement: ``tupe-export-hf`` copies
the modules of ``tupe_core`` (plain torch) that this file imports next to it, with its ``from tupe_core.<name>``
lines made package-relative (``from .<name>``), and the fairseq model runs the same ``encoder_stack.py``. What this file restates is fairseq's (fairseq 0.12.3), which the exported folder cannot
import: the embedding and the heads of RoBERTa, with fairseq's parameter names, so that features and logits
equal fairseq's. tupe_plugin's ``tests/test_hf_export.py`` checks that for every registered variant. Left-padded
input follows fairseq's rule (each token's position passed in where a variant reads positions); the classifier
refuses a row that starts with padding. The math is in tupe_plugin's ``docs/hf_export.md``. Loaded with
``trust_remote_code=True``.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from tupe_core.attention import SelfAttention
from tupe_core.base import PositionalEncoding
from tupe_core.encoder_stack import ACTIVATIONS, HEAD_STYLES, check_padding, input_positions, layer_forward, run_layers
from tupe_core.registry import build, attention_block, left_padding

from .configuration_tupe import TupeConfig

RIGHT_PADDING = "pad on the right (tokenizer.padding_side = 'right', the tokenizer's default)"


class TupeLayer(nn.Module):
    """fairseq 0.12.3's encoder layer (Post-LN unless ``normalize_before``) with the variant's attention block,
    fairseq's names, and the plugin's forward (``encoder_stack.layer_forward``); time-first (T, B, C)."""

    def __init__(self, config: TupeConfig):
        super().__init__()
        d, eps, variant = config.hidden_size, config.layer_norm_eps, config.positional_variant
        self.normalize_before = config.normalize_before
        self.self_attn = attention_block(variant, d, config.num_attention_heads, config.attention_probs_dropout_prob,
                                         "auto", config.max_position_embeddings)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, config.intermediate_size), nn.Linear(config.intermediate_size, d)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)
        self.activation_fn = ACTIVATIONS[config.hidden_act]
        self.dropout_module = nn.Dropout(config.hidden_dropout_prob)
        self.activation_dropout_module = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor, mask: Optional[Tensor], positions, key_padding_mask: Optional[Tensor]) -> Tensor:
        return layer_forward(self, x, mask, positions, key_padding_mask)


class TupePreTrainedModel(PreTrainedModel):
    config_class = TupeConfig
    base_model_prefix = "tupe"
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """transformers' default init for weights the export does not hold (e.g. a new classifier), and what the
        plugin's encodings and blocks start at: their fixed tables and their own initial values (transformers
        builds the model on the meta device; ``init.copy_`` leaves what a checkpoint loaded)."""
        super()._init_weights(module)
        if isinstance(module, TupeLMHead):
            init.zeros_(module.bias)
        if isinstance(module, (PositionalEncoding, SelfAttention)):
            for name, value in module.initial_values().items():
                init.copy_(getattr(module, name), value)


class TupeModel(TupePreTrainedModel):
    """The encoder: ``last_hidden_state`` equals fairseq's ``extract_features`` (B, T, C)."""

    # one model.safetensors holds the encoder and both heads; each class takes what it has
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"^classifier\."]

    def __init__(self, config: TupeConfig):
        super().__init__(config)
        d, pad, variant = config.hidden_size, config.pad_token_id, config.positional_variant
        self.padding_idx = pad
        self.embed_scale = config.embed_scale
        self.embed_tokens = nn.Embedding(config.vocab_size, d, padding_idx=pad)
        self.embed_positions, self.positions = build(
            variant, d, config.num_attention_heads, config.max_position_embeddings, config.num_hidden_layers,
            padding_idx=pad)
        self.left_padding = left_padding(variant)  # AS_IS, POSITIONS or REFUSED (tupe_core/base.py)
        self.layernorm_embedding = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.layernorm_embedding else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
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
        pad = ~attention_mask.bool()  # (B, T), True at padding
        padding = check_padding(pad, self.left_padding, f"this model (positional variant '{self.config.tupe_variant}')",
                                RIGHT_PADDING)
        # fairseq 0.12.3 TransformerEncoderBase.forward_embedding and the padding zeroed by forward_scriptable
        x = self.embed_scale * self.embed_tokens(input_ids)  # (B, T, C)
        if self.embed_positions is not None:  # reads padding from the tokens, as fairseq: pad where the mask says
            x = x + input_positions(self.embed_positions, input_ids.masked_fill(pad, self.padding_idx),
                                    padding.position_ids)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)
        if padding.has_pads:
            x = x * (~pad).unsqueeze(-1).type_as(x)
        x = x.transpose(0, 1)  # (T, B, C), as fairseq's layers

        x, hidden_states = run_layers(x, pad if padding.has_pads else None, self.positions, self.layers,
                                      keep_states=output_hidden_states, position_ids=padding.position_ids)
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
        if config.classification_head_style not in HEAD_STYLES:
            raise ValueError(f"classification_head_style must be one of {HEAD_STYLES}, got "
                             f"{config.classification_head_style!r}")
        self.dropout_first = config.classification_head_style == "roberta"
        self.dense = nn.Linear(config.hidden_size, config.classifier_inner_dim)
        self.activation_fn = ACTIVATIONS[config.classifier_act]
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.classifier_inner_dim, config.num_labels)

    def forward(self, features: Tensor) -> Tensor:
        x = features[:, 0, :]  # <s> (the [CLS] token)
        if self.dropout_first:
            x = self.dropout(x)
        return self.out_proj(self.dropout(self.activation_fn(self.dense(x))))


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
        if attention_mask is not None and not bool(attention_mask[:, 0].all()):
            raise ValueError("attention_mask has rows that start with padding: the classifier reads the [CLS] token "
                             f"from column 0; {RIGHT_PADDING}")
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
