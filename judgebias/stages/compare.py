"""Before/after comparisons shared by the two ablations: DBG per condition, its text and plot."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from judgebias.config import ExperimentConfig


def _dbg(table: pd.DataFrame, judge: str, cfg: ExperimentConfig, gold: list[str] | None) -> dict:
    from judgebias.metrics.dbg import dbg_score
    from judgebias.stats import InsufficientData

    if gold is not None and not [g for g in gold if g != judge]:
        return {
            "value": None,
            "skipped": "no gold judge left once the measured judge and the rewriter are left out",
        }
    try:
        est = dbg_score(
            table,
            judge,
            {k: {v} for k, v in cfg.self_map.items()},
            gold,
            human_as_gold=cfg.gold.human_as_gold,
        )
    except (InsufficientData, ValueError) as exc:
        return {"value": None, "skipped": str(exc)}
    return est.to_dict()


def _fmt_compare(out: dict) -> str:
    parts = []
    for judge, row in out["judges"].items():
        cells = []
        for k, v in row.items():
            cells.append(f"{k} {v['value']:+.3f}" if v.get("value") is not None else f"{k} n/a")
        parts.append(f"{judge}: " + ", ".join(cells))
    return "; ".join(parts)


def _plot_before_after(out: dict, path: Path, title: str) -> Path:
    """Grouped bars: DBG per judge per condition, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    judges = list(out["judges"])
    conditions = list(next(iter(out["judges"].values())).keys()) if judges else []
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    width = 0.8 / max(1, len(conditions))
    for k, cond in enumerate(conditions):
        vals, lo, hi = [], [], []
        for j in judges:
            e = out["judges"][j][cond]
            v = e.get("value")
            vals.append(np.nan if v is None else v)
            lo.append(0 if v is None or e.get("ci_low") is None else v - e["ci_low"])
            hi.append(0 if v is None or e.get("ci_high") is None else e["ci_high"] - v)
        x = np.arange(len(judges)) + k * width
        ax.bar(x, vals, width, yerr=[lo, hi], capsize=3, label=cond)
        for xi, v in zip(x, vals, strict=True):
            if np.isnan(v):  # not computable (e.g. no gold judge left): say so instead of a blank
                ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.3")
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xticks(np.arange(len(judges)) + width * (len(conditions) - 1) / 2, judges)
    ax.set_ylabel("DBG score (judge - gold win rate)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
