"""TUPE-family encoders (TUPE-A/R, BERT-A/R/Ad, Gaussian distance priors) for ``transformers``.

Written by the tupe_plugin project for ``tupe-export-hf`` (not copied from transformers). The exported
folder must run where neither fairseq nor tupe_plugin is installed, so this file restates, by design,
the forward pass of tupe_plugin's fairseq model ``tupe_roberta`` (fairseq 0.12 RoBERTa encoder, Post-LN,
with ``tupe_plugin/modules/{positional_term,attention,encoder}.py``) with the same parameter names, so
that features and logits equal fairseq's; what differs: batch-first tensors, and the relative buckets
and Gaussian prior are computed per call instead of held in buffers. The math is in tupe_plugin's
``docs/hf_export.md`` (sources: Ke et al. 2021, "Rethinking Positional Encoding in Language
Pre-training", and the official guolinke/TUPE code; Chen et al. 2023 for the distance priors).
Loaded with ``trust_remote_code=True``.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from .configuration_tupe import TupeConfig

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_accurate": lambda x: F.gelu(x, approximate="tanh"),  # fairseq's tanh approximation
    "relu": F.relu,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


def relative_position_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bidirectional bucket of ``j - i`` (keys on the right get ``num_buckets/2 ..``)."""
    half = num_buckets // 2
    n = -relative_position
    bucket = (n < 0).long() * half
    n = n.abs()
    max_exact = half // 2
    # float32 log as in the official TUPE code: it decides the bucket edges (distance 16 -> 10)
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + log_ratio * (half - max_exact)).long().clamp(max=half - 1)
    return bucket + torch.where(n < max_exact, n, large)


def alibi_slopes(num_heads: int) -> List[float]:
    """ALiBi's head slopes (Press et al. 2022): ``2^(-8h/n)``, h = 1..n, for n a power of 2; otherwise those
    of the closest smaller power of 2, then every other slope of twice that number."""
    def power_of_2(n: int) -> List[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_2(num_heads)
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    return power_of_2(closest) + power_of_2(2 * closest)[0::2][: num_heads - closest]


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """Fixed sin/cos input PE: ``PE[p, 2i] = sin(p / base^(2i/d))``, ``PE[p, 2i+1] = cos(...)`` (float64 math)."""
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table.float()


class TupePositions(nn.Module):
    """The content-free positional term, computed once per forward and shared by all layers.

    Returns ``(bias, query, key)``: bias ``(H, T, T)`` (``(L, H, T, T)`` for the learned prior) or
    None; query/key ``(H, T, dh)`` for BERT-Ad (added to every layer's content q/k) or None.
    """

    def __init__(self, config: TupeConfig):
        super().__init__()
        c = config
        d, self.num_heads = c.hidden_size, c.num_attention_heads
        self.head_dim = d // c.num_attention_heads
        self.max_positions = c.max_position_embeddings
        self.untied_pos, self.untie_cls, self.rel_pos = c.untied_pos, c.untie_cls, c.rel_pos
        self.mixed_terms, self.distance_prior = c.pos_mixed_terms, c.distance_prior
        self.alibi = getattr(c, "alibi", False)
        self.rel_pos_bins, self.max_rel_pos = c.rel_pos_bins, c.max_rel_pos
        self.scaling = (self.head_dim * c.attn_scale_factor) ** -0.5
        if self.untied_pos or self.mixed_terms:
            self.pos = nn.Embedding(self.max_positions + 1, d)  # token i uses row i + 1, row 0 is [CLS]'s
            self.pos_ln = nn.LayerNorm(d, eps=c.layer_norm_eps)
            self.pos_q_linear = nn.Linear(d, d)
            self.pos_k_linear = nn.Linear(d, d)
        if self.rel_pos:
            self.relative_attention_bias = nn.Embedding(self.rel_pos_bins + 1, self.num_heads)
        if self.distance_prior == "learned_gaussian":  # one scalar per layer, head and distance
            self.distance_bias = nn.Parameter(torch.zeros(c.num_hidden_layers, self.num_heads, self.max_positions))

    def forward(self, T: int, device: torch.device) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        if T > self.max_positions:
            raise ValueError(f"sequence of {T} tokens is longer than the model's {self.max_positions} positions")
        H, dh = self.num_heads, self.head_dim
        idx = torch.arange(T, device=device)
        relative = idx[None, :] - idx[:, None]  # (T, T) = j - i
        bias = None
        if self.untied_pos or self.mixed_terms:
            p = self.pos_ln(self.pos.weight[: T + 1])  # (T+1, d)
            q = self.pos_q_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            k = self.pos_k_linear(p).view(T + 1, H, dh).transpose(0, 1)  # (H, T+1, dh)
            if self.mixed_terms:  # BERT-Ad: q += p U^Q, k += p U^K in every layer
                return None, q[:, 1:], k[:, 1:]
            abs_term = torch.bmm(q * self.scaling, k.transpose(1, 2))  # (H, T+1, T+1)
            bias = abs_term[:, 1:, 1:]
            if self.untie_cls:
                theta1 = abs_term[:, 0, 0].view(H, 1, 1)  # [CLS] -> all (row 0, incl. [0, 0])
                theta2 = abs_term[:, 1, 1].view(H, 1, 1)  # others -> [CLS] (column 0)
                bias = torch.where((idx == 0).view(1, 1, T), theta2, bias)
                bias = torch.where((idx == 0).view(1, T, 1), theta1, bias)  # row last: [0,0] = theta1
        if self.rel_pos:
            bucket = relative_position_bucket(relative, self.rel_pos_bins, self.max_rel_pos)  # (T, T)
            if self.untie_cls:
                bucket[:, 0] = self.rel_pos_bins  # others -> [CLS]: the extra bucket
                bucket[0, :] = self.rel_pos_bins // 2  # [CLS] -> all: the bucket no pair uses
            rel = self.relative_attention_bias(bucket).permute(2, 0, 1)  # (H, T, T), not scaled
            bias = rel if bias is None else bias + rel
        if self.distance_prior == "gaussian":
            # softmax over all max_positions keys (rows do not depend on the batch's padding)
            keys = torch.arange(self.max_positions, device=device, dtype=torch.float64)
            prior = torch.softmax(-0.5 * (keys[None, :] - idx[:, None].double()) ** 2, dim=-1).float()
            bias = prior[:, :T].expand(H, T, T)
        elif self.distance_prior == "learned_gaussian":
            bias = self.distance_bias[:, :, relative.abs()]  # (L, H, T, T)
        if self.alibi:  # -m_h |j - i|, bidirectional
            slopes = torch.tensor(alibi_slopes(H), device=device).view(H, 1, 1)
            bias = -slopes * relative.abs()  # (H, T, T)
        return bias, None, None


class TupeSelfAttention(nn.Module):
    """``softmax(q k^T * (scale_factor * dh)^-0.5 + mask) v`` through scaled_dot_product_attention."""

    def __init__(self, config: TupeConfig):
        super().__init__()
        d = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, d // config.num_attention_heads
        self.scaling = (self.head_dim * config.attn_scale_factor) ** -0.5
        self.dropout_p = config.attention_probs_dropout_prob
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dh)

    def forward(self, x: Tensor, mask: Optional[Tensor], pos_query: Optional[Tensor], pos_key: Optional[Tensor]) -> Tensor:
        B, T, C = x.shape
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        if pos_query is not None:
            q, k = q + pos_query.unsqueeze(0), k + pos_key.unsqueeze(0)
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0, scale=self.scaling
        )
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C))


class TupeLayer(nn.Module):
    """fairseq's TransformerEncoderLayer (Post-LN unless ``normalize_before``)."""

    def __init__(self, config: TupeConfig):
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.normalize_before = config.normalize_before
        self.self_attn = TupeSelfAttention(config)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, config.intermediate_size), nn.Linear(config.intermediate_size, d)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor, mask: Optional[Tensor], pos_query: Optional[Tensor], pos_key: Optional[Tensor]) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, mask, pos_query, pos_key))
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
        """transformers' default init, for weights the export does not hold (e.g. a new classifier)."""
        super()._init_weights(module)
        if isinstance(module, TupeLMHead):
            init.zeros_(module.bias)
        elif isinstance(module, TupePositions) and module.distance_prior == "learned_gaussian":
            init.zeros_(module.distance_bias)


class TupeModel(TupePreTrainedModel):
    """The encoder: ``last_hidden_state`` equals fairseq's ``extract_features`` (B, T, C)."""

    # one model.safetensors holds the encoder and both heads; each class takes what it has
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\.", r"^classifier\."]

    def __init__(self, config: TupeConfig):
        super().__init__(config)
        d, pad = config.hidden_size, config.pad_token_id
        self.padding_idx = pad
        self.embed_scale = config.embed_scale
        self.embed_tokens = nn.Embedding(config.vocab_size, d, padding_idx=pad)
        # fairseq's LearnedPositionalEmbedding: positions pad+1 .. over non-pad tokens, pad -> pad
        self.embed_positions = (
            nn.Embedding(config.max_position_embeddings + pad + 1, d, padding_idx=pad) if config.input_pe else None
        )
        self.sinusoidal_pe = getattr(config, "sinusoidal_pe", False)  # token i gets row i (right padding)
        self.layernorm_embedding = nn.LayerNorm(d, eps=config.layer_norm_eps) if config.layernorm_embedding else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.positions = TupePositions(config)
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
        x = self.embed_scale * self.embed_tokens(input_ids)  # (B, T, C)
        if self.embed_positions is not None:
            k = keep.long()
            pos = torch.cumsum(k, dim=1) * k + self.padding_idx  # fairseq's make_positions
            x = x + self.embed_positions(pos)
        if self.sinusoidal_pe:
            T = input_ids.size(1)
            x = x + sinusoidal_table(self.config.max_position_embeddings, x.size(-1))[:T].to(x)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)
        if has_pads:
            x = x * keep.unsqueeze(-1).type_as(x)

        T = input_ids.size(1)
        bias, pos_query, pos_key = self.positions(T, input_ids.device)
        pad = None
        if has_pads:  # one additive mask: -inf on padded keys (B, 1, 1, T)
            pad = torch.zeros(keep.shape, dtype=x.dtype, device=x.device).masked_fill(~keep, float("-inf"))
            pad = pad[:, None, None, :]

        def mask_of(b: Optional[Tensor]) -> Optional[Tensor]:
            if b is None:
                return pad
            b = b.to(x.dtype).unsqueeze(0)  # (1, H, T, T): shared by the batch, not copied
            return b if pad is None else b + pad

        if bias is not None and bias.dim() == 4:  # the learned prior: one bias per layer
            masks = [mask_of(b) for b in bias]
        else:
            masks = [mask_of(bias)] * len(self.layers)
        hidden_states = [x] if output_hidden_states else None
        for layer, mask in zip(self.layers, masks):
            x = layer(x, mask, pos_query, pos_key)
            if output_hidden_states:
                hidden_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        out = BaseModelOutput(last_hidden_state=x, hidden_states=tuple(hidden_states) if hidden_states else None)
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
