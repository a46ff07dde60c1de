"""What the sections watch while a model or a kernel runs: which SDPA kernel a call took (read once, here, from
the profiler), what SDPA was handed, which attention path the plugin's blocks took; and the two settings a
section forces for a while (a path on every block, the masks' CUDA alignment on CPU), each undone on leaving."""
from __future__ import annotations

import contextlib
from typing import Callable, List, Optional, Tuple

import torch

# ``F.scaled_dot_product_attention`` dispatches to one of these ATen ops; the profiler names the one taken.
SDPA_BACKENDS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash (CPU)"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_scaled_dot_product_efficient_attention", "memory-efficient"),
    ("_scaled_dot_product_cudnn_attention", "cuDNN"),
    ("_scaled_dot_product_attention_math", "math"),
    ("_scaled_dot_product_fused_attention_overrideable", "fused (other)"),
)


def sdpa_backends(step: Callable[[], object]) -> str:
    """The SDPA kernels ``step()`` dispatched to (its forward and backward), by the ATen ops the profiler saw,
    in ``SDPA_BACKENDS``' order; "none" if it called none."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = {e.key for e in prof.key_averages()}
    return ", ".join(label for op, label in SDPA_BACKENDS if f"aten::{op}" in names) or "none"


@contextlib.contextmanager
def sdpa_calls():
    """Every call of ``F.scaled_dot_product_attention`` while open, as (q dtype, mask or None)."""
    import torch.nn.functional as F

    seen: List[Tuple[torch.dtype, Optional[torch.Tensor]]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        seen.append((q.dtype, attn_mask))
        return real(q, k, v, attn_mask=attn_mask, **kwargs)

    F.scaled_dot_product_attention = spy
    try:
        yield seen
    finally:
        F.scaled_dot_product_attention = real


def masks_ok(seen) -> Tuple[bool, bool]:
    """(every mask in q's dtype, every mask with all strides but the last a multiple of 8 and the last 1)."""
    masks = [(q_dtype, m) for q_dtype, m in seen if m is not None]
    return (all(m.dtype == q for q, m in masks),
            all(m.stride(-1) == 1 and all(st % 8 == 0 for st in m.stride()[:-1]) for _, m in masks))


@contextlib.contextmanager
def attention_paths_taken():
    """The attention paths (``attend``'s ``attention_path``) of the plugin's blocks while open; fairseq's own
    RoBERTa takes none of them."""
    from tupe_core import attention

    seen: List[str] = []
    real = attention.attend

    def spy(q, k, v, mask, scaling, dropout, attention_path, *rest, **options):
        seen.append(attention_path)
        return real(q, k, v, mask, scaling, dropout, attention_path, *rest, **options)

    attention.attend = spy
    try:
        yield seen
    finally:
        attention.attend = real


@contextlib.contextmanager
def forced_path(model, path: str):
    """Every attention block of ``model`` (an ELECTRA's generator and discriminator too) on ``path`` while open."""
    blocks = [m for m in model.modules() if hasattr(m, "attention_path")]
    before = [m.attention_path for m in blocks]
    for m in blocks:
        m.attention_path = path
    try:
        yield
    finally:
        for m, old in zip(blocks, before):
            m.attention_path = old


@contextlib.contextmanager
def masks_aligned_on(device: str):
    """The masks padded to SDPA's stride rule on ``device`` as on CUDA while open (the dry run's sdpa section on
    CPU, as tests/test_attention_paths.py does)."""
    from tupe_core import masks

    added = device not in masks.ALIGNED_DEVICES
    masks.ALIGNED_DEVICES.add(device)
    try:
        yield
    finally:
        if added:
            masks.ALIGNED_DEVICES.discard(device)
