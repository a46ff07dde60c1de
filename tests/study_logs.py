"""A study's pre-training validation log, written for tests of the report and of ``study.sh --plan``."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence


def finished_log(folder: Path, text: str) -> None:
    """A finished pre-training's folder: its train.log holding ``text``, and the pretrain.done that the study writes
    when the run ended well (the report reads no other run's losses)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(text)
    (folder / "pretrain.done").write_text("")


def write_valid_log(out: Path, model: str, seed: int, losses: Sequence[float]) -> None:
    """OUT/pretrain/MODEL/seedSEED/train.log with one validation line per loss, at updates 50, 100, ..."""
    d = out / "pretrain" / model / f"seed{seed}"
    d.mkdir(parents=True)
    finished_log(d, "".join(f'x | INFO | valid | {{"valid_loss": "{loss}", "valid_num_updates": "{u}"}}\n'
                            for u, loss in zip((50, 100), losses)))
