"""Fused attention kernels (plain torch, triton and FlexAttention): ``triton_attention`` (``biased_attention``,
the ``triton`` path of ``attend``), ``flex_attention`` (``flex_biased_attention``, the ``flex`` path) and
``rotary`` (RoPE's rotation on CUDA). ``attend.fused_kernels`` imports this package on first use: each module
imports triton where it is installed (and triton reads ``TRITON_INTERPRET`` when it is first imported)."""
from . import flex_attention, rotary, triton_attention  # noqa: F401
