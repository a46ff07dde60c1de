"""Configuration of a TUPE-family encoder exported from fairseq by ``tupe-export-hf``.

Written by the tupe_plugin project (not copied from transformers). ``positional_encodings`` says how positions
enter the encoder: the checkpoint's variant record (``tupe_core``'s ``record.py``, shipped next to this file), a list
with one entry per encoding, ``{"encoding": name, **its options}``, so an encoding or an option added to the plugin is
exported with no change here. A config written before it (one key per field of the old record) is read through the
frozen ``legacy_record.py``. The math is described in ``docs/hf_export.md`` of tupe_plugin.
"""
from transformers import PretrainedConfig

from tupe_core.encoder_stack import DEFAULT_HEAD_STYLE
from tupe_core.legacy_record import NAMES as OLD_FIELDS
from tupe_core.record import PositionalVariant
from tupe_core.registry import from_config


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
        tupe_variant: str = "tupe_r",  # the variant's registered name ("custom" if none), for people
        positional_encodings: list = None,  # the variant record's entries (None: an older export's keys, or tupe_r)
        # heads
        lm_head_act: str = "gelu",
        classifier_act: str = "tanh",
        classifier_dropout: float = 0.1,
        classifier_inner_dim: int = 768,
        classification_head_style: str = DEFAULT_HEAD_STYLE,
        pad_token_id: int = 1,
        bos_token_id: int = 0,
        eos_token_id: int = 2,
        mask_token_id: int = None,
        **kwargs,
    ):
        # an export written before positional_encodings: one key per field of the old record (a key it lacks takes
        # the field's legacy value, else the value of the variant tupe_variant names, else the field's default)
        old = {name: kwargs.pop(name) for name in OLD_FIELDS if name in kwargs}
        variant = from_config({"positional_encodings": positional_encodings, **old}, tupe_variant)
        self.positional_encodings = variant.entries()
        kwargs.pop("attn_scale_factor", None)  # written by older exports; derived from the variant
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
        self.lm_head_act = lm_head_act
        self.classifier_act = classifier_act
        self.classifier_dropout = classifier_dropout
        self.classifier_inner_dim = classifier_inner_dim
        self.classification_head_style = classification_head_style
        self.mask_token_id = mask_token_id

    @property
    def positional_variant(self) -> PositionalVariant:
        """The checkpoint's ``PositionalVariant``, from ``positional_encodings``."""
        return from_config({"positional_encodings": self.positional_encodings})
