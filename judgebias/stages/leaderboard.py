"""The run's leaderboard: ``judgebias leaderboard`` on the run's judgment table when it ranks two or
more generators, with the judges' figures from the metrics stage and their measured judging time."""

from __future__ import annotations

from typing import Any

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, noop, stage_output

REPS = 1000  # as the command's default


def generators_of(table: pd.DataFrame) -> list[str]:
    return sorted({str(g) for c in ("generator_a", "generator_b") if c in table.columns
                   for g in table[c].dropna()})


def judging_time(store: RunStore, judges: list[str], variant: RunLayout = RunLayout()) -> dict[str, dict]:
    """Seconds per 1,000 judgments (a pair judged in both orders) of each judge whose judging stage
    this run timed with every call made (none from the call cache: a cached call is no measure)."""
    stages = store.manifest().get("stages", {})
    out = {}
    for judge in judges:
        info = stages.get(variant.stage(f"judge_pairs[{judge}]")) or {}
        rows, calls, hits = info.get("rows") or 0, info.get("calls") or 0, info.get("hits") or 0
        if rows and calls and not hits and info.get("seconds"):
            usd = (info.get("usage") or {}).get("usd")  # an API judge with a price: its cost
            out[judge] = {"seconds_per_1000": 1000 * float(info["seconds"]) / rows,
                          "usd_per_1000": None if usd is None else 1000 * float(usd) / rows,
                          "source": f"measured in this run: {rows} pairs in both orders in "
                                    f"{float(info['seconds']):.1f} s (the judging stage's wall time, "
                                    "loading the model included)"}
    return out


def compute_leaderboard(
    cfg: ExperimentConfig,
    store: RunStore,
    table: pd.DataFrame,
    metrics: dict,
    *,
    variant: RunLayout = RunLayout(),
    progress: Progress = noop,
) -> dict[str, Any] | None:
    """The leaderboard of the run's generators (JSON and plots in the run folder), or None when the
    table ranks fewer than two generators. Read back when present: a rerun recomputes nothing."""
    gens = generators_of(table)
    if len(gens) < 2:  # before the read-back: such a table never had a leaderboard written
        progress(f"leaderboard: not computed ({len(gens)} generator(s) in the table; it ranks two or more)")
        return None
    from judgebias.reporting.leaderboard import leaderboard
    from judgebias.reporting.plots_leaderboard import leaderboard_figures, save_leaderboard_figures

    def compute(_: dict) -> dict:
        judges = sorted({str(j) for j in table["judge"].dropna()})
        result = leaderboard(table, self_map=cfg.own_generators(), reps=REPS, seed=cfg.dataset.seed,
                             audit=metrics.get("judges") or {}, timing=judging_time(store, judges, variant),
                             cluster_by=cfg.analyses.cluster_by)
        save_leaderboard_figures(leaderboard_figures(result), store.path(variant.leaderboard_plots))
        best = result["recommendation"].get("recommended")
        progress(f"leaderboard of {len(gens)} generators; "
                 f"recommended rater: {best or 'none passes the rules'}")
        return result

    def page(_: dict) -> None:
        if variant == RunLayout():
            from judgebias.stages.results import refresh_report

            refresh_report(cfg, store)  # the run's page ends with the leaderboard section

    return stage_output(store, document(variant.leaderboard), variant.stage("compute_leaderboard"), compute,
                        then=page)
