"""The probes' figures (CALM, ``judgebias.stages.probes``; the pointwise probes,
``judgebias.stages.pointwise_probes``): the judges overlaid on one axis, as the other figures of
``judgebias.reporting.plots`` (same size rules, same DPI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from judgebias.metrics.margins import PROBE_MARGINS
from judgebias.reporting.plots import axis_span, label, new_figure

# The shift's declared margin of practical irrelevance (judgebias.metrics.margins): an "ok" needs the
# interval inside it, so the plot draws it (the declared value; a --margin override is not drawn).
READING_AID_SHIFT = PROBE_MARGINS["perturbation_shift"].value


def perturbation_shifts(probe: Mapping[str, Any]) -> Figure:
    """CALM perturbation probe: the shift of P(perturbed side) per perturbation (rows) with its 95%
    interval, every judge overlaid in its own colour on the same axis (``probe``: the probe's
    ``probe.json``). Names go on the vertical axis, where seven of them never overlap; the zero line
    and the +-0.05 reading aid are drawn."""
    return _shifts(probe, "perturbations", "shift", READING_AID_SHIFT,
                   "shift of P(perturbed side wins), after - before "
                   "(95% intervals; > 0: the perturbation helps)",
                   "How much each perturbation moves the judges (CALM)")


def pointwise_probe_shifts(probe: Mapping[str, Any]) -> Figure:
    """The pointwise probes (``judgebias.stages.pointwise_probes``): the mean score shift per probe
    with its 95% interval, every pointwise judge overlaid; the zero line drawn."""
    return _shifts(probe, "probes", "score_shift", None,
                   "mean score, variant - baseline, on the baseline's scale (95% intervals)",
                   "How much each scoring perturbation moves the pointwise judges")


def _shifts(probe: Mapping[str, Any], names: str, key: str, aid: float | None, xlabel: str,
            title: str) -> Figure:
    tags = list(probe.get(names) or {})
    judges = list(probe.get("judges") or {})
    if not tags or not judges:
        raise ValueError(f"no {names} figures to plot")
    fig, ax = new_figure((8.0, max(3.2, 0.4 * len(tags) * max(1, len(judges)) ** 0.5 + 1.4)))
    step = 0.7 / max(1, len(judges))
    ends: list[float] = [-aid, aid] if aid else [0.0]
    for k, (judge, marker) in enumerate(zip(judges, "osD^v<>ph*", strict=False)):
        y, v, lo, hi, ns = [], [], [], [], []
        for i, tag in enumerate(tags):
            e = ((probe["judges"][judge].get(tag) or {}).get(key)) or {}
            if e.get("value") is None:
                continue
            y.append(i + (k - (len(judges) - 1) / 2) * step)
            v.append(e["value"])
            lo.append(e["value"] if e.get("ci_low") is None else e["ci_low"])
            hi.append(e["value"] if e.get("ci_high") is None else e["ci_high"])
            ns.append(e.get("n"))
        if not y:
            continue
        v_, lo_, hi_ = (np.asarray(a, dtype=float) for a in (v, lo, hi))
        ax.errorbar(v_, y, xerr=[v_ - lo_, hi_ - v_], fmt=marker, capsize=3, label=label(judge))
        ends += [*lo, *hi]
    ax.axvline(0, color="black", linewidth=1.0)
    for side in (-1, 1) if aid else ():
        ax.axvline(side * aid, color="0.4", linewidth=0.9, linestyle="--",
                   label=f"±{aid} (reading aid)" if side > 0 else None)
    lo_x, hi_x = axis_span(ends)
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(len(tags) - 0.5, -0.5)  # the first perturbation on top
    ax.set_yticks(range(len(tags)), [label(t.split("@")[0]).replace("_", " ") for t in tags])
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    # Below the axes: wide intervals leave no corner free of data for a legend inside.
    longest = max([len(label(j)) for j in judges] + [20])
    fig.legend(loc="outside lower center", ncol=max(1, min(len(judges) + 1, 4, 100 // longest)), fontsize=8)
    return fig
