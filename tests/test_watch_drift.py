"""The watched judge's error control over repeated looks and its decision, on hand-computed values."""

from __future__ import annotations

import math

import pytest

from judgebias.multiplicity import look_alpha, spent_alpha
from judgebias.reporting.watch_drift import changed_line, decide, position, reference_index


def test_obrien_fleming_spending_by_hand():
    # z_{0.975} = 1.959964; at t = 1/2: 1.959964 / sqrt(0.5) = 2.771808, Phi(2.771808) = 0.9972127,
    # 2 - 2 * 0.9972127 = 0.0055746. At t = 1/4: 1.959964 / 0.5 = 3.919928, 2 - 2 Phi = 0.0000886.
    assert spent_alpha(0.5, 0.05, "obrien-fleming") == pytest.approx(0.0055746, abs=1e-6)
    assert spent_alpha(0.25, 0.05, "obrien-fleming") == pytest.approx(0.0000886, abs=1e-6)
    assert spent_alpha(1.0, 0.05, "obrien-fleming") == pytest.approx(0.05, abs=1e-12)
    assert spent_alpha(0.0, 0.05, "obrien-fleming") == 0.0


def test_pocock_spending_by_hand():
    # alpha ln(1 + (e - 1) t): t = 1/2: 0.05 * ln(1 + 1.718282 * 0.5) = 0.05 * ln(1.859141) = 0.05 * 0.620115
    # = 0.0310057; t = 1/4: 0.05 * ln(1.429570) = 0.05 * 0.357374 = 0.0178687.
    assert spent_alpha(0.5, 0.05, "pocock") == pytest.approx(0.0310057, abs=1e-6)
    assert spent_alpha(0.25, 0.05, "pocock") == pytest.approx(0.0178687, abs=1e-6)
    assert spent_alpha(1.0, 0.05, "pocock") == pytest.approx(0.05, abs=1e-12)


def test_look_levels_are_the_increments_and_add_up_to_alpha():
    # Two looks, Pocock: 0.0310057 then 0.05 - 0.0310057 = 0.0189943.
    assert look_alpha(1, 2, 0.05, "pocock") == pytest.approx(0.0310057, abs=1e-6)
    assert look_alpha(2, 2, 0.05, "pocock") == pytest.approx(0.0189943, abs=1e-6)
    for kind in ("pocock", "obrien-fleming"):
        assert sum(look_alpha(k, 12, 0.05, kind) for k in range(1, 13)) == pytest.approx(0.05, abs=1e-12)
    # O'Brien-Fleming spends almost nothing at the first of 4 looks, most at the last.
    assert look_alpha(1, 4, 0.05, "obrien-fleming") < 1e-4 < 0.02 < look_alpha(4, 4, 0.05, "obrien-fleming")


@pytest.mark.parametrize(
    "call",
    [
        lambda: spent_alpha(1.5),
        lambda: spent_alpha(0.5, 0.0),
        lambda: spent_alpha(0.5, 0.05, "haybittle"),
        lambda: spent_alpha(math.nan),
        lambda: look_alpha(0, 3),
        lambda: look_alpha(4, 3),
    ],
)
def test_bad_spending_input_is_refused(call):
    with pytest.raises(ValueError):
        call()


def test_position_and_reference():
    # Entry 0 is the reference; with 3 looks a series, entries 1-3 are series 0, 4 starts series 1.
    assert [position(i, 3) for i in (1, 2, 3, 4)] == [(0, 1), (0, 2), (0, 3), (1, 1)]
    assert reference_index(5, "first") == 0
    assert reference_index(5, "rolling", 2) == 3
    assert reference_index(1, "rolling", 4) == 0
    with pytest.raises(ValueError):
        position(0, 3)
    with pytest.raises(ValueError):
        reference_index(2, "median")


def _fig(key: str, p: float) -> dict:
    return {
        "figure": key,
        "label": key,
        "share": True,
        "before": {"value": 0.70},
        "after": {"value": 0.80},
        "difference": {"value": 0.10, "ci_low": 0.02, "ci_high": 0.18, "p_value": p},
    }


def test_decide_uses_holm_at_the_look_level():
    comparison = {"figures": [_fig("position_consistency", 0.004), _fig("tie_rate", 0.02)]}
    # Holm over (0.004, 0.02): 2 * 0.004 = 0.008, max(0.008, 0.02) = 0.02.
    # Look 1 of 2, Pocock: level 0.0310057: both changed. O'Brien-Fleming: level 0.0055746: neither.
    pocock = decide(comparison, look=1, looks=2, alpha=0.05, spending="pocock")
    assert [f["p_adjusted"] for f in pocock["figures"]] == pytest.approx([0.008, 0.02])
    assert pocock["changed"] == ["position_consistency", "tie_rate"]
    obf = decide(comparison, look=1, looks=2, alpha=0.05, spending="obrien-fleming")
    assert obf["changed"] == []
    assert "no figure changed" in changed_line(obf)
    assert "position_consistency 0.700 -> 0.800" in changed_line(pocock)
    # A fresh 5% test (one look declared: level 0.05) flags both; the spent level above did not.
    assert decide(comparison, look=1, looks=1, alpha=0.05, spending="obrien-fleming")["changed"] == [
        "position_consistency", "tie_rate"]


def test_history_plot_draws_each_figure_with_the_reference_band(tmp_path):
    from judgebias.reporting.plots_watch import history_figure, history_plot

    est = {"value": 0.7, "ci_low": 0.6, "ci_high": 0.8, "n": 30}
    records = [
        {"watch": "w", "index": 0, "figures": {"position_consistency": est, "tie_rate": est}},
        {"watch": "w", "index": 1, "reference": {"index": 0}, "decision": {"changed": ["tie_rate"]},
         "figures": {"position_consistency": est,
                     "tie_rate": {**est, "value": 0.3, "ci_low": 0.2, "ci_high": 0.4}}},
    ]
    fig = history_figure(records)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2
    # Each panel: the reference band (a patch spanning the reference interval) and one point per look.
    tie = next(ax for ax in visible if "tie" in ax.get_title().lower())
    band = tie.patches[0].get_extents()
    assert band.height > 0
    assert len(tie.lines) + len(tie.collections) >= 2
    assert history_plot(records, tmp_path / "h.png").stat().st_size > 1000
    with pytest.raises(ValueError):
        history_figure([])
