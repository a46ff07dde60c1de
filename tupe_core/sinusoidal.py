"""Vaswani et al.'s fixed sin/cos positions at the input (``sinusoidal``).

``PE[t, 2i] = sin(t / 10000^(2i/d))``, ``PE[t, 2i+1] = cos(t / 10000^(2i/d))``, token ``t`` = 0 for ``<s>``, added
to the word embeddings. Scale: Vaswani et al. add the table (RMS 1/sqrt(2)) to words drawn from N(0, 1/d) and
multiplied by sqrt(d) (RMS 1); RoBERTa's words are N(0, 0.02) and not multiplied, so the table as it is
outweighs them 35:1. ``sinusoidal_scaled`` multiplies it by 0.02: positions and words then stand 0.71:1 at
initialisation, Vaswani's ratio at every width, and the embedding LayerNorm removes the common factor
(docs/positional_encodings.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch
from torch import Tensor

from .base import BERT_INIT_STD, POSITIONS, InputEncoding
from .options import Flag, option


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al.'s PE: ``PE[p, 2i] = sin(p / base^(2i/d))``, ``PE[p, 2i+1] = cos(p / base^(2i/d))``."""
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(d/2),)
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table.float()


@dataclass(frozen=True)
class SinusoidalOptions:
    # Records before this option hold an unscaled sinusoidal table (positions 35:1 over words at the embedding
    # LayerNorm): they decode as --no-sinusoidal-scaled (legacy_record.py), so such a checkpoint loads as it was trained.
    sinusoidal_scaled: bool = option(True, "with --sinusoidal-pe: the table times the word embeddings' init std 0.02, "
                                           "Vaswani's word:position ratio (--no-sinusoidal-scaled: the unscaled table "
                                           "of checkpoints written before 2026-11-26)")


class Sinusoidal(InputEncoding):
    """``--sinusoidal-pe``: token ``i`` (0 = [CLS]) gets row ``i``, in a left-padded batch the row of its position
    (``InputEncoding.forward``). No parameters, nothing in the state dict."""

    left_padding = POSITIONS
    name = "sinusoidal"
    Options = SinusoidalOptions
    flags = (Flag("sinusoidal_pe", False, "add fixed sin/cos PE to word embeddings (Vaswani)"),)
    selected_by = {"sinusoidal_pe": True}

    def fixed_tables(self) -> Dict[str, Tensor]:
        table = sinusoidal_table(self.max_positions, self.embed_dim)
        return {"table": table * BERT_INIT_STD if self.options.sinusoidal_scaled else table}

    def rows(self, seq_len: int) -> Tensor:
        return self.table[:seq_len]  # right padding keeps 0..len-1
