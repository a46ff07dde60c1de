"""Reading a checkpoint a user named: every check in one place, each refusal one line that names the file and
what to pass instead (docs/troubleshooting.md, "Error messages").

* ``check_file(path)``: the file itself (missing, a folder, empty, text or another format), standard library
  only, so ``tupe_tools.commands`` runs it before torch is imported: a wrong path fails at once.
* ``load(path)``: that, then ``torch.load`` (weights only, allowing fairseq's plain objects:
  ``allow_fairseq_objects``), then the shape of a fairseq checkpoint. Every command, the GLUE scripts and the
  study read checkpoints through it (``checkpoint_record.checkpoint_info`` adds the tupe_roberta record, the
  objective and the classification head a caller needs).
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Dict

ZIP = b"PK\x03\x04"  # torch.save's format since torch 1.6
PICKLE = b"\x80"  # the legacy torch.save format (a pickle protocol opcode): fairseq 2019, the original TUPE release
FIX = "pass a checkpoint that fairseq-train wrote (SAVE_DIR/checkpoint_last.pt or checkpoint_best.pt)"
ORIGINAL_FIX = "pass the checkpoint.pt from the original release's tupe_ckp.tar.gz"  # tupe-convert-original's input
# Globals that 2019 fairseq pickled into a checkpoint (extra_state's numpy best/val_loss, train_meters) and today's
# fairseq-train does not: torch refusing one of these means the original TUPE release's file (docs/original_release.md)
ORIGINAL_GLOBALS = re.compile(r"GLOBAL (numpy\.(_core|core)\.multiarray\.scalar|fairseq\.meters\.[\w.]+)")
CONVERT_FIX = ("it looks like a checkpoint of the original TUPE release (or of a 2019 fairseq): convert it first with "
               "tupe-convert-original {path} OUT.pt (docs/original_release.md), then pass OUT.pt")


class CheckpointError(ValueError):
    """The named file is not a checkpoint the caller can use: a bad input (exit 1)."""


def check_file(path: str, fix: str = FIX) -> bytes:
    """Refuse a path that cannot hold a checkpoint, saying so and ``fix``; returns the file's first bytes."""
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file; {fix}")
    if os.path.isdir(path):
        inside = sorted(f for f in os.listdir(path) if f.endswith(".pt"))
        example = "checkpoint_last.pt" if "checkpoint_last.pt" in inside else (inside or [None])[0]
        raise CheckpointError(f"{path} is a folder; pass a checkpoint file in it (e.g. {os.path.join(path, example)})"
                              if example else f"{path} is a folder with no .pt file; {fix}")
    with open(path, "rb") as f:
        head = f.read(64)
    if not head:
        raise CheckpointError(f"{path}: empty file (0 bytes), not a checkpoint (a copy or save cut short?); {fix}")
    if not head.startswith((ZIP, PICKLE)):
        raise CheckpointError(f"{path}: not a checkpoint ({_kind(head)}); {fix}")
    return head


def _kind(head: bytes) -> str:
    """What a file that torch.save did not write seems to be, from its first bytes."""
    if head[8:9] == b"{" and int.from_bytes(head[:8], "little") > 0:  # 8-byte header length, then JSON
        return "a safetensors file, e.g. a Hugging Face export"
    text = head.decode("utf-8", errors="replace").rstrip("\ufffd")  # a character cut at the last byte read
    if "\ufffd" in text or any(c < " " and c not in "\t\n\r" for c in text):
        return "a binary file that torch.save did not write"
    words = " ".join(text.split())
    return f"a text file: {words[:30] + ('...' if len(words) > 30 else '')!r}"

def without_torch_advice(error: BaseException) -> str:
    """The reason of a refused ``torch.load(weights_only=True)``, without torch's advice to retry with
    ``weights_only=False`` (never do that with a file you did not make); other errors: their message."""
    text = str(error)
    if "Weights only load failed" in text:
        found = re.search(r"WeightsUnpickler error:\s*(.+)", text)
        text = found.group(1) if found else "refused by torch's weights-only unpickler"
    return " ".join(text.split()) or type(error).__name__


def _reason(error: Exception) -> str:
    """torch.load's complaint, shortened to its first sentence (a truncated zip's runs to a paragraph)."""
    text = without_torch_advice(error)
    if "central directory" in text:
        return "damaged or truncated: a copy cut short?"
    first = text.split(". ")[0]
    return f"{type(error).__name__}: {first}" if type(error).__name__ not in first else first


@functools.lru_cache(maxsize=None)  # once per process: every load() calls it
def allow_fairseq_objects() -> None:
    """Let ``torch.load(weights_only=True)`` (torch >= 2.6's default) read the plain Python objects fairseq stores
    in a checkpoint, and nothing more: any other global in a pickle (e.g. ``os.system``) is still refused by torch.
    Measured with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on fairseq-train and
    fairseq-hydra-train checkpoints; ``tupe_plugin.checkpoint_safety`` adds the one fairseq class of the state
    fairseq re-pickles between ranks. Needs omegaconf, not fairseq."""
    import argparse
    import collections
    import typing

    import torch
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    torch.serialization.add_safe_globals([
        argparse.Namespace,  # cfg["model"] of checkpoints written by fairseq-train
        DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode,  # fairseq-hydra-train's cfg
        typing.Any, collections.defaultdict, dict, list, int,
    ])


def load(path: str, mmap: bool = False, fix: str = FIX) -> Dict[str, Any]:
    """A fairseq checkpoint's dict, read on CPU (``mmap``: tensors read only when used; torch.save's zip format);
    refusals say what is wrong and ``fix`` (a global only 2019 fairseq pickled: run tupe-convert-original first,
    unless that is the caller, ``ORIGINAL_FIX``). torch's own error is the refusal's ``__cause__``."""
    head = check_file(path, fix)
    import torch

    allow_fairseq_objects()

    try:
        state = torch.load(path, map_location="cpu", mmap=mmap and head.startswith(ZIP))
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001  what torch.load raises for a foreign file varies: KeyError, IndexError, ...
        if fix != ORIGINAL_FIX and ORIGINAL_GLOBALS.search(str(e)):  # not when tupe-convert-original reads it
            fix = CONVERT_FIX.format(path=path)
        raise CheckpointError(f"{path}: not a readable checkpoint ({_reason(e)}); {fix}") from e
    if not isinstance(state, dict) or "model" not in state:
        what = f"a {type(state).__name__}" + (f" with keys {list(state)[:3]}" if isinstance(state, dict) else "")
        raise CheckpointError(f"{path}: not a fairseq checkpoint (it holds {what}, no 'model' state); {fix}")
    return state
