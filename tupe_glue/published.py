"""Published GLUE dev results: Ke et al. (ICLR 2021), Table 1 (BERT-Base setting, 110M, 16 GB data).

Numbers as printed in the paper (``docs/glue_protocol.md`` §7). ``avg`` is the paper's own "Avg"
column, the plain mean of the 9 scores (MNLI-m and MNLI-mm counted separately, WNLI excluded) to within 0.005.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

# The paper's 9 columns, in its order. Metrics: MCC for CoLA, Pearson for STS, accuracy otherwise.
COLUMNS: Tuple[str, ...] = ("MNLI-m", "MNLI-mm", "QNLI", "QQP", "SST", "CoLA", "MRPC", "RTE", "STS")


@dataclass(frozen=True)
class PublishedRow:
    model: str
    steps: str
    scores: Tuple[float, ...]  # in COLUMNS order, 0-100 scale
    avg: float


TABLE1: Dict[str, PublishedRow] = {
    r.model: r
    for r in [
        PublishedRow("BERT-A", "1M", (84.93, 84.91, 91.34, 91.04, 92.88, 55.19, 88.29, 68.61, 89.43), 82.96),
        PublishedRow("BERT-R", "1M", (85.81, 85.84, 92.16, 91.12, 92.90, 55.43, 89.26, 71.46, 88.94), 83.66),
        PublishedRow("TUPE-A", "1M", (86.05, 85.99, 91.92, 91.16, 93.19, 63.09, 88.37, 71.61, 88.88), 84.47),
        PublishedRow("TUPE-R", "1M", (86.21, 86.19, 92.17, 91.30, 93.26, 63.56, 89.89, 73.56, 89.23), 85.04),
        PublishedRow("TUPE-A^mid", "300k", (84.76, 84.83, 90.96, 91.00, 92.25, 62.13, 87.1, 68.79, 88.16), 83.33),
        PublishedRow("TUPE-R^mid", "300k", (84.86, 85.21, 91.23, 91.14, 92.41, 62.47, 87.29, 69.85, 88.63), 83.68),
        PublishedRow("TUPE-A^tie-cls", "1M", (85.91, 85.73, 91.90, 91.05, 93.17, 59.46, 88.53, 69.54, 88.97), 83.81),
        PublishedRow("BERT-Ad", "1M", (85.26, 85.28, 91.56, 91.02, 92.70, 59.73, 88.46, 71.31, 87.47), 83.64),
    ]
}

# Rows printed beside a new result by default.
COMPARE: Tuple[str, ...] = ("BERT-A", "BERT-R", "TUPE-A", "TUPE-R")
SOURCE = "Ke et al. 2021, Table 1 (dev)"
