"""The one place where a variant's ``attention_block`` picks the attention block of every layer: the fairseq
layer (``modules/encoder.py``) and the model exported by ``tupe-export-hf`` both build theirs here.

Plain torch (no fairseq import): ``tupe-export-hf`` ships this file into the exported model folder.
"""
from __future__ import annotations

from .attention import SelfAttention
from .disentangled import DisentangledSelfAttention
from .pam import PamSelfAttention
from .rotary import RotarySelfAttention


def build_attention(variant, embed_dim: int, num_heads: int, dropout: float, attention_path: str,
                    max_positions: int) -> SelfAttention:
    """The attention block of ``variant`` (a ``PositionalVariant``); every block has
    ``SelfAttention.forward``'s signature. ``attention_path``: ``--tupe-attention``'s value."""
    block = variant.attention_block
    kwargs = dict(dropout=dropout, scale_factor=variant.attn_scale_factor, attention_path=attention_path)
    if block == "rope":
        return RotarySelfAttention(embed_dim, num_heads, **kwargs)
    if block == "deberta":
        return DisentangledSelfAttention(embed_dim, num_heads, **kwargs)
    if block.startswith("pam_"):  # "pam_concat" -> mode "concat"
        return PamSelfAttention(embed_dim, num_heads, mode=block[len("pam_"):], max_positions=max_positions, **kwargs)
    if block != "standard":
        raise ValueError(f"no attention block for --attention-block {block!r} (modules/blocks.py)")
    return SelfAttention(embed_dim, num_heads, **kwargs)
