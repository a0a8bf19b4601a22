"""The labelling loop for a pointwise table: draw items by a probability design, push rating tasks,
pull ratings, estimate the population figures (``judgebias.metrics.pointwise_survey``).

The same rules as the pairwise loop (``judgebias.annotation.loop``): a batch is recorded in the ledger (every
item it could have drawn, with its probability) before any task is created, and a push that finds
drawn items without a task finishes that batch instead of drawing a new one.

The population is the units (an item, or an item and criterion where the table scores several) that
every measured judge scored. The Poisson design draws a unit with probability proportional to
``1 + own + spread``: ``own`` 1 where a measured judge wrote the response (self-preference needs
those), ``spread`` the standard deviation of the judges' scores over the scale's range, doubled
(where judges disagree a rating tells most); floored, so every unit can be drawn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from judgebias.annotation.loop import Batch
from judgebias.annotation.ratings import default_rubric, item_key, judge_scores_by_unit, live_ratings
from judgebias.annotation.sampling import DEFAULT_DESIGN, Frame, combined_design, draw_batch
from judgebias.annotation.store import Ledger
from judgebias.metrics.origin import self_set
from judgebias.metrics.pointwise_survey import rating_features, rating_figures, unit_ids


def rating_scale(table: pd.DataFrame) -> tuple[int, int]:
    scales = table[["scale_min", "scale_max"]].drop_duplicates()
    if len(scales) != 1:
        shown = ", ".join(f"{a}..{b}" for a, b in scales.itertuples(index=False))
        raise ValueError(f"the table mixes rating scales ({shown}): push one scale at a time")
    lo, hi = scales.iloc[0]
    return int(lo), int(hi)


def measured_judges(table: pd.DataFrame, judges: Sequence[str] | None) -> list[str]:
    present = sorted(j for j in table["judge"].unique() if j)
    if not judges:
        if not present:
            raise ValueError("the pointwise table has no judge rows (column 'judge' is empty everywhere)")
        return present
    unknown = [j for j in judges if j not in present]
    if unknown:
        raise ValueError(f"judge {unknown[0]!r} has no row in the table (judges: {', '.join(present)})")
    return list(judges)


def rating_units(table: pd.DataFrame, judges: Sequence[str], rubric: str | None = None,
                 self_map: Mapping[str, Iterable[str]] | None = None) -> pd.DataFrame:
    """One row per unit every measured judge scored (index: unit id): its texts, rubric, key, the
    judges' scores and what the designs need (``score``, ``stratum``, ``spread``)."""
    lo, hi = rating_scale(table)
    t = table.assign(unit_id=unit_ids(table).to_numpy())
    scored = t[t["judge"].isin(judges) & np.isfinite(t["score"].to_numpy(dtype=float))]
    counts = scored.groupby("unit_id")["judge"].nunique()
    keep = counts.index[counts == len(judges)]
    if not len(keep):
        raise ValueError(f"no item was scored by every measured judge ({', '.join(judges)})")
    first = t.drop_duplicates("unit_id").set_index("unit_id").loc[keep]
    own = np.zeros(len(first), bool)
    for j in judges:
        own |= first["generator"].astype(str).isin(list(self_set(table, j, self_map))).to_numpy()
    mine = scored[scored["unit_id"].isin(keep)]
    sd = mine.groupby("unit_id")["score"].std(ddof=0).reindex(keep).fillna(0.0)
    texts = [rubric or default_rubric(str(c), lo, hi) for c in first["criterion"]]
    scores = judge_scores_by_unit(scored, scored["unit_id"])
    return pd.DataFrame({
        "item_id": first["item_id"].astype(str), "prompt": first["prompt"], "response": first["response"],
        "rubric": texts,
        "item_key": [item_key(u, p, r, x)
                     for u, p, r, x in zip(keep, first["prompt"], first["response"], texts, strict=True)],
        "judge_scores": [scores.get(u, {}) for u in keep],
        "score": 1.0 + own + 2.0 * sd.to_numpy() / (hi - lo),
        "stratum": np.where(own, "own", "other"), "spread": 1.0,
    }, index=pd.Index(keep, name="unit_id"))


def rating_frame(units: pd.DataFrame, population: str = "all") -> Frame:
    """The design's view of the units (``draw_batch`` reads ``pair_key``, ``score``, ``stratum``)."""
    return Frame(units.rename(columns={"item_key": "pair_key"}), population, unit="items")


@dataclass(frozen=True)
class RatingSettings:
    design: str = DEFAULT_DESIGN
    min_prob: float | None = None
    seed: int = 0
    judges: Sequence[str] | None = None
    rubric: str | None = None
    self_map: Mapping[str, Iterable[str]] = field(default_factory=dict)


def next_rating_batch(table: pd.DataFrame, ledger: Ledger | None, budget: int, settings: RatingSettings, *,
                      record: bool = True) -> Batch:
    """Draw (and, with ``record``, record) the next batch of units, or the unpushed rest of the last."""
    judges = measured_judges(table, settings.judges)
    units = rating_units(table, judges, settings.rubric, settings.self_map)
    draws = ledger.draws() if ledger is not None else pd.DataFrame(
        columns=["pair_key", "pair_id", "selected", "batch"])
    if len(draws):
        pending = draws[draws["selected"] & ~draws["pair_key"].isin(ledger.pushed_keys())]
        if len(pending):
            rows = units.loc[units.index.intersection(pending["pair_id"])]
            pi = pending.drop_duplicates("pair_id", keep="last").set_index("pair_id")["pi"]
            return Batch(_with_pi(rows, pi), True, {"resumed_batch": int(pending["batch"].max()),
                                                         "to_push": len(rows)})
    exclude = draws.loc[draws["selected"], "pair_id"] if len(draws) else []
    number = int(draws["batch"].max()) + 1 if len(draws) else 1
    drawn = draw_batch(rating_frame(units), settings.design, budget, exclude=exclude,
                       seed=settings.seed * 100_003 + number, min_prob=settings.min_prob)
    before = set(exclude)
    chosen = drawn[drawn["selected"] & ~drawn.index.isin(list(before))]
    summary = {"batch": number, "design": settings.design, "population_size": len(units),
               "left_to_draw": len(units) - len(before), "drawn": len(chosen), "budget": budget,
               "expected": float(drawn["pi"].sum()), "pi_min": float(drawn["pi"].min()),
               "pi_max": float(drawn["pi"].max()), "judges": judges,
               "redrawn": int((drawn["selected"] & drawn.index.isin(list(before))).sum()),
               "per_stratum": chosen.groupby("stratum").size().to_dict()}
    if record and ledger is not None:
        ledger.record_batch(design=settings.design, population="all", seed=settings.seed, budget=budget,
                            params={"kind": "ratings", "min_prob": settings.min_prob, "judges": judges,
                                    "rubric": settings.rubric},
                            draws=drawn)
    return Batch(_with_pi(units.loc[chosen.index], chosen["pi"]), False, summary)


def _with_pi(rows: pd.DataFrame, pi: pd.Series) -> pd.DataFrame:
    """The units to push with the probability their batch drew them with (carried in the task's meta)."""
    return rows.assign(pi=pi.reindex(rows.index).to_numpy()).rename_axis("unit_id").reset_index()


def merge_ratings(table: pd.DataFrame, ratings: pd.DataFrame) -> pd.DataFrame:
    """The table with each rated unit's ``human_scores`` replaced by its pulled ratings (one per
    annotator); rows of units without a rating keep what they had."""
    units = unit_ids(table)
    per_unit = ratings.groupby("unit_id")["rating"].apply(lambda s: [float(x) for x in s]).to_dict()
    out = table.copy()
    out["human_scores"] = [per_unit.get(u, h) for u, h in zip(units, table["human_scores"], strict=True)]
    return out


def rating_estimates(table: pd.DataFrame, ledger: Ledger, judges: Sequence[str] | None = None, *,
                     self_map: Mapping[str, Iterable[str]] | None = None
                     ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(merged table, figures per judge): Hájek and PPI++ of the human mean, the judge-human bias and
    the score self-preference over the drawn population, from the design in the ledger."""
    judges = measured_judges(table, judges)
    live = live_ratings(ledger)
    merged = merge_ratings(table, live)
    draws = ledger.draws()
    if draws.empty:
        return merged, {j: {"design": {"note": "no batch drawn yet"}, "estimates": {}} for j in judges}
    # The rubric shown is part of an item's key: the one the last batch was pushed with.
    rubric = json.loads(ledger.batches()["params"].iloc[-1]).get("rubric")
    units = rating_units(table, judges, rubric, self_map)
    # A draw whose shown texts changed since (a new key) has no valid rating: dropped, as for pairs.
    stale = draws["pair_key"] != draws["pair_id"].map(units["item_key"])
    draws = draws[~stale]
    rated = live.loc[live["item_key"].isin(units["item_key"]), "unit_id"].unique()
    if not len(rated):
        note = {"note": f"no drawn item rated yet ({int(draws['selected'].sum())} drawn)",
                "stale_draws_dropped": int(stale.sum())}
        return merged, {j: {"design": note, "estimates": {}} for j in judges}
    design, order, info = combined_design(draws, rated, population="all")
    info["stale_draws_dropped"] = int(stale.sum())
    figures: dict[str, Any] = {}
    for judge in judges:
        feats = rating_features(merged, judge, self_map=self_map)
        figures[judge] = {"design": info, "estimates": rating_figures(feats, order, design)}
    return merged, figures


def rating_lines(figures: Mapping[str, Any]) -> list[str]:
    lines = []
    for judge, figs in figures.items():
        d = figs.get("design") or {}
        lines.append(f"{judge}:")
        if "note" in d:
            lines.append(f"  {d['note']}")
            continue
        lines.append(f"  design: {', '.join(d.get('designs', []))} over {d.get('population_size')} items, "
                     f"{d.get('labelled')} of {d.get('drawn')} drawn items rated; "
                     f"variance {d.get('variance')}")
        for name, fig in (figs.get("estimates") or {}).items():
            for key, label in (("design_based", "Hájek"), ("ppi", "PPI++")):
                est = fig.get(key) or {}
                shown = (f"{est['value']:+.3f} [{est['ci_low']:+.3f}, {est['ci_high']:+.3f}] n={est['n']}"
                         if est.get("value") is not None and est.get("ci_low") is not None
                         else f"n/a ({str(est.get('insufficient', 'not estimable'))[:70]})")
                lines.append(f"  {name if key == 'design_based' else '':<22} {label:<6} {shown}")
    return lines


def write_outputs(merged: pd.DataFrame, figures: Mapping[str, Any], out: Path) -> Path:
    from judgebias.runs.store import atomic_write_text
    from judgebias.tables.files import write_table

    write_table(merged, out)
    path = out.with_name(out.name.split(".")[0] + ".ratings.figures.json")
    atomic_write_text(path, json.dumps(figures, indent=2, sort_keys=True, default=str))
    return path


def flat_metrics(figures: Mapping[str, Any]) -> dict[str, float]:
    """``judge.figure.estimator.value`` (and ci_low / ci_high) for MLflow."""
    out: dict[str, float] = {}
    for judge, figs in figures.items():
        for name, fig in (figs.get("estimates") or {}).items():
            for key in ("design_based", "ppi"):
                for part in ("value", "ci_low", "ci_high"):
                    v = (fig.get(key) or {}).get(part)
                    if isinstance(v, (int, float)):
                        out[f"{judge}.{name}.{key}.{part}"] = float(v)
    return out
