"""The plots as published figures (issue 34, items 8 and 11): the perturbation probe's names never
run into each other, the ablation's groups stay inside the frame and a bar of height 0 shows, every
figure is saved at 150 dpi or more with ticks of 8 pt or more, and the judges that share an axis
share one figure."""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.colors import to_rgba
from PIL import Image
from test_plots import _outside, _render

from judgebias.probes.perturbations import PERTURBATIONS
from judgebias.reporting import plots, plots_ablations, plots_probes


def _probe(judges=("smollm2", "gemma")):
    """The demo's probe: all seven perturbations, two judges, shifts of a few hundredths."""
    tags = [p.tag for p in PERTURBATIONS.values()]
    out = {"perturbations": {p.tag: {"bias": p.bias, "description": p.description}
                             for p in PERTURBATIONS.values()}, "judges": {}}
    for k, judge in enumerate(judges):
        out["judges"][judge] = {
            t: {"shift": {"value": 0.01 * (i - 3) * (k + 1), "ci_low": 0.01 * (i - 3) * (k + 1) - 0.06,
                          "ci_high": 0.01 * (i - 3) * (k + 1) + 0.06, "n": 8}}
            for i, t in enumerate(tags)}
    return out


def _overlaps(texts, renderer) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text().strip()]
    return [(a, b) for (a, x), (b, y) in itertools.combinations(boxes, 2) if x.overlaps(y)]


def test_perturbation_names_never_overlap_and_judges_share_one_figure(tmp_path):
    probe = _probe()
    fig = plots_probes.perturbation_shifts(probe)
    renderer = _render(fig, tmp_path, "perturbations")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    names = ax.get_yticklabels()
    assert [t.get_text() for t in names] == ["authority", "bandwagon", "distraction", "sentiment cheerful",
                                            "sentiment hostile", "verbosity", "self enhancement"]
    assert _overlaps(names, renderer) == []
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "smollm2" in legend and "gemma" in legend  # both judges overlaid on the one axis
    # Zero and the +-0.05 reading aid of the report card's statements are drawn.
    verticals = sorted(round(float(line.get_xdata()[0]), 3) for line in ax.get_lines()
                       if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2)
    assert verticals == [-0.05, 0.0, 0.05]
    lo, hi = ax.get_xlim()
    ends = [e["shift"][k] for f in probe["judges"].values() for e in f.values()
            for k in ("ci_low", "ci_high")]
    assert lo < min(ends) and hi > max(ends)


def test_pointwise_probe_names_never_overlap_and_no_reading_aid_is_drawn(tmp_path):
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    tags = [p.tag for p in POINTWISE_PROBES.values()]
    def shift(v: float) -> dict:
        return {"score_shift": {"value": v, "ci_low": v - 0.3, "ci_high": v + 0.3, "n": 8}}

    probe = {"probes": {t: {"description": t} for t in tags},
             "judges": {j: {t: shift(0.1 * (i - 2) * (k + 1)) for i, t in enumerate(tags)}
                        for k, j in enumerate(("tiny-pw", "other"))}}
    fig = plots_probes.pointwise_probe_shifts(probe)
    renderer = _render(fig, tmp_path, "pointwise_probes")
    ax = fig.axes[0]
    assert _outside(fig, renderer) == []
    names = ax.get_yticklabels()
    assert [t.get_text() for t in names] == ["rubric reversed", "score ids letters", "reference score",
                                            "rubric permuted", "scale 1 10"]
    assert _overlaps(names, renderer) == []
    assert {"tiny-pw", "other"} <= {t.get_text() for t in fig.legends[0].get_texts()}
    verticals = [round(float(line.get_xdata()[0]), 3) for line in ax.get_lines()
                 if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2]
    assert verticals == [0.0]  # a score has no reading aid of P(A)'s 0.05


def test_the_old_bar_plot_of_seven_perturbations_ran_its_names_together(tmp_path):
    # What the probe drew before: one bar per perturbation, names under the bars. The check above
    # finds the defect on it, so it can fail.
    fig = plots.estimate_bars({t: e["shift"] for t, e in _probe()["judges"]["gemma"].items()})
    renderer = _render(fig, tmp_path, "old_bars")
    assert _overlaps(fig.axes[0].get_xticklabels(), renderer) != []


def test_ablation_group_without_any_value_stays_in_the_frame_and_zero_bars_show(tmp_path):
    # The demo's style ablation: the rewriter's judge left out of the gold panel leaves gemma no
    # DBG in any condition; smollm2's DBG is exactly 0 before and under one style.
    out = {"judges": {"smollm2": {"before": {"value": 0.0, "ci_low": -0.3, "ci_high": 0.3},
                                  "attractive": {"value": 0.125, "ci_low": -0.2, "ci_high": 0.45},
                                  "humorous": {"value": 0.0, "ci_low": -0.25, "ci_high": 0.25}},
                      "gemma": {c: {"value": None} for c in ("before", "attractive", "humorous")}}}
    out["judges"] = {j: dict(sorted(row.items())) for j, row in out["judges"].items()}  # as read from JSON
    fig = plots_ablations.dbg_before_after(out, "DBG before and after style rewrite")
    renderer = _render(fig, tmp_path, "style_ablation")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["before", "attractive", "humorous"]
    assert _outside(fig, renderer) == []
    frame = ax.get_window_extent(renderer)
    na = [t for t in ax.texts if t.get_text() == "n/a"]
    assert len(na) == 3
    for t in na:  # gemma's group is inside the axes, not past its right edge
        box = t.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)
    lo, hi = ax.get_xlim()
    assert lo <= -0.4 and hi >= 1.4  # both groups of bars, whole
    # Each bar's value is marked in its colour: the two bars of height 0 are visible.
    bars = [p for p in ax.patches if np.isfinite(p.get_height())]
    zero = [p for p in bars if p.get_height() == 0]
    assert len(zero) == 2
    for bar in zero:
        cx = bar.get_x() + bar.get_width() / 2
        marks = [line for line in ax.get_lines()
                 if any(abs(x - cx) < 1e-9 and y == 0 for x, y in zip(line.get_xdata(), line.get_ydata(),
                                                                       strict=True))
                 and line.get_marker() == "_"]
        assert marks and to_rgba(marks[0].get_color()) == bar.get_facecolor()
        assert marks[0].get_markersize() * fig.dpi / 72 >= 10  # wide enough to see, in pixels


def test_figures_are_saved_at_150_dpi_with_legible_ticks(tmp_path):
    fig = plots_probes.perturbation_shifts(_probe())
    path = plots.save_figure(fig, tmp_path / "p.png")
    dpi = Image.open(path).info["dpi"]
    assert dpi[0] >= 149  # PNG stores pixels per metre: 150 dpi reads back as 149.99
    assert Image.open(path).size[0] == int(fig.get_figwidth() * 150)
    for ax in fig.axes:
        for t in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
            assert t.get_fontsize() >= 8


def test_verbosity_curves_of_the_judges_share_one_figure(tmp_path):
    from test_analyze import synthetic

    from judgebias.reporting.analysis import analyze

    figs = plots.figures_for(analyze(synthetic(60), reps=100))
    fig = figs["verbosity_judges"]
    renderer = _render(fig, tmp_path, "verbosity_judges")
    assert _outside(fig, renderer) == []
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["j1", "j2", "j3"]
    assert _overlaps(fig.axes[0].get_xticklabels(), renderer) == []


def test_perturbation_legend_of_long_judge_names_stays_on_the_canvas(tmp_path):
    fig = plots_probes.perturbation_shifts(_probe(tuple(f"{'x' * 36}-{k}" for k in range(4))))
    renderer = _render(fig, tmp_path, "perturbations_long")
    assert _outside(fig, renderer) == []


def _saito_bins(ns, seed):
    """Saito's 11 bins of the relative word-count difference (%): open below -80 and from 100 up."""
    rng = np.random.default_rng(seed)
    edges = [None, -80, -60, -40, -20, 0, 20, 40, 60, 80, 100, None]
    out = []
    for (lo, hi), n in zip(itertools.pairwise(edges), ns, strict=True):
        rate = float(rng.uniform(0.3, 0.9))
        out.append({"low": lo, "high": hi, "n": n, "rate": rate, "ci_low": rate - 0.1, "ci_high": rate + 0.1})
    return out


def test_per_bin_n_labels_of_four_judges_never_overlap(tmp_path):
    # LLMBar's four judges over Saito's 11 bins: "n=a/b/c/d" under each bin ran into its neighbours
    # in 6 of 11 bins. The judges' n differ where a judge gave no verdict on some pairs.
    counts = [[37, 12, 18, 25, 41, 96, 44, 23, 16, 11, 57], [36, 12, 18, 24, 41, 95, 44, 23, 16, 11, 56],
              [137, 112, 118, 125, 141, 196, 144, 123, 116, 111, 157], [9, 2, 8, 5, 1, 6, 4, 3, 6, 1, 7]]
    names = ["Vanilla", "Swap", "Rules", "Metrics"]
    series = {f"ChatGPT/{name}": _saito_bins(ns, k)
              for k, (name, ns) in enumerate(zip(names, counts, strict=True))}
    fig = plots.verbosity_judges(series)
    renderer = _render(fig, tmp_path, "verbosity_four_judges")
    ticks = fig.axes[0].get_xticklabels()
    assert len([t for t in ticks if t.get_text()]) == 11
    assert _overlaps(ticks, renderer) == []
    assert _outside(fig, renderer) == []
    # every judge's n is still readable under its bin, in legend order
    first = ticks[0].get_text().replace("\n", " ")
    assert all(str(ns[0]) in first for ns in counts), first
    assert all(t.get_fontsize() >= 8 for t in ticks)
