"""A study's pre-training validation log, written for tests of the report and of ``study.sh --plan``."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def write_valid_log(out: Path, model: str, seed: int, losses: Sequence[float]) -> None:
    """OUT/pretrain/MODEL/seedSEED/train.log with one validation line per loss, at updates 50, 100, ..."""
    d = out / "pretrain" / model / f"seed{seed}"
    d.mkdir(parents=True)
    (d / "train.log").write_text("".join(f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "{u}"}}\n'
                                         for u, loss in zip((50, 100), losses)))
