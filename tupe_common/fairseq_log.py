"""The one reader of fairseq's training logs (``fairseq-train`` and ``fairseq-hydra-train``), for the study, the
GLUE collection and the GPU study: each line's timestamp and the statistics it logs.

fairseq logs a line of statistics in one of three forms (``--log-format``):

* json: ``2026-12-02 15:48:54 | INFO | valid | {"epoch": 1, "valid_loss": "3.2", "valid_num_updates": "40"}``
  (``train_inner`` and ``train`` lines alike; a ``train`` or subset line prefixes its keys with its name);
* simple: ``... | INFO | valid | epoch 001 | valid on 'valid' subset | loss 3.2 | ... | num_updates 40``;
* tqdm: ``... epoch 001 | valid on 'valid' subset | loss 3.2 | ...`` or ``[...][valid][INFO] - {...}``.

``Stats`` gives every form's keys without the prefix: ``loss``, ``num_updates``, ``wps``, ``wpb``, ...
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Iterator, Optional

from .io import PathLike

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\b")  # "2026-12-02 15:48:54 | INFO | ..."
_JSON = re.compile(r"(?:\| (\S+) \||\]\[(\S+)\]\[\w+\] -) (\{.*\})\s*$")
_SIMPLE = re.compile(r"valid[ _]on '([^']+)' subset \| (.*)$")
START = "| fairseq_cli.train | {"  # the configuration fairseq-train logs once at its start
TRAIN_KINDS = ("train_inner", "train")


@dataclass(frozen=True)
class Stats:
    """One line of statistics: its ``kind`` (``train_inner``, ``train``, or the validated subset: ``valid``,
    ``valid1``, ...) and its values under fairseq's names without the kind's prefix, as logged (mostly text)."""

    kind: str
    values: Dict[str, object]

    def number(self, key: str) -> Optional[float]:
        """The value of ``key`` as a finite float, else None (missing, text, inf or nan)."""
        try:
            x = float(self.values[key])  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            return None
        return x if math.isfinite(x) else None

    @property
    def update(self) -> Optional[int]:
        """The line's update count (``num_updates``), or None when it does not say."""
        n = self.number("num_updates")
        return None if n is None else int(n)

    @property
    def validation(self) -> bool:
        return self.kind not in TRAIN_KINDS


def stamp(line: str) -> Optional[float]:
    """The line's timestamp in seconds since the epoch (the log's own clock, read as local time), or None."""
    m = STAMP.match(line)
    if not m:
        return None
    try:
        return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def kind_of(line: str) -> Optional[str]:
    """The kind of statistics a line logs (``Stats.kind``), from its form alone (its JSON is not parsed), or None."""
    m = _SIMPLE.search(line)
    if m:
        return m.group(1)
    m = _JSON.search(line)
    return (m.group(1) or m.group(2)) if m else None


def stats_of(line: str) -> Optional[Stats]:
    """The statistics a line logs, or None (not such a line, or its JSON is broken)."""
    m = _SIMPLE.search(line)
    if m:
        pairs = (kv.strip().split(" ", 1) for kv in m.group(2).split(" | "))
        return Stats(m.group(1), {kv[0]: kv[1] for kv in pairs if len(kv) == 2})
    m = _JSON.search(line)
    if not m:
        return None
    try:
        raw = json.loads(m.group(3))
    except json.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    kind = m.group(1) or m.group(2)
    prefix = f"{kind}_"
    return Stats(kind, {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in raw.items()})


def lines(path: PathLike) -> Iterator[str]:
    """The log's lines (undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from f


def statistics(path: PathLike) -> Iterator[Stats]:
    """Every line of statistics of the log at ``path``, in order."""
    for line in lines(path):
        found = stats_of(line)
        if found is not None:
            yield found
