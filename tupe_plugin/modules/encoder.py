"""fairseq's Transformer encoder with the variant's positional encodings: the one at the input as
``embed_positions``, the one at the attention as ``positions`` (computed once per forward, fed to every layer).
The forward itself is ``tupe_core/encoder_stack.py``, shared with the exported model."""
from __future__ import annotations

import logging
from typing import Dict, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.quant_noise import quant_noise
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor, nn

from tupe_core.attend import Dropout
from tupe_core.attention import SelfAttention
from tupe_core.base import PositionalTerm
from tupe_core.encoder_stack import Padding, check_padding, input_positions, layer_forward, run_layers
from tupe_core.record import PositionalVariant
from tupe_core.registry import attention_block, build, left_padding

RIGHT_PADDING = "pad on the right, as fairseq's masked_lm and sentence_prediction tasks do (RightPadDataset)"
logger = logging.getLogger(__name__)


def fairseq_block(block: nn.Module, q_noise: float, qn_block_size: int) -> nn.Module:
    """``block`` (plain torch) with fairseq's parts, in place: ``FairseqDropout`` for each ``Dropout`` (fairseq's
    ``--retain-dropout`` reaches it) and ``quant_noise`` on each ``nn.Linear`` (``--quant-noise-pq``; without
    it, nothing)."""
    for name, child in list(block.named_children()):
        if isinstance(child, Dropout):
            setattr(block, name, FairseqDropout(child.p, module_name=type(block).__name__))
        elif isinstance(child, nn.Linear):
            quant_noise(child, q_noise, qn_block_size)  # registers its hook on child itself
    return block


class TupeEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer (Post-LN by default) whose attention block is the variant's
    (``PositionalEncoding.attention_block``)."""

    def __init__(self, cfg: TransformerConfig, variant: PositionalVariant, attention_path: str, max_positions: int):
        self.variant, self.attention_path, self.max_positions = variant, attention_path, max_positions
        super().__init__(cfg)  # calls build_self_attention

    def build_self_attention(self, embed_dim: int, cfg: TransformerConfig) -> SelfAttention:
        """The variant's block with fairseq's dropout and quant-noise."""
        block = attention_block(self.variant, embed_dim, cfg.encoder.attention_heads, cfg.attention_dropout,
                                self.attention_path, self.max_positions)
        return fairseq_block(block, self.quant_noise, self.quant_noise_block_size)

    def forward(self, x: Tensor, mask: Optional[Tensor], positions: PositionalTerm,
                key_padding_mask: Optional[Tensor] = None) -> Tensor:
        return layer_forward(self, x, mask, positions, key_padding_mask)


class TupeTransformerEncoder(TransformerEncoder):
    """The encoder of ``tupe_roberta``, built for one ``PositionalVariant`` (tupe_core/record.py)."""

    def __init__(self, args, dictionary, embed_tokens, variant: PositionalVariant):
        self.variant = variant  # read by build_encoder_layer during super().__init__
        super().__init__(args, dictionary, embed_tokens)  # builds no embed_positions (no_token_positional_embeddings)
        self.embed_positions, self.positions = build(
            variant, args.encoder_embed_dim, args.encoder_attention_heads, args.max_positions, args.encoder_layers,
            padding_idx=self.padding_idx)
        self.left_padding = left_padding(variant)  # AS_IS, POSITIONS or REFUSED (tupe_core/base.py)
        self.layers_compiled = False  # --compile-layers: at the first forward in training mode

    def build_encoder_layer(self, cfg):
        checkpoint = cfg.checkpoint_activations
        layer = TupeEncoderLayer(
            TransformerConfig.from_namespace(cfg), self.variant, self.args.tupe_attention, self.args.max_positions
        )
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)

    def compile_layers(self) -> None:
        """``torch.compile`` every layer in place (``nn.Module.compile``: parameter names and the state_dict stay as
        they are; shapes become dynamic after a first recompilation)."""
        for layer in nn.ModuleList.__iter__(self.layers):  # all of them, also those LayerDrop skips this time
            layer.compile()
        self.layers_compiled = True

    def has_padding(self, padding_mask: Tensor) -> Padding:
        """The (B, T) padding mask's ``Padding`` (True at pads; one host wait on a GPU): whether it has any, and each
        token's position where the batch is left-padded and the variant reads positions; refuses left padding where
        an encoding of the variant declares it cannot take it."""
        return check_padding(padding_mask, self.left_padding, f"positional variant '{self.variant.name}'",
                             RIGHT_PADDING)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, padding: Optional[Padding] = None):
        """fairseq's forward; ``padding``: :meth:`has_padding` of this batch's padding, when the caller knows
        it already (ELECTRA's two encoders read one batch layout: one host wait instead of two)."""
        if self.training and not self.layers_compiled and getattr(self.args, "compile_layers", False):
            self.compile_layers()
            logger.info(f"--compile-layers: the {len(self.layers)} layers of a {self.args.encoder_embed_dim}-wide "
                        "encoder are torch.compile'd (the first steps compile)")
        return self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings, padding)

    # Restates fairseq 0.12.3 (the ve-fairseq 0.12.3 wheel) TransformerEncoderBase.forward_embedding; the test as
    # below. Changed: the encoding at the input gets each token's position in a left-padded batch (position_ids).
    def forward_embedding(self, src_tokens: Tensor, token_embedding: Optional[Tensor] = None,
                          position_ids: Optional[Tensor] = None):
        if token_embedding is None:
            token_embedding = self.embed_tokens(src_tokens)
        x = embed = self.embed_scale * token_embedding
        if self.embed_positions is not None:
            x = embed + input_positions(self.embed_positions, src_tokens, position_ids)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x, embed

    # Restates fairseq 0.12.3 (the ve-fairseq 0.12.3 wheel) TransformerEncoderBase.forward_scriptable;
    # tests/test_restated_code.py fails when fairseq's source changes, and compares the two on one input.
    # Changed: the left-padding rule (or the caller's ``padding``), and the layers run by
    # tupe_core/encoder_stack.run_layers (the positional term and the masks once per forward); fc_results stay empty.
    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
        padding: Optional[Padding] = None,
    ):
        padding_mask = src_tokens.eq(self.padding_idx)  # (B, T)
        if padding is None:
            padding = self.has_padding(padding_mask)
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings, padding.position_ids)  # (B, T, C)
        if padding.has_pads:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # (T, B, C)
        x, encoder_states = run_layers(x, padding_mask if padding.has_pads else None, self.positions, self.layers,
                                       self._layer_index(), keep_states=return_all_hiddens,
                                       position_ids=padding.position_ids)
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
