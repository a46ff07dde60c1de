"""``rotate_qk`` (tupe_core/kernels/rotary.py), RoPE's rotation as a Triton kernel, against the plain-torch
rotation of tupe_core/rope.py in float64: q and k and their gradients, for views laid out as the model's
(time-first projections permuted to (B, H, T, dh)), T not a multiple of the kernel's block, a head size whose half is
not a power of two, and fp16. In Triton's interpreter on CPU, in a fresh process (triton reads TRITON_INTERPRET
when it is first imported); on CUDA, the model's RoPE attention with the kernel equals it without."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from conftest import run

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]')")

COMPARE = r"""
import json, sys, torch
from tupe_core.kernels.rotary import rotate_qk
from tupe_core.rope import Rope, rotate
out = []
for T, dh, dtype in ((20, 16, torch.float32), (7, 6, torch.float32), (33, 64, torch.float16)):
    B, H = 2, 3
    g = torch.Generator().manual_seed(T)
    tables = Rope(Rope.Options(), H * dh, H, 40)
    cos, sin = tables.rope_cos[:T], tables.rope_sin[:T]
    # as the model makes them: (T, B, H * dh) projections viewed as (B, H, T, dh)
    q0, k0 = (torch.randn(T, B, H * dh, generator=g).view(T, B, H, dh).permute(1, 2, 0, 3) for _ in range(2))
    weight = torch.randn(B, H, T, dh, generator=g, dtype=torch.float64)
    q, k = (x.to(dtype, copy=True).requires_grad_() for x in (q0, k0))  # copies keep q0, k0 free of grad
    rq, rk = rotate_qk(q, k, cos, sin)
    ((rq.double() + 2 * rk.double()) * weight).sum().backward()
    qr, kr = (x.double().requires_grad_() for x in (q0, k0))
    want_q, want_k = rotate(qr, cos.double(), sin.double()), rotate(kr, cos.double(), sin.double())
    ((want_q + 2 * want_k) * weight).sum().backward()
    rel = lambda a, b: float((a.double() - b).abs().max() / b.abs().max())
    out.append({"T": T, "dh": dh, "dtype": str(dtype), "q": rel(rq, want_q), "k": rel(rk, want_k),
                "grad_q": rel(q.grad, qr.grad), "grad_k": rel(k.grad, kr.grad), "layout": rq.stride() == q.stride(),
                "out_dtype": str(rq.dtype)})
print(json.dumps(out))
"""


def test_the_kernel_rotates_as_rope_and_its_backward_is_the_transpose(starts_process):
    p = run([sys.executable, "-c", COMPARE], env=dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES=""))
    cases = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(cases) == 3
    for c in cases:
        tol = 1e-6 if c["dtype"] == "torch.float32" else 2e-3
        assert max(c["q"], c["k"], c["grad_q"], c["grad_k"]) <= tol, c
        assert c["layout"] and c["out_dtype"] == c["dtype"], c


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the model takes the kernel on CUDA only)")
def test_cuda_rope_model_with_the_kernel_equals_the_plain_rotation(monkeypatch):
    from model_utils import build, tokens
    from tupe_core import rope

    x = tokens(3, 40).cuda()
    model = build("rope_tiny", max_positions=64, seed=1, dropout=0.0, attention_dropout=0.0).cuda()
    with torch.no_grad():
        fused = model(x, features_only=True)[0]
        monkeypatch.setattr(rope, "fused_kernels", lambda name: None)  # the plain-torch rotation
        plain = model(x, features_only=True)[0]
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
