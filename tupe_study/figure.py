"""The study at a glance: ``OUT/overview.png``, one A4-landscape figure that stays readable printed in grey.

Top left, the validation-loss curves: each variant its own pair of line style and marker (and a colour, which a
grey print loses), each pre-training seed its own marker fill, with a key for the seeds, and, for a variant with
several seeds, a hatched band from its lowest to its highest seed (the seed noise the differences are read
against); the unigram baseline a thick grey line. Top right, a variant x measure table whose every column is titled with what it holds: each cell
holds the value, its shade the variant's rank among the variants with a value in that column (darkest = best,
the end the header's arrow names; lightest = worst of that column), unless its span is not beyond the seed noise
(``tupe_study.noise``; ``noise_headers``: unshaded, within the noise or the noise not measured); text black or white,
whichever contrasts more with the grey; unfit variants marked. Bottom, locality and symmetry against the
downstream average from ``MIN_POINTS`` variants on, one point per variant (the MLM models when a study has ELECTRA ones too: a correlation across
objectives would mix the objective in), with n, the rank correlation and its p-value in each title; a far-out
downstream average (a variant fine-tuned to chance) is a triangle at the edge, its value in its label. A study
that declared comparisons (``tupe_study.endpoints``) gets a row for them above: per comparison each seed's paired
difference, their mean with its 95% t-interval, 0 and the declared margin, the family's Holm p and the verdict in
the title. A study without any downstream average has no scatter row.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

from tupe_study.noise import span_tests
from tupe_study.runs import Variant
from tupe_common.io import atomic_path
from tupe_study.stats import average_ranks


def _pyplot():
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # importing fairseq sets the root logger to DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# A variant's look in the loss curves: line style i % 4 and marker i % 9 (4 and 9 coprime: the first 36 variants
# all differ in the pair, so a grey print tells them apart); a pre-training seed's: the markers' fill.
LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "p", "<"]
# (fill style, colour of the other half): filled, open, half-filled with the other half open, then with it black
SEED_FILLS = [("full", "none"), ("none", "none"), ("left", "none"), ("bottom", "none"), ("right", "none"),
              ("top", "none"), ("left", "black"), ("bottom", "black"), ("right", "black"), ("top", "black")]
MARKS_PER_CURVE = 6  # markers along a curve (the validations are ~20 points: one on each would cover the lines)


def variant_style(i: int) -> Tuple[str, str]:
    """(line style, marker) of the i-th variant."""
    return LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]


def seed_fills(variants: Sequence[Variant]) -> Dict[int, Tuple[str, str]]:
    """{pre-training seed: (marker fill style, colour of the unfilled half)} over the seeds of the study, in
    order; they repeat after len(SEED_FILLS) seeds, which the key's title then says."""
    seeds = sorted({s.seed for v in variants for s in v.seeds})
    return {seed: SEED_FILLS[k % len(SEED_FILLS)] for k, seed in enumerate(seeds)}


# where a point's name may go, in points from the point: right then left of it, then further up and down (the
# farther ones get a leader line)
LABEL_SPOTS = [(3, 2), (3, -8), (-3, 2), (-3, -8), (3, 10), (3, -16), (-3, 10), (-3, -16), (6, 18), (6, -24)]
NEAR_SPOTS = 4
NAMES_UP_TO = 8  # a study with more variants labels its scatter points with the table's row numbers


def point_labels(names: Sequence[str]) -> List[str]:
    """What names a variant in the table and beside its scatter points: its name, or, with more than
    NAMES_UP_TO variants (whose names would cover each other in a cluster), its row number, which the
    table puts before its name."""
    return list(names) if len(names) <= NAMES_UP_TO else [str(i) for i in range(1, len(names) + 1)]


def place_labels(ax, points: Sequence[Tuple[float, float, str]], fontsize: float = 6) -> List[int]:
    """Name each (x, y, name) point beside it, at the first spot of LABEL_SPOTS where the name overlaps no name
    placed before and no other point and stays inside the axes (measured on the drawn text; the first spot when
    none is free). Returns the index of each name's spot."""
    from matplotlib.text import Text

    fig = ax.figure
    fig.canvas.draw()  # settles the autoscaled limits: until then the data transform and the extents are stale
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    dots = [ax.transData.transform((x, y)) for x, y, _ in points]
    placed: List = []
    chosen: List[int] = []
    for k, (x, y, name) in enumerate(points):
        probe = ax.annotate(name, (x, y), fontsize=fontsize, textcoords="offset points", xytext=LABEL_SPOTS[0],
                            va="bottom")
        spot = 0
        for i, (dx, dy) in enumerate(LABEL_SPOTS):
            probe.set_position((dx, dy))
            probe.set_horizontalalignment("left" if dx > 0 else "right")
            ext = probe.get_window_extent(renderer)
            inside = box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1
            clear = not any(ext.overlaps(b) for b in placed) and not any(
                ext.x0 - 2 <= px <= ext.x1 + 2 and ext.y0 - 2 <= py <= ext.y1 + 2 for j, (px, py) in enumerate(dots) if j != k)
            if inside and clear:
                spot = i
                break
        probe.remove()
        dx, dy = LABEL_SPOTS[spot]
        text = ax.annotate(name, (x, y), fontsize=fontsize, textcoords="offset points", xytext=(dx, dy),
                           ha="left" if dx > 0 else "right", va="bottom",
                           arrowprops=dict(arrowstyle="-", color="0.55", lw=0.5, shrinkA=0, shrinkB=2)
                           if spot >= NEAR_SPOTS else None)
        text.update_positions(renderer)
        placed.append(Text.get_window_extent(text, renderer))  # the name alone, without its leader line
        chosen.append(spot)
    return chosen


def far_out(values: Sequence[float], least: int = 5) -> List[bool]:
    """Tukey's far-out points: below Q1 - 3 IQR or above Q3 + 3 IQR (none among fewer than ``least``
    values). One of them would squash the others into a strip of the axis (a variant fine-tuned to chance)."""
    import numpy as np

    if len(values) < least:
        return [False] * len(values)
    q1, q3 = np.percentile(values, [25, 75])
    return [not (q1 - 3 * (q3 - q1) <= v <= q3 + 3 * (q3 - q1)) for v in values]


def scatter_with_far_out(ax, points: Sequence[Tuple[float, float, str]]) -> List[Tuple[float, float, str]]:
    """Draw the points; a far-out y (``far_out``) is drawn as a triangle at the bottom or top edge, pointing
    to where it lies, its value after its name; the axes fit the others. Returns the points as drawn."""
    far = far_out([y for _, y, _ in points])
    near = [p for p, f in zip(points, far) if not f]
    ax.scatter([x for x, _, _ in near], [y for _, y, _ in near], s=14, color="black")
    ax.margins(x=0.12, y=0.08)  # room for the names of the outermost points
    if not any(far):
        return list(points)
    ax.autoscale_view()
    low, high = ax.get_ylim()
    edge = {True: low + 0.025 * (high - low), False: high - 0.025 * (high - low)}  # below the axis: bottom edge
    drawn = []
    for (x, y, name), f in zip(points, far):
        if f:
            below = y < low
            ax.scatter([x], [edge[below]], s=22, marker="v" if below else "^", color="black", clip_on=False)
            drawn.append((x, edge[below], f"{name} ({y:.1f})"))
        else:
            drawn.append((x, y, name))
    ax.set_ylim(low, high)
    return drawn


def measures(rows: Sequence[Dict], columns: Sequence[str]) -> List[Tuple[str, str, bool]]:
    """(row key, header, higher is better) of the table's columns that some variant has. Each header says what
    its column holds; its arrow points to the better end."""
    lengths = sorted(int(k[len("loss_len"):]) for k in rows[0] if k.startswith("loss_len")) if rows else []
    out = [("final_valid_loss", "final\nMLM\nloss\n(bits) \u2193", False)]
    if len(lengths) > 1:
        out.append((f"loss_len{lengths[-1]}", f"MLM\nloss at\n{lengths[-1]}\ntokens \u2193", False))
    out += [(f"{c}_median", f"{c.replace('-', '-' + chr(10))}\nmedian\n\u2191", True) for c in columns]
    out += [("downstream_avg", "down-\nstream\naverage\n\u2191", True),
            ("order_drop_random", "drop,\nall words\nshuffled\n\u2191", True),
            ("loc_pos", "locality\n(position-\nonly)\n\u2191", True),
            ("sym_pos", "symmetry\n(position-\nonly)\n\u2191", True)]
    return [m for m in out if any(r.get(m[0]) is not None for r in rows)]


def rank_table(rows: Sequence[Dict], keys: Sequence[Tuple[str, str, bool]]) -> List[List[Optional[float]]]:
    """ranks[variant][measure]: 1 = best among the variants that have a value (ties share), None without one."""
    table: List[List[Optional[float]]] = [[None] * len(keys) for _ in rows]
    for j, (key, _, higher) in enumerate(keys):
        have = [(i, r[key]) for i, r in enumerate(rows) if r.get(key) is not None]
        if not have:
            continue
        ranks = average_ranks([-v if higher else v for _, v in have])
        for (i, _), rank in zip(have, ranks):
            table[i][j] = float(rank)
    return table


def column_shades(ranks: Sequence[Sequence[Optional[float]]]) -> List[List[Optional[float]]]:
    """shade[variant][measure] in [0, 1]: 0 for the column's best rank, 1 for its worst, linear in the rank
    between them, from the column's own values (a column that 7 of 17 variants have spans 0..1 over those 7);
    0.5 where every value of the column ties; None without a value."""
    out: List[List[Optional[float]]] = [[None] * (len(ranks[0]) if ranks else 0) for _ in ranks]
    for j in range(len(ranks[0]) if ranks else 0):
        have = [line[j] for line in ranks if line[j] is not None]
        if not have:
            continue
        best, worst = min(have), max(have)
        for i, line in enumerate(ranks):
            if line[j] is not None:
                out[i][j] = 0.5 if worst == best else (line[j] - best) / (worst - best)
    return out


SHADE_DARKEST, SHADE_LIGHTEST = 0.25, 0.95  # the part of the grey scale the table uses
MIN_POINTS = 5  # a correlation panel draws its points from this many variants on (fewer: a description at most)


def fit_text_in_cells(fig, table, fill: float = 0.92) -> None:
    """Shrink the table's text, as drawn, until each text fits its cell (at most `fill` of its width and height):
    the header row to one shared size (that of its tightest cell), every other cell on its own."""
    fig.canvas.draw()  # lays out the table, so that cells and texts have their drawn extents
    renderer = fig.canvas.get_renderer()

    def room(cell) -> float:
        box, text = cell.get_window_extent(renderer), cell.get_text().get_window_extent(renderer)
        return min(1.0, fill * box.width / max(text.width, 1e-9), fill * box.height / max(text.height, 1e-9))

    cells = table.get_celld()
    header = min(room(cell) for (i, _), cell in cells.items() if i == 0)
    for (i, _), cell in cells.items():
        scale = header if i == 0 else room(cell)
        cell.get_text().set_fontsize(cell.get_text().get_fontsize() * scale)


def relative_luminance(grey: float) -> float:
    """WCAG's relative luminance of an sRGB grey (0 black .. 1 white)."""
    return grey / 12.92 if grey <= 0.04045 else ((grey + 0.055) / 1.055) ** 2.4


def contrast(grey_a: float, grey_b: float) -> float:
    """WCAG's contrast ratio of two greys, (L1 + 0.05) / (L2 + 0.05) with L1 the lighter: 1 to 21."""
    la, lb = sorted((relative_luminance(grey_a), relative_luminance(grey_b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_grey(background: float) -> float:
    """Black (0) or white (1) text, whichever contrasts more with a grey background: at least 4.58:1 on any grey
    (the two are equal where the background's luminance is 0.179)."""
    return 0.0 if contrast(0.0, background) >= contrast(1.0, background) else 1.0


def noise_headers(variants: Sequence[Variant], keys: Sequence[str], columns: Sequence[str]) -> List[Optional[str]]:
    """Per column, None where its ranks may be read (its span is beyond the seed noise: ``tupe_study.noise``), else what
    its header adds: "within noise", or "noise not measured" (no variant has two or more seeds with a value there,
    or fewer than two variants have one)."""
    tests = span_tests(variants, keys, columns)
    return [None if k in tests and tests[k].beyond else "within\nnoise" if k in tests else "noise not\nmeasured"
            for k in keys]


def overview(path: str, variants: Sequence[Variant], rows: Sequence[Dict], columns: Sequence[str],
             corr: Sequence[Dict], unigram: Optional[float], endpoints: Sequence = (), unfit: Sequence[str] = ()) -> None:
    """The study's overview figure (``overview_figure``) as a PNG at ``path``."""
    fig = overview_figure(variants, rows, columns, corr, unigram, endpoints, unfit)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=150, format="png")
    _pyplot().close(fig)


def seed_band(curves: Sequence[Dict[int, float]]) -> Optional[Tuple[List[int], List[float], List[float]]]:
    """(updates, lowest, highest) over the seeds' curves at the updates every one of them has; None with fewer than
    2 curves or no update in common."""
    if len(curves) < 2:
        return None
    common = sorted(set.intersection(*(set(c) for c in curves)))
    if not common:
        return None
    return common, [min(c[u] for c in curves) for u in common], [max(c[u] for c in curves) for u in common]


BAND_HATCHES = ["////", "\\\\", "xxxx", "...."]  # a seed band's hatch per variant, for a grey print


def endpoint_panel(ax, result) -> None:
    """One declared comparison: each seed's paired difference (a point, numbered by its seed), their mean with its
    95% t-interval (updates_to: their median with its order-statistic interval, censored seeds hollow), 0, and the
    declared equivalence margin as a hatched band (not for updates_to, counted in updates); the title gives the Holm
    p of the family and the verdict, as the report's text does."""
    e = result.endpoint
    seeds = sorted(result.diffs)
    xs = list(range(len(seeds)))
    t = result.test
    counted = e.measure == "updates_to"
    unit, digits = ("updates", ".1f") if counted else ("bits", ".4f")
    ax.axhline(0, color="black", linewidth=0.8)
    if result.margin is not None and not counted:
        ax.axhspan(-result.margin, result.margin, facecolor="none", edgecolor="0.55", hatch="////", linewidth=0,
                   label=f"±{result.margin:g} bits (declared margin)")
    ax.scatter(xs, [result.diffs[s] for s in seeds], s=18, color="black", zorder=3, label="one pre-training seed")
    if result.censored:
        ax.scatter([x for x, s in zip(xs, seeds) if s in result.censored],
                   [result.diffs[s] for s in seeds if s in result.censored], s=40, facecolors="white",
                   edgecolors="black", zorder=4, label="censored at the budget (a bound)")
    if t is not None:
        x = len(seeds) + 0.5
        name = "median" if counted else "mean"
        finite = not (math.isinf(t.low) or math.isinf(t.high))
        ax.errorbar([x], [t.center], yerr=[[t.center - t.low], [t.high - t.center]] if finite else None, fmt="D",
                    color="black", capsize=4, markersize=5, zorder=3,
                    label=(f"median, order-statistic interval ({100 * t.coverage:.1f}%)" if finite else
                           "median (no 95% interval: too few seeds)") if counted else "mean, 95% t-interval")
        xs_ticks, labels = xs + [x], [str(s) for s in seeds] + [name]
        title = (f"{e.key}: {e.a} - {e.b} ({unit})\n{name} {t.center:+{digits}} [{t.low:+{digits}}, "
                 f"{t.high:+{digits}}], Holm p {result.p_holm:.3g}: {result.verdict}")
    else:
        xs_ticks, labels = xs, [str(s) for s in seeds]
        title = f"{e.key}: {e.a} - {e.b} ({unit})\n{result.verdict}"
    ax.set_xticks(xs_ticks)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel("pre-training seed", fontsize=8)
    ax.set_xlim(-0.7, len(seeds) + 1.2)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=6.5, loc="best", frameon=True, framealpha=0.9)


def _curves_panel(plt, ax, variants: Sequence[Variant], unigram: Optional[float]) -> None:
    """The loss curves: each variant its line style and marker, each seed its marker fill, the seeds' band, the
    unigram baseline, and the keys for both."""
    colors = plt.get_cmap("tab10").colors  # ten hues, none a lighter copy of another (they cycle past 10)
    fills = seed_fills(variants)
    from matplotlib.lines import Line2D

    handles = []
    for i, v in enumerate(variants):
        style, marker = variant_style(i)
        color = colors[i % len(colors)]
        band = seed_band([s.curve for s in v.seeds if s.curve])
        if band is not None:  # the pre-training seeds' spread: lowest to highest loss at each validation
            ax.fill_between(band[0], band[1], band[2], facecolor=color, alpha=0.15, edgecolor=color, linewidth=0,
                            hatch=BAND_HATCHES[i % len(BAND_HATCHES)], zorder=0)
        drawn = False
        for s in v.seeds:
            if s.curve:
                xs = list(s.curve)
                every = max(1, len(xs) // MARKS_PER_CURVE)
                ax.plot(xs, list(s.curve.values()), linestyle=style, marker=marker, fillstyle=fills[s.seed][0],
                        markerfacecoloralt=fills[s.seed][1],
                        markevery=(i % every, every), markersize=4, markeredgewidth=0.8, color=color,
                        linewidth=1.2, gid=v.name)
                drawn = True
        if drawn:
            handles.append(Line2D([], [], linestyle=style, marker=marker, markersize=4, color=color, linewidth=1.2,
                                  label=v.name))
    if unigram is not None:
        handles.append(ax.axhline(unigram, color="0.6", linestyle="-", linewidth=2.5, zorder=0,
                                  label=f"unigram {unigram:.2f}"))
    ax.set_xlabel("updates", fontsize=9)
    ax.set_ylabel("validation MLM loss (bits)", fontsize=9)
    several = any(len([s for s in v.seeds if s.curve]) > 1 for v in variants)
    ax.set_title("Pre-training (" + ("style: variant; fill: seed; band: the seeds' range)" if several else
                                     "line style and marker: variant; marker fill: seed)"), fontsize=10)
    if len(handles) > 8:  # beside the curves, in a strip of the panel (inside, so many names would cover them)
        pos = ax.get_position()
        ax.set_position([pos.x0, pos.y0, pos.width * 0.76, pos.height])
        legend = ax.legend(handles=handles, fontsize=6.5, ncol=1 if len(handles) <= 24 else 2, frameon=False,
                           loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, handlelength=2.6,
                           labelspacing=0.35)
    elif handles:
        legend = ax.legend(handles=handles, fontsize=7, ncol=2, frameon=False, loc="lower left", handlelength=2.6)
    seeds_drawn = sorted({s.seed for v in variants for s in v.seeds if s.curve})
    if len(seeds_drawn) > 1:  # the key for the seeds, in the top right corner (the curves start top left)
        if handles:
            ax.add_artist(legend)  # a second legend replaces the first unless the first is kept as an artist
        ax.legend(handles=[Line2D([], [], linestyle="none", marker="o", markersize=5, color="tab:blue",
                                  fillstyle=fills[seed][0], markerfacecoloralt=fills[seed][1], label=f"seed {seed}")
                           for seed in seeds_drawn],
                  title="pre-training seed" + (f" (fills repeat after {len(SEED_FILLS)})" if len(
                      seeds_drawn) > len(SEED_FILLS) else ""), title_fontsize=7, fontsize=7, loc="upper right", frameon=True,
                  framealpha=0.9)



def _table_panel(plt, fig, ax, variants: Sequence[Variant], rows: Sequence[Dict], columns: Sequence[str],
                 labels: Sequence[str], unfit: Sequence[str]) -> None:
    """The variant x measure table, each column shaded by rank unless its span is within the seed noise."""
    keys = measures(rows, columns)
    noisy = noise_headers(variants, [k for k, _, _ in keys], columns)
    keys = [(k, h if n is None else f"{h}\n{n}", hi) for (k, h, hi), n in zip(keys, noisy)]
    ranks = rank_table(rows, keys)
    shades = [[None if n else sh for sh, n in zip(line, noisy)] for line in column_shades(ranks)]
    ax.axis("off")
    ax.set_title("Variant x measure (shade: rank within its column, darkest = best; arrow: the\n"
                 "better end; unshaded: no order beyond the seed noise, p > 0.05 against simulated\n"
                 "studies with no difference, or the noise not measured: no variant with 2+ seeds)", fontsize=9)
    if keys and rows:
        n = len(rows)
        cmap = plt.get_cmap("Greys_r")
        # column 0: the variant names, inside the table's box (a row-label column would be drawn outside it)
        names = [(r["variant"] if label == r["variant"] else f"{label}  {r['variant']}")
                 + (" (unfit)" if r["variant"] in unfit else "") for label, r in zip(labels, rows)]
        cells = [[name] + [("—" if r.get(k) is None else f"{r[k]:.2f}") for k, _, _ in keys]
                 for name, r in zip(names, rows)]
        colours = [[(1, 1, 1, 1)] + [(1, 1, 1, 1) if sh is None else
                                     cmap(SHADE_DARKEST + (SHADE_LIGHTEST - SHADE_DARKEST) * sh) for sh in line]
                   for line in shades]
        # the names' column is wide enough for the longest name (about 6 characters per value column)
        name_cols = max(2.0, 0.17 * max(len(name) for name in names) + 0.5)
        table = ax.table(cellText=cells, cellColours=colours, colLabels=["variant"] + [h for _, h, _ in keys],
                         cellLoc="center", colWidths=[name_cols] + [1.0] * len(keys), bbox=[0.0, 0.0, 1.0, 1.0])
        header_rows = min(4.0, max(1.5, n / 3))  # the header's height in rows: 4 lines need ~4 rows of 17, 1.5 of 4
        table.auto_set_font_size(False)
        table.set_fontsize(8 if n <= 12 else 7)
        for (i, j), cell in table.get_celld().items():
            if i == 0:
                cell.set_height(cell.get_height() * header_rows)  # four-line headers; the bbox rescales the rest
                cell.get_text().set_fontsize(8.0)
            elif j == 0:
                cell.get_text().set_horizontalalignment("left")
                cell.PAD = 0.03
            elif shades[i - 1][j - 1] is not None:  # black or white, whichever reads better on this grey
                cell.get_text().set_color(str(text_grey(SHADE_DARKEST + (SHADE_LIGHTEST - SHADE_DARKEST)
                                                        * shades[i - 1][j - 1])))
        fit_text_in_cells(fig, table)


def _scatter_panel(ax, c: Dict, k: int, rows: Sequence[Dict], labels: Sequence[str]) -> None:
    """One locality or symmetry measure against the downstream average (``c``: its correlation row)."""
    pts = [(r[c["key"]], r["downstream_avg"], label) for r, label in zip(rows, labels)
           if r["objective"] == c["objective"] and r.get(c["key"]) is not None
           and r.get("downstream_avg") is not None]
    if len(pts) < MIN_POINTS:  # two or three points draw a line through anything: say so instead
        ax.set_title(f"{c['measure']}\nn = {len(pts)}: not drawn (fewer than {MIN_POINTS})", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    pts = scatter_with_far_out(ax, pts)
    rho, p, p_holm = c["spearman"], c.get("spearman_p", math.nan), c.get("p_holm", math.nan)
    # the report's p for a correlation: the permutation p, unadjusted, and Holm's over every correlation it computes
    stat = "—" if math.isnan(rho) else f"{rho:.2f}" + ("" if math.isnan(p) else f" (p {p:.2f}, unadjusted" + (
        ")" if math.isnan(p_holm) else f"; Holm {p_holm:.2f})"))
    ax.set_title(f"{c['measure']}\nn = {c['n']}, Spearman {stat}", fontsize=8)
    ax.set_xlabel(c["measure"].split(" (")[0], fontsize=8)
    if k == 0:
        ax.set_ylabel("downstream average", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.ticklabel_format(useOffset=False)
    place_labels(ax, pts)  # after the limits and ticks are set: it measures where the names fall


def overview_figure(variants: Sequence[Variant], rows: Sequence[Dict], columns: Sequence[str],
                    corr: Sequence[Dict], unigram: Optional[float], endpoints: Sequence = (), unfit: Sequence[str] = ()):
    """Loss curves, the variant x measure table shaded by rank, the declared comparisons (when a study declared
    some), and each locality/symmetry measure against the downstream average (when some variant has one)."""
    plt = _pyplot()
    fig = plt.figure(figsize=(11.7, 8.3))
    scatters = any(r.get(c["key"]) is not None and r.get("downstream_avg") is not None
                   and r["objective"] == c["objective"] for c in corr[:4] for r in rows)  # a panel, drawn or not
    lower = (["endpoints"] if endpoints else []) + (["scatters"] if scatters or not endpoints else [])
    grid = fig.add_gridspec(1 + len(lower), 4, height_ratios=[1.25] + [1] * len(lower), hspace=0.45 + 0.1 * (
        len(lower) - 1), wspace=0.35, left=0.07, right=0.98, top=0.95, bottom=0.07)

    _curves_panel(plt, fig.add_subplot(grid[0, :2]), variants, unigram)
    labels = point_labels([r["variant"] for r in rows])  # the table's names and the scatter points' labels
    _table_panel(plt, fig, fig.add_subplot(grid[0, 2:]), variants, rows, columns, labels, unfit)

    if endpoints:
        width = 4 // min(len(endpoints), 4)
        for k, result in enumerate(endpoints[:4]):
            endpoint_panel(fig.add_subplot(grid[1, k * width:(k + 1) * width]), result)
    if "scatters" not in lower:
        return fig
    row = lower.index("scatters") + 1
    for k, c in enumerate(corr[:4]):  # one objective's (MLM's when there are MLM models: report.correlations)
        _scatter_panel(fig.add_subplot(grid[row, k]), c, k, rows, labels)
    return fig
