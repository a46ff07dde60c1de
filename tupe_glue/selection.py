"""The GLUE protocol's choice of a learning rate, one implementation for ``tupe_glue.collect`` and the study.

Per column (a task's dev subset), the median of the seeds' scores is taken for each LR and the LR with the
highest median is reported (ties: the smaller LR). A column that follows another (MNLI-mm follows MNLI-m,
``tupe_glue.tasks.Column.lr_from``) is reported at the LR its leader chose, as the official fine-tuning code
keeps one model per run (``docs/glue_protocol.md``); when it has no runs at that LR it has no result.
"""
from __future__ import annotations

import statistics
from typing import Dict, Mapping, Optional, Sequence

ByLr = Mapping[float, Sequence[float]]  # learning rate -> every seed's score at it


def median_per_lr(by_lr: ByLr) -> Dict[float, float]:
    """{lr: median over its seeds} for every LR with at least one score."""
    return {lr: statistics.median(scores) for lr, scores in by_lr.items() if scores}


def best_lr(by_lr: ByLr) -> Optional[float]:
    """The LR with the highest median over seeds (ties: the smallest LR); None without scores."""
    medians = median_per_lr(by_lr)
    return max(sorted(medians), key=medians.__getitem__) if medians else None


def column_lr(by_lr: ByLr, leader: Optional[ByLr] = None) -> Optional[float]:
    """The LR a column reports: its own best, or (``leader`` given: the column follows another) the
    leader's best LR, provided the column has scores at it."""
    if leader is None:
        return best_lr(by_lr)
    lr = best_lr(leader)
    return lr if lr is not None and by_lr.get(lr) else None


def select_columns(columns: Mapping[str, ByLr], lr_from: Mapping[str, Optional[str]]) -> Dict[str, Optional[float]]:
    """{column: reported LR} for every column; ``lr_from[column]`` names the column it follows (or None).
    A leader that is absent from ``columns`` counts as having no runs."""
    return {name: column_lr(by_lr, columns.get(lead, {}) if (lead := lr_from.get(name)) else None)
            for name, by_lr in columns.items()}
