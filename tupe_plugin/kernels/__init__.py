"""Fused attention kernels (plain torch, triton and FlexAttention; no fairseq import): ``triton_attention``
(``biased_attention``) and ``flex_attention`` (``flex_biased_attention``)."""
