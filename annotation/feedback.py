"""Fold human labels from the ledger back into the experiment and recompute the bias figures.

* ``merge_labels``: the judgment table's ``human`` column becomes the labels the table came with
  (kept in ``human_source`` so merging again never doubles them) followed by one label per Label
  Studio annotator (the latest version of that annotator's annotation; skips are not labels).
* ``inter_annotator``: percent agreement and Fleiss' kappa (statsmodels) over pairs with >= 2 labels,
  and Cohen's kappa when exactly two annotators labelled the same pairs.
* ``recompute``: self-preference EO (Def. 4.1) with the human majority as Y, DBG with the gold panel
  and with a human-augmented gold, and the DBG paper's Table 1 (win rates by gold vs by human,
  percent agreement of the gold winner with the human majority).

Human-augmented gold (the rule): on a pair with at least one human label, the gold vote for A is
the human vote share (an "a" counts 1, a "tie" 1/2, a "b" 0, averaged over annotators), REPLACING
the panel's vote; other pairs keep the panel vote. Humans are what the gold panel stands in for
(the DBG paper validates its gold against humans, Table 1), so where they have spoken they win;
the vote share, like the panel's mean probability, lets split annotators count as uncertainty.

The metrics themselves are ``judgebias.metrics`` (one implementation for the whole project); this
module only builds the tables they are computed on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from judgebias.annotation.keys import keyed_pairs
from judgebias.tables.labels import majority
from judgebias.tables.pairwise import Exclusions

HUMAN_GOLD_JUDGE = "__human_gold__"
LABEL_VALUE = {"a": 1.0, "b": 0.0, "tie": 0.5}


def latest_per_annotator(labels: pd.DataFrame) -> pd.DataFrame:
    """One label per (pair key, annotator): the most recently updated one (an annotator who submitted
    twice on a task counts once). Skipped and deleted annotations are dropped."""
    if labels.empty:
        return labels
    live = labels
    if "skipped" in live:
        live = live[~live["skipped"].astype(bool)]
    if "deleted" in live:
        live = live[~live["deleted"].astype(bool)]
    live = live.sort_values(["pair_key", "annotator", "updated_at", "annotation_id"])
    return live.drop_duplicates(["pair_key", "annotator"], keep="last").reset_index(drop=True)


def merge_labels(table: pd.DataFrame, labels: pd.DataFrame) -> tuple[pd.DataFrame, Exclusions]:
    """Return a copy of the judgment table with the ledger labels merged into ``human``.

    A label whose pair is not in the table, or whose pair texts changed since it was pushed (the
    pair key no longer matches), is excluded and counted, never attached to texts nobody labelled.
    """
    exclusions = Exclusions()
    out = table.copy()
    if "human_source" not in out.columns:
        out["human_source"] = out["human"].map(lambda v: list(v) if v is not None else [])
    live = latest_per_annotator(labels)
    current_keys = keyed_pairs(out)["pair_key"].to_dict()
    per_pair: dict[str, list[tuple[str, str]]] = {}
    for lab in live.itertuples(index=False):
        key = current_keys.get(lab.pair_id)
        if key is None:
            exclusions.add("label_for_pair_not_in_table", example=str(lab.pair_id))
        elif key != lab.pair_key:
            exclusions.add("pair_texts_changed_since_push", example=str(lab.pair_id))
        else:
            per_pair.setdefault(lab.pair_id, []).append((lab.annotator, lab.label))
    out["human"] = [
        list(src) + [lab for _, lab in per_pair.get(pid, [])]
        for pid, src in zip(out["pair_id"], out["human_source"], strict=True)
    ]
    out["human_annotators"] = [[who for who, _ in per_pair.get(pid, [])] for pid in out["pair_id"]]
    return out, exclusions


def inter_annotator(labels: pd.DataFrame) -> dict[str, Any]:
    """Agreement among annotators on pairs with >= 2 labels (latest version per annotator)."""
    from statsmodels.stats.inter_rater import cohens_kappa, fleiss_kappa

    live = latest_per_annotator(labels)
    if {"server_url", "task_id"} <= set(live.columns):
        # A task shared by pairs with identical texts is one judgment per annotator, not several.
        live = live.drop_duplicates(["server_url", "task_id", "annotator"])
    cats = ["a", "b", "tie"]
    by_pair = live.groupby("pair_key")["label"].agg(list) if len(live) else pd.Series(dtype=object)
    multi = by_pair[by_pair.map(len) >= 2]
    out: dict[str, Any] = {
        "annotators": int(live["annotator"].nunique()) if len(live) else 0,
        "pairs_labelled": len(by_pair),
        "pairs_multi_labelled": len(multi),
        "percent_agreement": None,
        "fleiss_kappa": None,
        "cohen_kappa": None,
    }
    if multi.empty:
        return out
    # Mean over pairs of the share of annotator pairs that agree (the usual multi-rater percent agreement).
    agree = [np.mean([x == y for x, y in combinations(labs, 2)]) for labs in multi]
    out["percent_agreement"] = float(np.mean(agree))
    counts = np.array([[labs.count(c) for c in cats] for labs in multi], dtype=float)
    # Fleiss' kappa needs the same number of raters per pair: use the most common count.
    sizes = counts.sum(axis=1)
    common = pd.Series(sizes).mode().iloc[0]
    same = counts[sizes == common]
    if len(same) >= 2 and same.sum(axis=0).astype(bool).sum() >= 2:
        out["fleiss_kappa"] = float(fleiss_kappa(same, method="fleiss"))
        out["fleiss_pairs"] = len(same)
    annotators = sorted(live["annotator"].unique())
    if len(annotators) == 2:
        wide = live.pivot(index="pair_key", columns="annotator", values="label").dropna()
        if len(wide) >= 2:
            table = pd.crosstab(
                pd.Categorical(wide[annotators[0]], cats),
                pd.Categorical(wide[annotators[1]], cats),
                dropna=False,
            ).to_numpy()
            if table.sum(axis=0).astype(bool).sum() >= 2 or table.sum(axis=1).astype(bool).sum() >= 2:
                out["cohen_kappa"] = float(cohens_kappa(table).kappa)
            out["cohen_pairs"] = len(wide)
    return out


def human_vote_share(human: Iterable[str]) -> float:
    labels = list(human)
    if not labels:
        return float("nan")
    return float(np.mean([LABEL_VALUE[x] for x in labels]))


def with_human_gold(table: pd.DataFrame, panel: Sequence[str]) -> pd.DataFrame:
    """The table with the human-augmented gold: on human-labelled pairs, the panel's rows are replaced
    by one row of the pseudo-judge ``__human_gold__`` voting the human vote share (see module doc)."""
    share = table.groupby("pair_id", sort=False)["human"].agg(
        lambda s: human_vote_share(max(s, key=len)) if len(s) else float("nan")
    )
    labelled = set(share[share.notna()].index)
    drop = table["judge"].isin(list(panel)) & table["pair_id"].isin(labelled)
    base = table[~drop]
    first = table.drop_duplicates("pair_id").set_index("pair_id")
    rows = first.loc[[pid for pid in first.index if pid in labelled]].reset_index()
    rows = rows.assign(
        judge=HUMAN_GOLD_JUDGE,
        p_a=rows["pair_id"].map(share).astype(float),
        verdict=None,
        p_a_ab=np.nan,
        p_a_ba=np.nan,
        verdict_ab=None,
        verdict_ba=None,
    )
    return pd.concat([base, rows[table.columns]], ignore_index=True)


def gold_vs_human(table: pd.DataFrame, judge: str, gold: Sequence[str] | None = None) -> dict[str, Any]:
    """DBG paper Table 1 on the human-labelled pairs: win rate of response A's generator side by gold
    and by the human majority, and the share of pairs where the gold winner is the human winner.

    Per generator pairing (X vs Y, named by ``generator_a`` / ``generator_b``) the win rate of X;
    a tie counts half. Pairs without a strict human majority are excluded (counted).
    """
    from judgebias.metrics.dbg import gold_votes
    from judgebias.metrics.frame import PAIR, prepare

    prepared = prepare(table)
    votes, _, panel = gold_votes(prepared, judge, gold)
    per_pair = prepared.drop_duplicates("pair_id").copy()
    per_pair["gold"] = votes[per_pair[PAIR].to_numpy()]
    per_pair["human_majority"] = (
        prepared.groupby("pair_id", sort=False)["human"]
        .agg(lambda s: majority(max(s, key=len)))
        .reindex(per_pair["pair_id"])
        .to_numpy()
    )
    labelled = per_pair[per_pair["human"].map(len) > 0]
    excl = Exclusions()
    excl.add("human_no_majority", int(labelled["human_majority"].isna().sum()))
    excl.add("no_gold", int(labelled["gold"].isna().sum()))
    both = labelled[labelled["human_majority"].notna() & labelled["gold"].notna()]
    gold_choice = np.where(both["gold"] > 0.5, "a", np.where(both["gold"] < 0.5, "b", "tie"))
    human_credit = both["human_majority"].map(LABEL_VALUE).to_numpy(dtype=float)
    gold_credit = np.where(both["gold"] > 0.5, 1.0, np.where(both["gold"] < 0.5, 0.0, 0.5))
    rows = []
    for (ga, gb), idx in both.groupby(["generator_a", "generator_b"], dropna=False).indices.items():
        rows.append(
            {
                "generator_a": ga,
                "generator_b": gb,
                "n": len(idx),
                "gold_win_rate_a": float(gold_credit[idx].mean()),
                "human_win_rate_a": float(human_credit[idx].mean()),
            }
        )
    n = len(both)
    return {
        "gold_panel": panel,
        "n": n,
        "percent_agreement": float((gold_choice == both["human_majority"].to_numpy()).mean()) if n else None,
        "gold_win_rate_a": float(gold_credit.mean()) if n else None,
        "human_win_rate_a": float(human_credit.mean()) if n else None,
        "by_generators": rows,
        "exclusions": excl.to_dict(),
    }


@dataclass
class Recomputed:
    judge: str
    figures: dict[str, Any] = field(default_factory=dict)

    def flat_metrics(self) -> dict[str, float]:
        """Numeric figures as flat MLflow metric names (None / NaN left out). Population estimates:
        ``eo.ppi``, ``eo.ppi.ci_low``, ``eo.ppi.ess``, ``eo.design``...; figures on the labelled pairs
        only carry the prefix ``labelled_only.`` so they never read as population figures."""
        out: dict[str, float] = {}

        def put(name: str, value: Any) -> None:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                out[name] = float(value)

        def put_estimate(name: str, est: Mapping[str, Any] | None) -> None:
            est = est or {}
            # The project convention (tracking/experiment.py): name, name.ci_low, name.ci_high, name.n.
            for part in ("value", "ci_low", "ci_high", "n", "p_value"):
                put(name if part == "value" else f"{name}.{part}", est.get(part))
            put(f"{name}.ess", est.get("effective_sample_size"))

        for name, fig in (self.figures.get("estimates") or {}).items():
            put_estimate(f"{name}.design", fig.get("design_based"))
            put_estimate(f"{name}.ppi", fig.get("ppi"))
        put_estimate("dbg_panel", self.figures.get("dbg_panel"))
        for key, est in (self.figures.get("labelled_only") or {}).items():
            if isinstance(est, Mapping):
                put_estimate(f"labelled_only.{key}", est)
        for part, value in (self.figures.get("inter_annotator") or {}).items():
            put(f"iaa.{part}", value)
        for part, value in (self.figures.get("labels") or {}).items():
            put(f"labels.{part}", value)
        return out


LABELLED_ONLY_NOTE = (
    "computed on the labelled pairs as if they were the whole population: valid for a uniform random "
    "sample only; with a probability design read the estimates, never these"
)


def _estimate(fn, *args, **kwargs) -> dict[str, Any]:
    from judgebias.stats import InsufficientData

    try:
        return fn(*args, **kwargs).to_dict()
    except InsufficientData as exc:
        return {"value": None, "insufficient": str(exc)}


def recompute(
    table: pd.DataFrame,
    labels: pd.DataFrame,
    judge: str,
    *,
    self_map: Mapping[str, Iterable[str]] | None = None,
    gold: Sequence[str] | None = None,
    reps: int = 2000,
    seed: int = 0,
    design: tuple | None = None,
) -> tuple[pd.DataFrame, Recomputed]:
    """Merge the labels and compute the figures for ``judge``; returns (merged table, figures).

    ``design``: (``SampleDesign``, pair ids, info) of the ledger's probability batches
    (``judgebias.annotation.loop.design_from_ledger``); with it every human-label figure is estimated for the
    population, Hájek and PPI++ (``estimates``). ``labelled_only`` keeps the plain figures on the
    labelled pairs (EO with the table's own labels and with the merged ones, DBG against the
    human-augmented gold), labelled as that subset. ``dbg_panel`` needs no human label.
    """
    from judgebias.metrics.dbg import dbg_score, gold_panel
    from judgebias.metrics.human import human_figures, pair_features
    from judgebias.metrics.self_preference import self_preference_eo

    merged, excl = merge_labels(table, labels)
    before = merged.assign(human=merged["human_source"])
    panel = gold_panel(merged, judge, gold)
    augmented = with_human_gold(merged, panel)
    present = set(augmented["judge"].dropna())
    live = latest_per_annotator(labels)
    figures: dict[str, Any] = {
        "judge": judge,
        "labels": {
            "annotations": len(live),
            "pairs": int(live["pair_id"].nunique()) if len(live) else 0,
            "excluded": excl.total,
        },
        "label_exclusions": excl.to_dict(),
    }
    if design is not None and design[0] is None:  # batches drawn, none of their pairs labelled yet
        figures["design"] = design[2]
        figures["estimates"] = {}
    elif design is not None:
        sample, order, info = design
        # Only the ledger's labels belong to the design; labels the table came with do not.
        from_ledger = merged.assign(human=[list(h[len(src):]) for h, src in
                                           zip(merged["human"], merged["human_source"], strict=True)])
        feats = pair_features(from_ledger, judge, self_map=self_map, gold=gold)
        figures["design"] = info
        figures["estimates"] = human_figures(feats, sample, order)
    else:
        figures["design"] = {"note": "no probability batch in the ledger: no population estimate"}
        figures["estimates"] = {}
    figures["dbg_panel"] = _estimate(dbg_score, merged, judge, self_map, panel, reps=reps, seed=seed)
    figures["labelled_only"] = {
        "note": LABELLED_ONLY_NOTE,
        "eo_table_labels": _estimate(self_preference_eo, before, judge, self_map),
        "eo": _estimate(self_preference_eo, merged, judge, self_map),
        "dbg_human_gold": _estimate(
            dbg_score, augmented, judge, self_map,
            [g for g in (*panel, HUMAN_GOLD_JUDGE) if g in present], reps=reps, seed=seed,
        ) if (augmented["judge"] == HUMAN_GOLD_JUDGE).any() else {"value": None,
                                                                  "insufficient": "no human label"},
        "gold_vs_human": gold_vs_human(merged, judge, panel) if panel else None,
        "human_gold_rule": "human vote share replaces the panel vote on human-labelled pairs",
    }
    figures["inter_annotator"] = inter_annotator(labels)
    return merged, Recomputed(judge=judge, figures=figures)
