"""Each registered variant's test reference, one file per variant: ``tests/references/<name>.py``, found by name
(``reference(name)``). The tests loop over the registry and ask each variant's file what to expect, so a new
encoding brings its file and no test changes (docs/extending.md).

What a reference file declares (the constants are required, the functions optional):

=================  ================================================================================================
``ENTERS``         how the encoding at the attention enters (``tupe_core.base``: BIAS, QK, ...)
``INPUT``          the class name of the encoding added to the words, or None
``SCALE``          ``s`` of the content logits' ``(s dh)^-0.5``
``BEYOND``         None when positions beyond the trained length keep their meaning (the study's longer inputs);
                   else a phrase its reason contains ("" for any reason)
``ARCH_ONLY``      True when no flag combination reaches it (only ``--arch <name>_*``)
``positional``     ``(model, T, layer) -> (H, T, T)`` float64: the content-free logits of ``layer``, entry by
                   entry from the formula; None when the encoding adds no bias to the logits
``layer0_logits``  ``(model, attn, term, q, k, h) -> (B, T, T)``: layer 0's logits of head ``h`` from its content
                   q, k (B, T, dh) in float64 (``_shared.content_plus`` for a bias); None where the block is not
                   a softmax of logits alone (PAM: tests/test_pam.py)
``differentiable`` ``(positions, T) -> (H, T, T)``: the bias written the obvious way in torch, for its gradients
``position_map``   ``(model, T) -> (H, T, T)``: what ``tupe-pos-maps`` writes, or None where it must refuse
                   (a position signal that depends on content)
``against_source`` ``(encoder)``: asserts its initialisation as its source has it, at BERT-base geometry
=================  ================================================================================================
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import List

import torch

OPTIONAL = ("positional", "layer0_logits", "differentiable", "position_map", "against_source")


def reference(name: str) -> ModuleType:
    """The reference of variant ``name`` (``tests/references/<name>.py``); its optional functions default to
    absent (None)."""
    module = importlib.import_module(f"{__name__}.{name}")
    for attr in OPTIONAL:
        if not hasattr(module, attr):
            setattr(module, attr, None)
    return module


def names() -> List[str]:
    """Every variant with a reference file."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def having(attr: str) -> List[str]:
    """The variants whose reference declares ``attr`` (one of ``OPTIONAL``)."""
    return [name for name in names() if getattr(reference(name), attr) is not None]


def layer0_reference_weights(model, name: str, x_tokens: torch.Tensor) -> torch.Tensor:
    """(B, H, T, T): softmax over keys of layer 0's logits as ``name``'s reference computes them, head by head."""
    enc = model.encoder.sentence_encoder
    attn = enc.layers[0].self_attn
    layer0_logits = reference(name).layer0_logits
    with torch.no_grad():
        x, _ = enc.forward_embedding(x_tokens)  # (B, T, C)
        T = x.size(1)
        H, dh = attn.num_heads, attn.head_dim
        q, k = attn.q_proj(x).double(), attn.k_proj(x).double()
        term = enc.positions(T)
        out = torch.zeros(x.size(0), H, T, T, dtype=torch.float64)
        for h in range(H):
            s = slice(h * dh, (h + 1) * dh)
            out[:, h] = torch.softmax(layer0_logits(model, attn, term, q[..., s], k[..., s], h), dim=-1)
    return out
