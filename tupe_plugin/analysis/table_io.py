"""Write a result table as CSV, atomically (temporary name, then rename)."""
from __future__ import annotations

import csv
import os
from typing import Dict, List


def write_csv(path: str, rows: List[Dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
