"""The one attention core of every block, ``attend``: ``dropout(softmax(q k^T * scaling + bias + padding)) v`` on
the attention path that ``--tupe-attention`` sets, one row of the table ``PATHS`` (name -> function, and what
it can do): ``sdpa`` (``F.scaled_dot_product_attention``), ``explicit`` (the plain ops; returns the weights),
``triton`` (our fused kernel for a learned bias, ``triton_attention.py``), ``flex`` (FlexAttention, no dropout,
``flex_attention.py``), or ``auto`` (``choose_attention_path``, per forward). The paths and when ``auto`` takes
which: ``docs/gpu.md``.

The fairseq layer swaps fairseq's ``FairseqDropout`` in for ``Dropout`` (``modules/encoder.py``: ``fairseq_block``).
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set, Tuple, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import AttentionMask, sdpa_layout

T = TypeVar("T")


class Dropout(nn.Module):
    """Dropout with ``FairseqDropout``'s interface (``p``, ``apply_during_inference``), in plain torch."""

    def __init__(self, p: float):
        super().__init__()
        self.p, self.apply_during_inference = p, False

    def forward(self, x: Tensor) -> Tensor:
        if self.p > 0 and (self.training or self.apply_during_inference):
            return F.dropout(x, p=self.p, training=True)
        return x


OLD_PATH_NAMES = {"reference": "explicit"}  # older args (checkpoints, scripts) still load
logger = logging.getLogger(__name__)
_SAID: Set[Tuple[str, str]] = set()  # (path, why) already logged by this process


@dataclass(frozen=True)
class TritonConfig:
    """What ``auto`` checks our Triton kernel for, and switches to SDPA: the device's type (every data-parallel
    rank names it alike), the compute dtype, the bias kind and whether attention dropout is on."""

    device: str  # "cuda"
    dtype: str  # "bfloat16", "float16"
    bias: str  # "shared" (H, T, T) or "per-sequence" (B, H, T, T)
    dropout: bool

    def __str__(self) -> str:
        return f"{self.device} {self.dtype}, {self.bias} bias, dropout {'on' if self.dropout else 'off'}"


def triton_config(device: torch.device, dtype: torch.dtype, per_sequence: bool, dropout: bool) -> TritonConfig:
    return TritonConfig(torch.device(device).type, str(dtype).replace("torch.", ""),
                        "per-sequence" if per_sequence else "shared", bool(dropout))


# Every configuration ``auto`` can take the kernel for, in one order: the flags the data-parallel ranks agree on.
AUTO_CONFIGS = tuple(TritonConfig("cuda", dtype, bias, dropout) for dtype in ("float16", "bfloat16")
                     for bias in ("shared", "per-sequence") for dropout in (False, True))
_TRITON_FAILURE: Dict[TritonConfig, Optional[str]] = {}  # config -> why it runs on SDPA (None: the kernel's checked)
_FINITE_SEEN: Set[Tuple] = set()  # (config, B, T, padded): the kernel's output was finite there once


def check_attention_path(attention_path: str) -> str:
    """``attention_path`` if it is one of ``ATTENTION_PATHS`` (an older name becomes its new one), else an
    error naming ``--tupe-attention``."""
    attention_path = OLD_PATH_NAMES.get(attention_path, attention_path)
    if attention_path not in ATTENTION_PATHS:
        raise ValueError(f"--tupe-attention must be one of {ATTENTION_PATHS}, got {attention_path!r}")
    return attention_path


def fused_kernels(name: str):
    """The module of a fused kernel (``triton_attention``, ``flex_attention``, ``rotary``) of ``tupe_core.kernels``,
    imported on first use; None where the package is absent (an exported model folder: tupe-export-hf ships the
    modules its model code imports, not this package)."""
    try:
        from . import kernels  # not `from .kernels import x`: transformers would look for kernels.py to copy
    except ImportError:
        return None
    return getattr(kernels, name)


def triton_runs(device: torch.device, head_dim: int = 0) -> bool:
    """Whether our Triton kernel runs on ``device`` (triton installed; CUDA, or Triton's interpreter) for heads
    of ``head_dim`` (its tiles are sized for at most ``MAX_HEAD_DIM``)."""
    kernels = fused_kernels("triton_attention")
    return kernels is not None and kernels.triton_available(device) and head_dim <= kernels.MAX_HEAD_DIM


_DISABLED: Dict[Callable, Callable] = {}  # run_eagerly's functions, each disabled (torch.compiler.disable) once


def run_eagerly(fn: Callable[..., T]) -> Callable[..., T]:
    """``torch.compiler.disable(fn)`` without importing ``torch._dynamo`` when tupe_core is imported (about 1 s,
    which every process that read the registry paid: pretrain.sh's launcher, the exports; a training's torch.optim
    imports it anyway): outside a compiled graph ``fn`` runs as it is; traced by torch.compile, its call is a graph
    break and ``fn`` runs eagerly, as the disabled function did."""
    @functools.wraps(fn)
    def call(*args, **kwargs) -> T:
        if not torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        disabled = _DISABLED.get(fn)
        if disabled is None:
            disabled = _DISABLED[fn] = torch.compiler.disable(fn)
        return disabled(*args, **kwargs)

    return call


@run_eagerly  # the check runs eagerly, once, also inside a compiled layer's first forward
def triton_failure(device: torch.device, dtype: torch.dtype, per_sequence: bool = False, dropout: bool = False,
                   like: Optional[Tuple[Tensor, Tensor]] = None) -> Optional[str]:
    """Why our Triton kernel does not run for this configuration (``TritonConfig``): its first-use check failed
    (``triton_attention.self_check``, run once per process and configuration, as training runs it: ``like`` is the
    training call's (q, bias)), or it failed at run time (``triton_or_sdpa``), here or on another rank, or a
    checkpoint recorded so (``take_fallback_record``); None when it passed its check."""
    config = triton_config(device, dtype, per_sequence, dropout)
    if config not in _TRITON_FAILURE:
        kernels = fused_kernels("triton_attention")
        failure = kernels.self_check(device, dtype, per_sequence=per_sequence,
                                     dropout_p=kernels.CHECK_DROPOUT if dropout else 0.0, like=like)
        _TRITON_FAILURE[config] = None if failure is None else f"its first-use check failed ({failure})"
    return _TRITON_FAILURE[config]


def choose_attention_path(device: torch.device, training: bool, dropout: float, dtype: torch.dtype = torch.float32,
                          learned_bias: bool = False, head_dim: int = 64, per_sequence: bool = False,
                          like: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[str, str]:
    """What ``--tupe-attention auto`` takes for one forward, and why:

    * a bias that needs a gradient, fp16/bf16, Triton runs with heads of ``head_dim``: ``triton`` (SDPA would
      take its memory-efficient kernel, 3.4x its cuDNN time without a bias on an H100; docs/gpu.md), once the
      kernel passed its first-use check for this configuration (device, dtype, ``per_sequence`` bias or shared,
      dropout on or off; ``triton_failure``, ``like``: this call's (q, bias)) and has not failed since (else
      ``sdpa``, and why);
    * CPU, training with attention dropout: ``explicit`` (SDPA's fused CPU kernel has no dropout, so SDPA runs
      its unfused math path: the same ops plus a check for fully masked rows);
    * else ``sdpa`` (cuDNN/flash without a bias; fp32 keeps SDPA, whose fp32 matmuls are IEEE where Triton's
      dot products would run in TF32)."""
    if (learned_bias and dtype in (torch.float16, torch.bfloat16) and device.type == "cuda"
            and triton_runs(device, head_dim)):
        on = training and dropout > 0
        failure = triton_failure(device, dtype, per_sequence, on, like)
        if failure is None:
            return "triton", "a learned positional bias in half precision on CUDA"
        return "sdpa", f"not our Triton kernel for {triton_config(device, dtype, per_sequence, on)}: {failure}"
    if device.type == "cpu" and training and dropout > 0:
        return "explicit", "CPU training with attention dropout"
    return "sdpa", "the default"


def switch_to_sdpa(config: TritonConfig, why: str) -> None:
    """Take SDPA for ``config`` for the rest of the process (``auto`` only), and say so once."""
    if _TRITON_FAILURE.get(config) is None:
        _TRITON_FAILURE[config] = why
        logger.warning(f"--tupe-attention auto: SDPA from now on for {config}: {why}")


def fallback_record() -> List[Dict[str, object]]:
    """The configurations this process runs on SDPA although ``auto`` would take our kernel, and why: what a
    checkpoint records (``tupe_plugin``'s model) so that a resumed run takes the same path."""
    return [dict(vars(config), why=why) for config, why in sorted(_TRITON_FAILURE.items(), key=lambda kv: str(kv[0]))
            if why is not None]


def take_fallback_record(record: List[Dict[str, object]], source: str) -> None:
    """Switch to SDPA every configuration of ``record`` (``fallback_record``'s), recorded by ``source``."""
    for entry in record:
        entry = dict(entry)
        why = entry.pop("why")
        switch_to_sdpa(TritonConfig(**entry), f"{source} recorded: {why}")


def fallback_flags(device: torch.device) -> Tensor:
    """(len(AUTO_CONFIGS),) int32 on ``device``: 1 where this process runs that configuration on SDPA (what the
    data-parallel ranks reduce by max to agree: ``take_fallback_flags``)."""
    return torch.tensor([_TRITON_FAILURE.get(c) is not None for c in AUTO_CONFIGS], dtype=torch.int32, device=device)


def take_fallback_flags(flags: Tensor) -> None:
    """Switch to SDPA every configuration flagged (by max over the ranks of ``fallback_flags``)."""
    for config, flag in zip(AUTO_CONFIGS, flags.tolist()):
        if flag:
            switch_to_sdpa(config, "another data-parallel process switched it (its log says why)")


def say_once(path: str, why: str) -> None:
    """Log the path ``auto`` took, once per process and reason."""
    if (path, why) not in _SAID:
        _SAID.add((path, why))
        logger.info(f"--tupe-attention auto: {path} ({why})")


# q, k, v, the layer's mask, the logits' scaling, the dropout probability, the block's dropout -> (out, weights)
Run = Callable[[Tensor, Tensor, Tensor, Optional[AttentionMask], float, float, nn.Module],
               Tuple[Tensor, Optional[Tensor]]]


@dataclass(frozen=True)
class AttentionPath:
    """One value of ``--tupe-attention`` and what it can do."""

    run: Run
    dropout: bool  # applies attention dropout
    weights: bool  # returns the attention probabilities
    fused: bool  # reads the bias and the key padding apart (masks.AttentionMask), from tupe_core.kernels


def _additive(q: Tensor, mask: Optional[AttentionMask]) -> Optional[Tensor]:
    """The mask as one additive (B or 1, H or 1, T, T) tensor in q's dtype (SDPA's and the plain ops' form)."""
    additive = None if mask is None else mask.additive
    if additive is not None and additive.dtype != q.dtype:
        additive = sdpa_layout(additive.to(q.dtype))  # a mask not built in the compute dtype (tests, a caller's)
    return additive


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, p: float,
          dropout: nn.Module) -> Tuple[Tensor, Optional[Tensor]]:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_additive(q, mask), dropout_p=p, scale=scaling), None


def _explicit(q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, p: float,
              dropout: nn.Module) -> Tuple[Tensor, Optional[Tensor]]:
    logits = torch.matmul(q * scaling, k.transpose(-1, -2))  # (B, H, T, T)
    additive = _additive(q, mask)
    if additive is not None:
        logits += additive  # in place (one (B, H, T, T) tensor fewer): matmul's backward does not read its output
    half = logits.dtype in (torch.float16, torch.bfloat16)
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32 if half else None)
    if half:
        weights = weights.to(logits.dtype)
    return torch.matmul(dropout(weights), v), weights  # (B, H, T, dh)


def _kernels(name: str):
    kernels = fused_kernels(f"{name}_attention")
    if kernels is None:
        raise RuntimeError(f"--tupe-attention {name} needs tupe_core's kernels (tupe_core/kernels), which an "
                           "exported model folder does not ship")
    return kernels


def _triton(q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, p: float,
            dropout: nn.Module) -> Tuple[Tensor, Optional[Tensor]]:
    kernels = _kernels("triton")
    bias, pad = (None, None) if mask is None else (mask.kernel_bias(kernels.kernel_layout), mask.key_padding)
    return kernels.biased_attention(q, k, v, bias, pad, scaling, p), None


@run_eagerly  # eager: a failure is caught here, not inside a compiled graph
def triton_or_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, p: float,
                   dropout: nn.Module) -> Tuple[Tensor, Optional[Tensor]]:
    """``auto``'s triton path: our kernel, unless it raises (compile, tune, launch) or, the first time a
    configuration meets a (batch, length, padding), gives a non-finite output where SDPA on the same inputs is
    finite; then SDPA computes this call again (with dropout, a mask drawn anew) and takes the configuration for
    the rest of the process (``switch_to_sdpa``). A failure inside the backward is not caught here."""
    per_sequence = mask is not None and mask.bias is not None and mask.bias.dim() == 4
    config = triton_config(q.device, q.dtype, per_sequence, p > 0)
    if _TRITON_FAILURE.get(config) is not None:
        return _sdpa(q, k, v, mask, scaling, p, dropout)
    shape = (config, q.size(0), q.size(2), mask is not None and mask.key_padding is not None)
    try:
        out, _ = _triton(q, k, v, mask, scaling, p, dropout)
    except Exception as error:  # noqa: BLE001  (whatever the compiler, the tuner or the launch raises)
        why = fused_kernels("triton_attention").one_line(error)
    else:
        if shape in _FINITE_SEEN:  # one host sync per new shape only
            return out, None
        if torch.isfinite(out).all():
            _FINITE_SEEN.add(shape)
            return out, None
        sdpa_out, _ = _sdpa(q, k, v, mask, scaling, p, dropout)
        if not torch.isfinite(sdpa_out).all():
            return out, None  # not the kernel's doing: SDPA's is not finite either
        switch_to_sdpa(config, "its output was not finite where SDPA's is; this call ran again on SDPA"
                       + (" (its dropout mask drawn anew)" if p > 0 else ""))
        return sdpa_out, None
    switch_to_sdpa(config, f"it failed at run time ({why}); this call ran again on SDPA"
                   + (" (its dropout mask drawn anew)" if p > 0 else ""))
    return _sdpa(q, k, v, mask, scaling, p, dropout)


def _flex(q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, p: float,
          dropout: nn.Module) -> Tuple[Tensor, Optional[Tensor]]:
    bias, pad = (None, None) if mask is None else (mask.bias, mask.key_padding)
    return _kernels("flex").flex_biased_attention(q, k, v, bias, pad, scaling, p), None


PATHS: Dict[str, AttentionPath] = {
    "sdpa": AttentionPath(_sdpa, dropout=True, weights=False, fused=False),
    "explicit": AttentionPath(_explicit, dropout=True, weights=True, fused=False),
    "triton": AttentionPath(_triton, dropout=True, weights=False, fused=True),
    "flex": AttentionPath(_flex, dropout=False, weights=False, fused=True),
}
ATTENTION_PATHS = ("auto", *PATHS)  # the values of ``--tupe-attention``
FUSED = tuple(name for name, path in PATHS.items() if path.fused)


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[AttentionMask], scaling: float, dropout: nn.Module,
    attention_path: str, fall_back: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``dropout(softmax(q k^T * scaling + bias + padding)) v``, the one attention core of every block.

    q, k, v: (B, H, T, dh); mask: this layer's ``AttentionMask`` (positional bias and key padding) or None;
    ``dropout``: the block's ``Dropout`` or ``FairseqDropout`` (its ``p`` and whether it applies).
    ``attention_path``: a name of ``PATHS``: ``sdpa`` (``F.scaled_dot_product_attention`` with the additive mask,
    fused kernels where the device has them), ``triton`` (our fused kernel: the bias (H, T, T) for the whole batch
    and the padding apart, dropout inside, the bias gradient summed over the batch inside), ``flex``
    (FlexAttention, the bias a score_mod; no dropout): these return (out, None). ``explicit``: the plain ops,
    returns (out, the (B, H, T, T) probabilities before dropout); under fp16/bf16 the softmax runs in float32 and
    its result goes back to the compute dtype. ``fall_back`` (``auto``'s choice): ``triton`` falls back to SDPA
    where the kernel fails (``triton_or_sdpa``); an explicit ``--tupe-attention triton`` fails loudly.
    """
    path = PATHS.get(attention_path)
    if path is None:
        raise ValueError(f"attention path must be one of {tuple(PATHS)}, got {attention_path!r}")
    p = dropout.p if dropout.training or dropout.apply_during_inference else 0.0
    if fall_back and attention_path == "triton":
        return triton_or_sdpa(q, k, v, mask, scaling, p, dropout)
    return path.run(q, k, v, mask, scaling, p, dropout)
