"""A section's result as it goes (``Result``, saved by the section's process after every change), and the report
the driver writes from all of them (``write_report``: report.md and gpu_check.csv)."""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Dict, List, Sequence


class Result:
    """What one section found, written to ``path`` as JSON after every change: a section killed at its time
    limit still leaves what it had measured."""

    def __init__(self, path: Path):
        self.path = path
        self.status, self.lines, self.rows = "ok", [], []  # rows: (subject, setting, metric, value)
        self.start, self.ended = time.monotonic(), False  # ended: the section returned (its process did not die in it)

    def say(self, line: str = "") -> None:
        self.lines.append(line)
        self.save()

    def record(self, subject: str, setting: str, **metrics) -> None:
        """One CSV row per metric of ``subject`` in ``setting``; a metric whose value is None has no row."""
        self.rows += [(subject, setting, metric, value) for metric, value in metrics.items() if value is not None]

    def fail(self, why: str) -> None:
        self.status = "failed"
        self.say(f"**failed**: {why}")

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"status": self.status, "lines": self.lines, "rows": self.rows, "ended": self.ended,
                                   "seconds": time.monotonic() - self.start}), encoding="utf-8")
        tmp.replace(self.path)


def result_path(out: Path, section: str) -> Path:
    """Where a section's process saves its result as it goes (the driver reads it, then removes it)."""
    return out / f".{section}.json"


def write_report(out: Path, header: List[str], sections: Sequence[str], done: Dict[str, dict],
                 seconds: Dict[str, float]) -> None:
    """report.md and gpu_check.csv in ``out``, each written to a temp name and renamed."""
    lines = header + ["", "| section | status | seconds |", "|---|---|---:|"]
    lines += [f"| {name} | {done[name]['status'] if name in done else 'not run'} | {seconds.get(name, 0):.0f} |"
              for name in sections]
    for name in sections:
        if name in done:
            lines += ["", f"## {name}", "", *done[name]["lines"]]
    tmp = out / ".report.md.tmp"
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out / "report.md")
    tmp = out / ".gpu_check.csv.tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["section", "subject", "setting", "metric", "value"])
        for name in sections:
            for row in done.get(name, {}).get("rows", []):
                w.writerow([name, *row])
    tmp.replace(out / "gpu_check.csv")
