"""Configuration of a TUPE-family encoder exported from fairseq by ``tupe-export-hf``.

Written by the tupe_plugin project (not copied from transformers). The positional fields say how
positions enter the encoder; they are the ``PositionalVariant`` of the fairseq checkpoint
(``tupe_plugin/models/variants.py``). The math is described in ``docs/hf_export.md`` of tupe_plugin.
"""
from transformers import PretrainedConfig


class TupeConfig(PretrainedConfig):
    model_type = "tupe"

    def __init__(
        self,
        vocab_size: int = 32773,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        activation_dropout: float = 0.0,
        max_position_embeddings: int = 512,
        layer_norm_eps: float = 1e-5,
        normalize_before: bool = False,
        layernorm_embedding: bool = True,
        embed_scale: float = 1.0,
        # positional variant (fairseq flags of tupe_roberta)
        tupe_variant: str = "tupe_r",
        input_pe: bool = False,
        untied_pos: bool = True,
        untie_cls: bool = True,
        rel_pos: bool = True,
        pos_mixed_terms: bool = False,
        rel_pos_bins: int = 32,
        max_rel_pos: int = 128,
        distance_prior: str = "none",
        sinusoidal_pe: bool = False,
        alibi: bool = False,
        attn_scale_factor: float = 2.0,
        # heads
        lm_head_act: str = "gelu",
        classifier_act: str = "tanh",
        classifier_dropout: float = 0.1,
        classifier_inner_dim: int = 768,
        classification_head_style: str = "roberta",
        pad_token_id: int = 1,
        bos_token_id: int = 0,
        eos_token_id: int = 2,
        mask_token_id: int = None,
        **kwargs,
    ):
        kwargs.setdefault("tie_word_embeddings", False)  # the LM head reads embed_tokens itself
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.activation_dropout = activation_dropout
        self.max_position_embeddings = max_position_embeddings
        self.layer_norm_eps = layer_norm_eps
        self.normalize_before = normalize_before
        self.layernorm_embedding = layernorm_embedding
        self.embed_scale = embed_scale
        self.tupe_variant = tupe_variant
        self.input_pe = input_pe
        self.untied_pos = untied_pos
        self.untie_cls = untie_cls
        self.rel_pos = rel_pos
        self.pos_mixed_terms = pos_mixed_terms
        self.rel_pos_bins = rel_pos_bins
        self.max_rel_pos = max_rel_pos
        self.distance_prior = distance_prior
        self.sinusoidal_pe = sinusoidal_pe
        self.alibi = alibi
        self.attn_scale_factor = attn_scale_factor
        self.lm_head_act = lm_head_act
        self.classifier_act = classifier_act
        self.classifier_dropout = classifier_dropout
        self.classifier_inner_dim = classifier_inner_dim
        self.classification_head_style = classification_head_style
        self.mask_token_id = mask_token_id
