"""Before/after comparisons shared by the two ablations: DBG per condition, its text and plot."""

from __future__ import annotations

import pandas as pd

from judgebias.config.experiment import ExperimentConfig


def dbg_summary(table: pd.DataFrame, judge: str, cfg: ExperimentConfig, gold: list[str] | None) -> dict:
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
            cfg.own_generators(),
            gold,
            human_as_gold=cfg.gold.human_as_gold,
        )
    except (InsufficientData, ValueError) as exc:
        return {"value": None, "skipped": str(exc)}
    return est.to_dict()


def format_compare(out: dict) -> str:
    parts = []
    for judge, row in out["judges"].items():
        cells = []
        for k, v in row.items():
            cells.append(f"{k} {v['value']:+.3f}" if v.get("value") is not None else f"{k} n/a")
        parts.append(f"{judge}: " + ", ".join(cells))
    return "; ".join(parts)
