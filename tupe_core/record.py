"""The positional variant and its checkpoint record.

A variant is an ordered tuple of (encoding name, its options): the encoding added to the words first (if any), then
the one at the attention (if any); NoPE is the empty tuple. Each encoding declares its own options, a frozen
dataclass (``PositionalEncoding.Options``, ``options.py``); the registry (``registry.py``) names the variants and
turns flags and records into variants.

Checkpoint record: the variant as JSON, an ordered list with one object per encoding, its name under ``"encoding"``
and its options beside it (as Hugging Face records ``rope_scaling = {"rope_type": ..., options}``)::

    [{"encoding": "tupe", "untie_cls": true, "rel_pos": true, "rel_pos_bins": 32, "max_rel_pos": 128}]

stored as the UTF-8 bytes of a uint8 buffer of the positions module (``facts.VARIANT_KEY``), so it travels with the
state dict. An option missing from a record decodes as its default (an option added later defaults to what the
encoding did before it); an encoding or an option this version does not know was written by a newer plugin (or a
plugin not imported) and is refused (``NewerRecordError``), not dropped. Records written before (a long-integer
tensor, one value per field of the old flag record) decode through ``legacy_record.py``, a frozen table.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

UPGRADE = "upgrade tupe_plugin to the version that wrote it (git pull; pip install -c constraints.txt -e .)"


class NewerRecordError(ValueError):
    """A checkpoint's variant record written by a newer plugin: encodings, options or choices this one does not
    know."""


@dataclass(frozen=True)
class PositionalVariant:
    """How positions enter the encoder: (encoding name, its options) per encoding, the input encoding first.
    ``name``: its name in the registry ("custom" if none), set by the registry that made it; not part of the
    variant (two variants with the same encodings are equal)."""

    encodings: Tuple[Tuple[str, Any], ...] = ()
    name: str = field(default="custom", compare=False)

    def names(self) -> Tuple[str, ...]:
        return tuple(name for name, _ in self.encodings)

    def options(self, name: str) -> Optional[Any]:
        """The options of encoding ``name`` in this variant, or None when it has no such encoding."""
        return next((options for n, options in self.encodings if n == name), None)

    def entries(self) -> List[Dict[str, Any]]:
        """The record's JSON list: ``{"encoding": name, **options}`` per encoding."""
        return [{"encoding": name, **asdict(options)} for name, options in self.encodings]

    def to_tensor(self) -> torch.Tensor:
        """The checkpoint record: the JSON of ``entries`` as a uint8 tensor."""
        data = json.dumps(self.entries(), separators=(",", ":")).encode("utf-8")
        return torch.tensor(list(data), dtype=torch.uint8)

    def arch_hint(self) -> str:
        """``--arch NAME_base`` for a registered variant, else an empty string."""
        return f"--arch {self.name}_base" if self.name != "custom" else ""


def record_entries(record: torch.Tensor) -> Optional[List[Dict[str, Any]]]:
    """The JSON entries of a record written as JSON (uint8), or None for an older integer record."""
    if record.dtype != torch.uint8:
        return None
    try:
        entries = json.loads(bytes(record.tolist()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NewerRecordError(f"the checkpoint's positional-variant record is not the JSON this tupe_plugin "
                               f"writes ({e}); {UPGRADE}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "encoding" in e for e in entries):
        raise NewerRecordError(f"the checkpoint's positional-variant record {entries!r} is not a list of "
                               f"{{\"encoding\": ..., options}}: it was written by a newer tupe_plugin; {UPGRADE}")
    return entries
