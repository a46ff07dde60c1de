"""The environment section: versions (Python, torch, CUDA, cuDNN, Triton, fairseq), where fairseq and the plugin come
from, the card and its peak bf16 rate, and what the install from the wheel folder said."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Optional

import torch

from .report import Result
from .settings import Settings

# Peak dense bf16 tensor-core rate (TFLOP/s, no sparsity) by the name torch reports; NVIDIA's data sheets. The
# first key the name contains wins: "H100 NVL" and "H100 PCIe" before the SXM5's plain "H100" ("H100 80GB HBM3").
PEAK_BF16_TFLOPS = (
    ("H200", 989.4), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.4),
    ("A100", 312.0),
)


def card_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()


def peak_tflops(name: str, override: Optional[float]) -> Optional[float]:
    """The card's peak dense bf16 TFLOP/s: ``override``, else by name (``PEAK_BF16_TFLOPS``), else None."""
    if override:
        return override
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)


def triton_version() -> str:
    """The Triton the machine's torch brings (bench/triton_toolchain.txt names it for bench/kernel_sass.py)."""
    try:
        import triton
    except ImportError:
        return "not installed"
    return triton.__version__


def run(r: Result, s: Settings, args) -> None:
    import fairseq

    import tupe_plugin
    from tupe_core.registry import VARIANTS

    cuda = s.device == "cuda"
    name = card_name(s.device)
    peak = peak_tflops(name, args.peak_tflops)
    facts = {
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda or "none",
        "cudnn": str(torch.backends.cudnn.version()) if cuda else "none", "triton": triton_version(), "device": name,
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else "none",
        "fairseq": fairseq.__version__, "fairseq_from": str(Path(fairseq.__file__).parent.parent),
        "tupe_plugin_from": str(Path(tupe_plugin.__file__).parent.parent), "variants": str(len(VARIANTS)),
        "peak_bf16_tflops": f"{peak:g}" if peak else "unknown (give --peak-tflops)",
    }
    r.record("machine", "", **facts)
    r.say("| what | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in facts.items()))
    if args.install_log:
        r.say("\nInstall from the wheel folder:\n\n```\n" + Path(args.install_log).read_text(encoding="utf-8").strip()
              + "\n```")
