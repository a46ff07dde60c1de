"""The GLUE results chart of tupe_glue.collect (the one make demo draws): every bar label and "missing" mark lies inside
the plot and clear of the legend, for scores up to 100, a negative MCC and a missing column."""
from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tupe_glue import collect  # noqa: E402
from tupe_glue.collect import COMPARE, TABLE_COLUMNS, ColumnResult  # noqa: E402


def results(scores: dict) -> list:
    """One result per table column: its score in ``scores`` (None: no run, as summarize records it), else 70."""
    found = []
    for column in TABLE_COLUMNS:
        result, score = ColumnResult(column), scores.get(column.name, 70.0)
        if score is None:
            result.missing.append(f"{column.name}: no runs")
        else:
            result.by_lr = {1e-3: [(1, score)]}
        found.append(result)
    return found


@pytest.mark.parametrize("scores", [{"SST": 100.0}, {"SST": 100.0, "CoLA": -30.0}, {"SST": 100.0, "RTE": None}])
@pytest.mark.parametrize("compare", [(), COMPARE], ids=["alone", "with the published rows"])
def test_every_label_is_inside_the_plot_and_clear_of_the_legend(scores, compare):
    import matplotlib.pyplot as plt

    fig, drawn = collect.bar_chart("DEMO", results(scores), compare)
    fig.canvas.draw()
    ax = fig.axes[0]
    plot = ax.get_window_extent()
    legends = [legend.get_window_extent() for legend in fig.legends + [ax.get_legend()] if legend is not None]
    assert legends and "100.0" in drawn["bar_labels"]["DEMO"]
    missing = [name for name, score in scores.items() if score is None]
    assert drawn["missing"]["DEMO"] == missing + (["Avg"] if missing else [])  # no average without every column
    for text in ax.texts:  # the bar labels and the "missing" marks
        box = text.get_window_extent()
        assert plot.x0 <= box.x0 and box.x1 <= plot.x1 and plot.y0 <= box.y0 and box.y1 <= plot.y1, text.get_text()
        assert not any(box.overlaps(legend) for legend in legends), text.get_text()
    if min(s for s in scores.values() if s is not None) >= 0:
        assert drawn["ylim"][0] == 0.0  # the y-axis still starts at 0
    plt.close(fig)
