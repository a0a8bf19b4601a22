"""Which pairs to send to human annotators first.

Human labels are expensive; a label is worth most where it can move the self-preference estimates.
Each candidate pair gets

    score = w_uncertain * (1 - 2 * |gold - 0.5|)     gold panel split (DBG's gold is uncertain)
          + w_disagree  * |p_judge - gold|           measured judge(s) vs gold panel
          + w_self      * self                       a measured judge wrote one of the two responses
          + w_flip      * flip                       the judge's choice changes with the order

where ``gold`` is the gold panel's P(A better): the mean over the gold judges of P_j(A) (p_a, or for a
verdict-only judge 1 / 0 / 0.5 for a / b / tie, as in the DBG paper, Sec. 3.1) and ``p_judge`` the
measured judge's P(A). With several measured judges the disagreement and flip terms are averaged
over them. With no gold score for a pair, a human label *is* its whole gold: uncertainty counts 1
and the disagreement term its expected value 0.5.

Why these terms: EO (self-preference paper, Def. 4.1) and DBG (DBG paper, Sec. 2) are computed on
the pairs where the judge rated its own response, so those pairs dominate (w_self defaults to 2);
where the gold panel is split, or the judge and gold disagree, a human label is most likely to change
the Y (EO) or the gold term (DBG) of that pair; an order flip marks a judge whose verdict on that pair
is noise. Pairs that already carry human labels or were already pushed are not candidates.

Pure functions: the same table, settings and exclusions give the same selection, ties broken by key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd

from judgebias.annotation.keys import keyed_pairs
from judgebias.metrics.dbg import panel_rule
from judgebias.metrics.origin import parse_self_map
from judgebias.tables.pairwise import Exclusions


# Deliberate parallel: a frozen record of defaulted numbers, shaped like store.UpsertCounts and
# backends.protocol.GenerationParams; nothing to share but the shape.
@dataclass(frozen=True)
class Weights:
    uncertain: float = 1.0
    disagree: float = 1.0
    self: float = 2.0
    flip: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"weight {name}={value!r} must be a finite number >= 0")


@dataclass
class Selection:
    """The chosen pairs (ranked) and everything that was not a candidate, counted by reason."""

    chosen: pd.DataFrame
    candidates: int
    exclusions: Exclusions = field(default_factory=Exclusions)


def prob_a(df: pd.DataFrame, p_col: str = "p_a", verdict_col: str = "verdict") -> pd.Series:
    """P(A better) per row: the probability when there is one, else the verdict as 1 / 0 / 0.5."""
    p = pd.to_numeric(df[p_col], errors="coerce").astype(float)
    from_verdict = df[verdict_col].map({"a": 1.0, "b": 0.0, "tie": 0.5}).astype(float)
    return p.where(p.notna(), from_verdict)


def _order_flip(df: pd.DataFrame) -> pd.Series:
    """1.0 where the two presentation orders give opposite choices, 0.0 where they agree, NaN unknown."""
    ab = prob_a(df, "p_a_ab", "verdict_ab")
    ba = prob_a(df, "p_a_ba", "verdict_ba")
    side_ab = np.sign(ab - 0.5)
    side_ba = np.sign(ba - 0.5)
    flip = (side_ab != side_ba).astype(float)
    return flip.where(ab.notna() & ba.notna())


def self_sides(
    df: pd.DataFrame, judge: str, self_map: Mapping[str, Iterable[str]] | None = None
) -> pd.Series:
    """Per row: "a" / "b" when ``judge`` (or a generator mapped to it) wrote exactly that response;
    None when it wrote neither or both. The judge's own generators are those the metrics use
    (``judgebias.metrics.origin.self_set``: its name, ``self_map`` and the ``judge_generator`` column)."""
    from judgebias.metrics.origin import self_set

    own = list(self_set(df, judge, self_map))
    is_a = df["generator_a"].isin(own)
    is_b = df["generator_b"].isin(own)
    return pd.Series(
        np.where(is_a & ~is_b, "a", np.where(is_b & ~is_a, "b", None)), index=df.index, dtype=object
    )


def score_pairs(
    table: pd.DataFrame,
    *,
    judges: Iterable[str] | None = None,
    gold_judges: Iterable[str] | None = None,
    self_map: Mapping[str, Iterable[str]] | None = None,
    weights: Weights = Weights(),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The usefulness score of every pair of a validated judgment table (see the module doc).

    Returns (pairs, own): one row per pair (index ``pair_id``) with its texts, ``pair_key``,
    generators, ``labelled``, ``gold``, the four components, ``score`` and ``rated`` (a measured judge
    rated it); and the measured judges' rows on pairs with their own response (``_self`` = "a"/"b").
    """
    missing = [
        c
        for c in (
            "pair_id",
            "prompt",
            "response_a",
            "response_b",
            "judge",
            "p_a",
            "verdict",
            "p_a_ab",
            "p_a_ba",
            "verdict_ab",
            "verdict_ba",
            "generator_a",
            "generator_b",
            "human",
        )
        if c not in table.columns
    ]
    if missing:
        raise ValueError(
            f"judgment table lacks column(s) {missing}; validate it with judgebias.tables.pairwise.validate"
        )
    self_map = parse_self_map(self_map)
    all_judges = sorted({j for j in table["judge"].dropna().unique() if j})
    measured = sorted(set(judges)) if judges is not None else all_judges
    unknown = [j for j in measured if j not in all_judges]
    if unknown:
        raise ValueError(f"judge(s) {unknown} not in the table (judges present: {all_judges})")
    if gold_judges is not None:
        gold_panel = sorted(set(gold_judges))
        unknown = [j for j in gold_panel if j not in all_judges]
        if unknown:
            raise ValueError(f"gold judge(s) {unknown} not in the table (judges present: {all_judges})")
    else:
        # The DBG panel rule with every measured judge left out; alone, a judge is its own panel.
        gold_panel = panel_rule(all_judges, None, exclude=measured) or list(all_judges)

    rows = table.assign(_p=prob_a(table), _flip=_order_flip(table))
    pairs = keyed_pairs(rows).join(rows.drop_duplicates("pair_id").set_index("pair_id")[
        ["generator_a", "generator_b"]])
    has_human = rows.assign(_h=rows["human"].map(len) > 0).groupby("pair_id", sort=False)["_h"].any()
    pairs["labelled"] = has_human.reindex(pairs.index).fillna(False).astype(bool)

    gold_rows = rows[rows["judge"].isin(gold_panel)]
    gold = gold_rows.groupby("pair_id")["_p"].mean().reindex(pairs.index)
    pairs["gold"] = gold
    pairs["uncertain"] = (1.0 - 2.0 * (gold - 0.5).abs()).fillna(1.0)

    meas = rows[rows["judge"].isin(measured)].copy()
    meas["_gold"] = meas["pair_id"].map(gold)
    meas["_dis"] = (meas["_p"] - meas["_gold"]).abs()
    meas.loc[meas["_gold"].isna() & meas["_p"].notna(), "_dis"] = 0.5
    meas["_self"] = None
    for judge in measured:
        mask = meas["judge"] == judge
        meas.loc[mask, "_self"] = self_sides(meas[mask], judge, self_map)
    grouped = meas.groupby("pair_id")
    pairs["disagree"] = grouped["_dis"].mean().reindex(pairs.index).fillna(0.0)
    pairs["flip"] = grouped["_flip"].mean().reindex(pairs.index).fillna(0.0)
    own = meas[meas["_self"].notna()]
    own_pairs = set(own["pair_id"].tolist())
    pairs["self"] = [1.0 if pid in own_pairs else 0.0 for pid in pairs.index.tolist()]
    pairs["rated"] = pairs.index.isin(meas["pair_id"].unique())

    pairs["score"] = (
        weights.uncertain * pairs["uncertain"]
        + weights.disagree * pairs["disagree"]
        + weights.self * pairs["self"]
        + weights.flip * pairs["flip"]
    )

    return pairs, own


def select_pairs(
    table: pd.DataFrame,
    budget: int,
    *,
    judges: Iterable[str] | None = None,
    gold_judges: Iterable[str] | None = None,
    self_map: Mapping[str, Iterable[str]] | None = None,
    weights: Weights = Weights(),
    exclude_keys: Iterable[str] = (),
    include_labelled: bool = False,
) -> Selection:
    """Rank the pairs of a validated judgment table by the value of a human label; keep ``budget``.

    ``judges`` are the measured judges (default: every judge in the table); ``gold_judges`` the gold
    panel (default: every judge that is not measured, or all judges when all are measured).
    ``exclude_keys`` are pair keys already pushed. Returns one row per chosen pair with the score,
    its four components and the human-readable reasons, best first.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    pairs, own = score_pairs(table, judges=judges, gold_judges=gold_judges, self_map=self_map,
                             weights=weights)
    exclusions = Exclusions()
    pushed = set(exclude_keys)
    keep = pd.Series(True, index=pairs.index)
    if not include_labelled:
        exclusions.add_mask("already_human_labelled", pairs["labelled"], pd.Series(pairs.index, pairs.index))
        keep &= ~pairs["labelled"]
    already = pairs["pair_key"].isin(pushed) & keep
    exclusions.add_mask("already_pushed", already, pd.Series(pairs.index, pairs.index))
    keep &= ~already
    cand = (
        pairs[keep].reset_index().sort_values(["score", "pair_key"], ascending=[False, True], kind="stable")
    )
    chosen = cand.head(budget).copy()
    exclusions.add("over_budget", len(cand) - len(chosen))
    # "who wrote what" is only spelled out for the chosen pairs (a per-group step, kept off the full table).
    mine = own[own["pair_id"].isin(chosen["pair_id"])]
    who: dict[str, list[str]] = {}
    for pid, judge, side in zip(mine["pair_id"], mine["judge"], mine["_self"], strict=True):
        who.setdefault(pid, []).append(f"{judge} wrote {side}")
    chosen["self_who"] = chosen["pair_id"].map(lambda pid: sorted(who[pid]) if pid in who else None)
    chosen["reasons"] = [_reasons(r) for r in chosen.itertuples()]
    chosen["rank"] = np.arange(1, len(chosen) + 1)
    cols = [
        "rank",
        "pair_id",
        "pair_key",
        "score",
        "uncertain",
        "disagree",
        "self",
        "flip",
        "gold",
        "reasons",
        "prompt",
        "response_a",
        "response_b",
        "generator_a",
        "generator_b",
    ]
    return Selection(chosen=chosen[cols].reset_index(drop=True), candidates=len(cand), exclusions=exclusions)


def _reasons(r) -> list[str]:
    out = []
    if isinstance(r.self_who, list):
        out.append("self: " + "; ".join(r.self_who))
    if np.isnan(r.gold):
        out.append("no gold judgment")
    elif r.uncertain >= 0.5:
        out.append(f"gold panel split (gold P(A)={r.gold:.2f})")
    if not np.isnan(r.gold) and r.disagree >= 0.25:
        out.append(f"judge vs gold |dP|={r.disagree:.2f}")
    if r.flip > 0:
        out.append(f"verdict flips with order ({r.flip:.0%} of measured judges)")
    return out or ["low value (filled remaining budget)"]
