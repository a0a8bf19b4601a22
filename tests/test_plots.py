"""Every plot rendered at its saved size and checked the way a reader would look at it: nothing
clipped off the canvas, every number readable on its cell, every interval end inside the frame,
zero visible, small bins marked, open bins labelled for what they hold.

The PNGs are written to ``tmp_path`` (kept by pytest for the last runs) so they can be opened."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from judgebias.reporting import plots, plots_ablations


def _render(fig, tmp_path, name):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    plots.save_figure(fig, tmp_path / f"{name}.png")
    return canvas.get_renderer()


def _outside(fig, renderer) -> list[str]:
    """Texts whose drawn box leaves the canvas (1 px tolerance)."""
    width, height = fig.canvas.get_width_height()
    undrawn = set()  # labels of ticks outside the view limits exist but are never drawn
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = sorted(limits)
            for tick in axis.get_major_ticks():
                if not lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    bad = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or id(t) in undrawn:
            continue
        box = t.get_window_extent(renderer)
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
            bad.append(t.get_text())
    return bad


def _contrast(rgb_a, rgb_b) -> float:
    def lum(rgb):
        c = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in rgb[:3]]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    hi, lo = sorted((lum(rgb_a), lum(rgb_b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _bins(rows):
    """Bins as the metrics write them: (low, high, n, rate); None = open end."""
    from statsmodels.stats.proportion import proportion_confint

    out = []
    for low, high, n, rate in rows:
        lo, hi = proportion_confint(round(rate * n), n, method="wilson") if n else (None, None)
        out.append({"low": low, "high": high, "n": n, "rate": rate if n else None,
                    "ci_low": lo, "ci_high": hi})
    return out


def test_confusion_matrix_keeps_its_long_title_and_labels_on_the_canvas(tmp_path):
    fig = plots.confusion_matrix({"tp": 19, "fn": 1, "fp": 13, "tn": 11},
                                 "a-judge-with-a-long-name: own response better? (human vs judge)")
    renderer = _render(fig, tmp_path, "confusion")
    assert _outside(fig, renderer) == []


def test_every_heatmap_number_reads_on_its_cell(tmp_path):
    # 0.90 is dark red and 0.10 dark blue in RdBu_r: black text on them was unreadable.
    records = [{"rater": r, "generator_x": "x", "generator_y": y, "win_rate_x": v, "n": 10}
               for r, y, v in [("j1", "y", 0.90), ("j1", "z", 0.10), ("j2", "y", 0.5), ("gold", "y", 0.67),
                               ("human", "z", 0.33)]]
    fig = plots.win_rate_heatmap(records)
    renderer = _render(fig, tmp_path, "heatmap")
    assert _outside(fig, renderer) == []
    ax = fig.axes[0]
    image = ax.get_images()[0]
    grid = image.get_array()
    checked = 0
    for t in ax.texts:
        j, i = (round(v) for v in t.get_position())
        cell = image.cmap(image.norm(grid[i, j]))
        from matplotlib.colors import to_rgb

        assert _contrast(to_rgb(t.get_color()), cell) >= 4.5, (t.get_text(), grid[i, j])
        checked += 1
    assert checked == len(records)


def test_perplexity_plot_shows_zero_rates_and_does_not_join_tiny_bins(tmp_path):
    judge = _bins([(None, -1.0, 1, 0.0), (-1.0, -0.5, 9, 0.33), (-0.5, 0.0, 23, 0.61), (0.0, 0.5, 19, 0.53),
                   (0.5, 1.0, 7, 0.0), (1.0, None, 1, 1.0)])
    fig = plots.perplexity_curves({"j1": judge}, "j1 by perplexity")
    renderer = _render(fig, tmp_path, "perplexity")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    assert ax.get_ylim()[0] < 0 and ax.get_ylim()[1] > 1  # points at 0 and 1 sit inside the frame
    joined = [line for line in ax.get_lines() if line.get_linestyle() == "-" and len(line.get_xdata()) == 6]
    assert len(joined) == 1
    y = np.asarray(joined[0].get_ydata(), dtype=float)
    assert np.isnan(y[[0, 5]]).all() and not np.isnan(y[1:4]).any()  # n=1 bins are gaps in the line
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0].startswith("< -1") and labels[-1].startswith(">= 1") and "n=1" in labels[0]
    assert "hollow" in ax.get_xlabel()


def test_perplexity_title_names_humans_only_when_their_curve_is_drawn(tmp_path):
    judge = _bins([(-0.5, 0.0, 10, 0.5), (0.0, 0.5, 10, 0.7)])
    result = {"judges": {"j1": {"perplexity_preference": {"judge_bins": judge}}}}
    fig = plots.figures_for(result)["perplexity_j1"]
    assert "vs humans" not in fig.axes[0].get_title()
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["j1"]
    result["judges"]["j1"]["perplexity_preference"]["human_bins"] = judge
    fig = plots.figures_for(result)["perplexity_j1"]
    assert "vs humans" in fig.axes[0].get_title()
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["j1", "human"]


def test_verbosity_open_bin_is_labelled_for_what_it_holds_and_n_never_covers_a_bar(tmp_path):
    from judgebias.metrics.verbosity import bin_rates

    # As the metric writes them: every 20% bin from -100% and the open one, empty bins included.
    x = np.array([-90.0] * 6 + [-10.0] * 9 + [10.0] * 3 + [150.0] * 10)
    hits = np.array([1, 1, 0, 0, 0, 0] + [1] * 9 + [1, 1, 0] + [1] * 10)
    bins = bin_rates(x, hits)
    fig = plots.verbosity_curve(bins, "j1: human alignment by length difference")
    renderer = _render(fig, tmp_path, "verbosity")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    labels = [t.get_text().splitlines() for t in ax.get_xticklabels()]
    # The unit sits in the axis label (issue 34, item 8): "-100%..-80%" under each of 11 bins ran
    # into its neighbours at the saved size.
    assert labels[-1] == [">= 100", "n=10"] and "(%)" in ax.get_xlabel()
    assert len(labels) == 11 and labels[1] == ["-80..-60", "n=0"]  # empty bins keep their place
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert not any(a.overlaps(b) for a, b in itertools.pairwise(boxes))
    line = next(x for x in ax.get_lines() if x.get_linestyle() == "-" and len(x.get_xdata()) == 11)
    assert np.isnan(np.asarray(line.get_ydata(), dtype=float)[1:4]).all()  # and break the line
    assert len(ax.texts) == 0  # n sits under its bin, not over the error bars


@pytest.mark.parametrize("values", [
    [(0.34, 0.20, 0.50), (0.55, 0.35, 0.76), (0.38, 0.21, 0.55)],  # all positive: zero was the frame
    [(-0.125, -0.5, 0.25), (0.0, -0.3, 0.3)],
])
def test_dbg_bars_hold_zero_and_every_interval_end_inside_the_frame(tmp_path, values):
    est = {f"j{i}": {"value": v, "ci_low": lo, "ci_high": hi, "n": 20}
           for i, (v, lo, hi) in enumerate(values)}
    fig = plots.estimate_bars(est)
    renderer = _render(fig, tmp_path, "dbg")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    bottom, top = ax.get_ylim()
    ends = [x for v in values for x in v] + [0.0]
    margin = 0.01 * (top - bottom)
    assert bottom < min(ends) - margin and top > max(ends) + margin
    assert any(line.get_ydata()[0] == 0 for line in ax.get_lines())  # the zero line
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [f"j{i}\n{v:+.2f} (n=20)" for i, (v, _, _) in enumerate(values)]


def test_ablation_bars_hold_every_interval_end(tmp_path):
    out = {"judges": {"smollm2": {"before": {"value": -0.125, "ci_low": -0.5, "ci_high": 0.25},
                                  "finetuned": {"value": -0.125, "ci_low": -0.5, "ci_high": 0.25}},
                      "gemma": {"before": {"value": None},
                                "finetuned": {"value": 0.1, "ci_low": 0.0, "ci_high": 0.4}}}}
    fig = plots_ablations.dbg_before_after(out, "DBG before and after fine-tuning on the same data")
    renderer = _render(fig, tmp_path, "before_after")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    bottom, top = ax.get_ylim()
    assert bottom < -0.5 and top > 0.4
    assert any(t.get_text() == "n/a" for t in ax.texts)


def test_replay_coverage_panel_shows_the_difference_between_093_and_095(tmp_path):
    import pandas as pd

    # The ranking's 0/1 coverage would squash the axis to [0, 1], where 0.93 and 0.95 look the same:
    # the panel starts at 0.80 and puts the ranking's 0 on the bottom edge as a marker.
    rows = [{"judge": "J", "figure": "eo", "method": m, "budget": b, "labels": b, "width": 1 / b**0.5,
             "coverage": c} for b in (25, 100) for m, c in (("ranking", 0.0), ("design", 0.93),
                                                            ("ppi", 0.95))]
    fig = plots.replay_figure(pd.DataFrame(rows))
    renderer = _render(fig, tmp_path, "replay")
    cov_ax = fig.axes[1]
    assert cov_ax.get_ylim()[0] == pytest.approx(0.80)
    marks = [line for line in cov_ax.get_lines() if line.get_marker() == "v"]
    assert marks and np.allclose(marks[0].get_ydata(), 0.80)
    assert not _outside(fig, renderer)
