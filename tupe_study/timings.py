"""``OUT/timings.tsv``: one line per finished part of a study, written by ``tupe-study`` when the part ends.

Columns, tab-separated: stage, part (its arguments), seconds, UTC end (``STAMP``), machine, code. Code is the
commit of the checkout that ran the part (``git describe --always --dirty``), so that a report says which code
trained its models: a seed can draw another initial model under other code (docs/study.md, "Seeds and
commits"). Lines written before that column existed have five columns; their code reads as "".
A pre-training resumed from its checkpoint counts its earlier sittings too (``logged_seconds`` of its log): their
work is kept, so they are part of what the part took. A part that starts again from scratch counts its last sitting.
Plain Python: the GPU study reads it before its machine has numpy (bench/gpu_study.py).
"""
from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from typing import List, NamedTuple

from tupe_common import fairseq_log

STAMP = "%Y-%m-%dT%H:%M:%SZ"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class PartTime(NamedTuple):
    stage: str
    part: str
    seconds: int
    end: float  # POSIX time
    machine: str
    code: str  # "" when not recorded


def code_version(root: str = ROOT) -> str:
    """The commit checked out at ``root`` (``-dirty`` when tracked files differ from it), or "unknown" where git
    cannot say (no git, not a checkout)."""
    try:
        p = subprocess.run(["git", "-C", root, "describe", "--always", "--dirty", "--abbrev=7"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"


def timing_line(stage: str, part: str, seconds: int, end: datetime, machine: str, code: str) -> str:
    return "\t".join([stage, part, str(seconds), end.astimezone(timezone.utc).strftime(STAMP), machine, code]) + "\n"


def part_times(out: str) -> List[PartTime]:
    """The finished parts recorded in ``out/timings.tsv``, in order; [] without the file. A line of another shape
    (a write cut short) is skipped."""
    path = os.path.join(out, "timings.tsv")
    if not os.path.isfile(path):
        return []
    found = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) not in (5, 6) or not fields[2].isdigit():
                continue
            try:
                end = datetime.strptime(fields[3], STAMP).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                continue
            found.append(PartTime(fields[0], fields[1], int(fields[2]), end, fields[4], (fields[5:] or [""])[0]))
    return found


def logged_seconds(log: str) -> int:
    """The seconds a log's timestamped lines span, summed over each run of consecutive timestamped lines: the
    sittings of a pre-training, each opened by its launcher's untimed settings lines, so the time between a kill
    and the restart is not counted (an untimed warning inside a sitting leaves out only the seconds between its
    neighbours). The seconds before a sitting's first line (Python's start) are not in the log. 0 without the file."""
    if not os.path.isfile(log):
        return 0
    total, first, last = 0.0, None, None
    for line in fairseq_log.lines(log):
        t = fairseq_log.stamp(line)
        if t is None:
            if first is not None:
                total += last - first
            first = last = None
            continue
        first = t if first is None else first
        last = t
    if first is not None:
        total += last - first
    return round(total)
