"""Build tiny ``tupe_roberta`` models in-process (no CLI) for the math tests."""
from __future__ import annotations

import argparse

import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import tupe_plugin  # noqa: F401  (registers the archs)
from tupe_core.registry import VARIANTS
from tupe_plugin.build_task import DictionaryTask, numbered_dictionary


def build(arch: str, max_positions: int = 64, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    args = argparse.Namespace(arch=arch, max_positions=max_positions, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    task = DictionaryTask(numbered_dictionary(4 + 40), max_positions)  # 4 specials + 40 words
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return model.eval()


def tokens(batch: int, length: int, seed: int = 0, vocab: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, vocab + 4, (batch, length), generator=g)
    x[:, 0] = 0  # <s>, the [CLS] whose row/column TUPE unties
    return x


# The one left-padding rule of the fairseq model and the exported one (tupe_core/encoder_stack.check_padding), read
# from each encoding's declaration (left_padding): a term of j - i only, or positions that count real tokens, runs
# as it is (AS_IS); a term of positions (TUPE's absolute terms and [CLS] untie, sinusoids, a prior normalised per
# row) gets each token's position (POSITIONS); either way the real tokens' features equal the sequence's alone.
# Every registered variant takes left-padded input; an encoding that declares REFUSED is refused
# (test_left_padding.py's own toy declaration).
LEFT_PADDED = list(VARIANTS)
PAD = 1  # fairseq's padding index in the test dictionary


def left_padded(x: torch.Tensor, pads: int) -> torch.Tensor:
    """Row 0 of ``x`` shortened by ``pads`` tokens and padded on the left; the other rows as they are."""
    y = x.clone()
    y[0] = torch.cat([torch.full((pads,), PAD), x[0, : x.size(1) - pads]])
    return y
