"""DBG score (Difference Between the biased judge and the Gold judgment; "Beyond the Surface", Sec. 2-3).

DBG = (judge's win rate of its own responses) - (gold win rate of the same responses), over pairs
holding exactly one response of the judge. A pair is a win when the averaged probability favours
the own response (the paper selects "the response with the highest average probability"); a pair
at exactly 0.5 is a tie and counts half a win, for the judge and for the gold alike.

The gold judgment of a pair averages the votes of a panel of OTHER judges (never the judge being
measured): each gold judge votes its p_a, or 1 / 0 (0.5 for a tie) from its verdict when it has no
probability, exactly as the paper does for gold models without probabilities. Human labels can
stand in as gold (each annotator one vote). A gold judge that generated a response of the pair
(self-mapping applied) can leak its own self-preference into the gold: that is reported as a
warning, not hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.stats import (
    Estimate,
    InsufficientData,
    cluster_bootstrap_means,
    cluster_fields,
    clustered_how,
    clustered_mean_t,
    clustered_rate,
    count_reasons,
    nested,
    sign_test,
)

DEFAULT_REPS = 2000
# Below this many pairs the expanded bootstrap's coverage was 0.926 (2000 simulated 10-pair tables,
# `judgebias coverage`): still close to 95%, but the figure says so rather than over-promise.
SMALL_PAIRS = 25


def panel_rule(judges: Sequence[str], measured: str | None, gold: Sequence[str] | None = None,
               exclude: Sequence[str] = ()) -> list[str]:
    """THE gold-panel rule (the DBG paper's gold: other judges' mean): ``gold`` when given, else every
    judge; never the measured judge itself, never ``exclude`` (the style rewriter). ``judges`` are
    those available: the table's, or the config's before any table exists."""
    base = list(gold) if gold else list(judges)
    return [j for j in base if j != measured and j not in exclude]


def gold_panel(df: pd.DataFrame, judge: str | None, gold: Sequence[str] | None) -> list[str]:
    """The gold judges for ``judge`` in this table (``panel_rule``); ValueError for a gold judge the
    table does not have."""
    available = F.judges(df)
    unknown = [g for g in gold or () if g not in available]
    if unknown:
        raise ValueError(f"gold judge(s) {unknown} not in the table (judges: {available})")
    return panel_rule(available, judge, gold)


class GoldVotes(NamedTuple):
    """Per pair code (``frame.PAIR``): the gold vote for A in [0, 1] (NaN: none), the number of votes;
    and the panel that voted."""

    votes: np.ndarray
    counts: np.ndarray
    panel: list[str]


def gold_votes(df: pd.DataFrame, judge: str | None = None, gold: Sequence[str] | None = None, *,
               human_as_gold: bool = False) -> GoldVotes:
    """Per pair code (``frame.PAIR``): (gold vote for A in [0, 1] or NaN, number of votes, panel)."""
    prepared = F.prepare(df)
    pair = prepared[F.PAIR].to_numpy()
    n_pairs = int(pair.max()) + 1 if pair.size else 0
    if human_as_gold:
        hn = prepared[F.HUMAN_N].to_numpy()
        hv = prepared[F.HUMAN_VOTE].to_numpy(dtype=float)
        # Rows of one pair normally repeat its labels; keep the row with the most labels per pair.
        order = np.lexsort((-hn, pair))
        first = np.r_[True, pair[order][1:] != pair[order][:-1]]
        pick = order[first]
        votes = np.full(n_pairs, np.nan)
        counts = np.zeros(n_pairs, dtype=np.int64)
        votes[pair[pick]] = hv[pick]
        counts[pair[pick]] = hn[pick]
        return GoldVotes(votes, counts, ["human"])
    panel = gold_panel(prepared, judge, gold)
    if not panel:
        raise InsufficientData(f"no gold judge other than {judge!r} in the table (pass gold judges or "
                               "use human labels as gold)")
    vote = prepared[F.VOTE].to_numpy(dtype=float)
    use = F.isin(prepared["judge"], panel) & ~np.isnan(vote)
    sums = np.bincount(pair[use], weights=vote[use], minlength=n_pairs)
    counts = np.bincount(pair[use], minlength=n_pairs)
    with np.errstate(invalid="ignore", divide="ignore"):
        votes = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return GoldVotes(votes, counts, panel)


def win_credit(p_own: np.ndarray) -> np.ndarray:
    """1 when the own response is preferred, 0 when the other is, 1/2 at exactly 0.5."""
    return np.where(p_own > 0.5, 1.0, np.where(p_own < 0.5, 0.0, 0.5))


def dbg_score(df: pd.DataFrame, judge: str, self_map: origin.SelfMap | None = None,
              gold: Sequence[str] | None = None, *, human_as_gold: bool = False,
              reps: int = DEFAULT_REPS, seed: int = 0, votes: GoldVotes | None = None,
              rows: pd.DataFrame | None = None) -> Estimate:
    """DBG score of ``judge`` with a per-pair bootstrap 95% interval (seeded; expanded for small samples,
    ``stats.bootstrap_mean``) and an exact sign test
    of "the judge favours its own response more often than the gold does"; where pairs nest in
    clusters (prompts), a bootstrap over the clusters (``stats.cluster_bootstrap_means``) and a
    Wald t-test of the mean difference on its CR1 standard error.

    ``votes`` (``gold_votes`` of this table, judge and settings) and ``rows`` (the judge's prepared
    rows) may be given where the caller has them: ``analyze`` computes them once per judge for
    its gold figures (each is a pass over the whole table)."""
    F.require(df, ["judge", "generator_a", "generator_b"], "dbg_score")
    if reps < 100:
        raise ValueError(f"dbg_score: reps={reps} is too few for a 95% percentile interval (>= 100)")
    prepared = F.prepare(df)
    rows = F.judge_rows(prepared if rows is None else rows, judge, "dbg_score")
    votes, nvotes, panel = votes or gold_votes(prepared, judge, gold, human_as_gold=human_as_gold)
    own_a, own_b = origin.own_sides(rows, judge, self_map)
    pair = rows[F.PAIR].to_numpy()
    jvote = rows[F.VOTE].to_numpy(dtype=float)
    gvote = votes[pair]
    keep, excl = count_reasons([
        ("no_own_response", ~own_a & ~own_b),
        ("both_own", own_a & own_b),
        ("judge_missing", np.isnan(jvote)),
        ("no_gold", np.isnan(gvote)),
    ], len(rows))
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData(f"no pair with exactly one own response, a judge vote and a gold vote; "
                               f"excluded: {excl}")
    a_is_own = own_a[keep]
    judge_win = win_credit(np.where(a_is_own, jvote[keep], 1 - jvote[keep]))
    gold_win = win_credit(np.where(a_is_own, gvote[keep], 1 - gvote[keep]))
    d = judge_win - gold_win
    clusters = F.clusters(rows, keep)
    low, high, _ = cluster_bootstrap_means(d, clusters, reps=reps, seed=seed)
    n_plus, n_minus = int((d > 0).sum()), int((d < 0).sum())
    if nested(clusters):
        t = clustered_mean_t(d, clusters)
        statistic, p_value, deff = t["statistic"], t["p_value"], t["design_effect"]
        how = (f"expanded percentile cluster bootstrap ({reps} reps over {clusters.count} clusters, seed "
               f"{seed}), Wald t-test on the CR1 standard error, {clustered_how(clusters)}")
    else:
        statistic, p_value, deff = float(n_plus - n_minus), sign_test(n_plus, n_minus), 1.0
        how = f"expanded percentile pair bootstrap ({reps} reps, seed {seed}), sign test"

    warnings: list[str] = []
    if not human_as_gold:
        kept = rows.loc[keep]
        for g in panel:
            mine = list(origin.self_set(prepared, g, self_map))
            leak = F.isin(kept["generator_a"], mine) | F.isin(kept["generator_b"], mine)
            if leak.any():
                warnings.append(f"gold judge {g!r} generated a response in {int(leak.sum())} of {n} pairs "
                                "(its own self-preference can leak into the gold)")
        if gold and judge in gold:
            warnings.append(f"{judge!r} was dropped from its own gold panel")

    if n < SMALL_PAIRS and not nested(clusters):
        warnings.append(f"only {n} pairs: below {SMALL_PAIRS} the interval covered about 93% rather than 95% "
                        "in the coverage benchmark (docs/benchmarks.md)")
    jw, gw = clustered_rate(judge_win, clusters), clustered_rate(gold_win, clusters)
    return Estimate(
        value=float(d.mean()), ci_low=low, ci_high=high, n=n, exclusions=excl,
        statistic=statistic, p_value=p_value,
        method=f"win rate(judge) - win rate(gold); {how}",
        details={
            "judge_win_rate": {k: jw[k] for k in ("value", "ci_low", "ci_high")},
            "gold_win_rate": {k: gw[k] for k in ("value", "ci_low", "ci_high")},
            "judge_ties": int((judge_win == 0.5).sum()), "gold_ties": int((gold_win == 0.5).sum()),
            "judge_more_favourable": n_plus, "gold_more_favourable": n_minus,
            "gold_panel": panel, "gold_votes_per_pair": float(nvotes[pair[keep]].mean()),
        },
        **cluster_fields({"clusters": clusters.count, "design_effect": deff}, clusters, warnings))


def pairwise_win_rates(df: pd.DataFrame, *, include_gold: bool = True) -> pd.DataFrame:
    """Win rate of generator X over generator Y per judge (rows of the DBG paper's Figure 2).

    Pairings are unordered (X < Y by name); a tie counts half. ``gold`` averages every judge's vote
    on the pair, ``human`` uses the human vote share. Columns: generator_x, generator_y, rater,
    win_rate_x, n.
    """
    F.require(df, ["judge", "generator_a", "generator_b"], "pairwise_win_rates")
    prepared = F.prepare(df)
    # Work on integer codes over one shared list of names; strings only come back in the result.
    names, codes = _shared_codes(prepared, ["generator_a", "generator_b", "judge"])
    ga, gb, rater = codes
    valid = (ga >= 0) & (gb >= 0) & (ga != gb)
    flip = (ga > gb)[valid]  # names are sorted, so code order is name order
    x = np.where(flip, gb[valid], ga[valid])
    y = np.where(flip, ga[valid], gb[valid])
    # In place on the selected copies: the same 1 - v where flipped, without two more table-sized arrays.
    vx = prepared[F.VOTE].to_numpy(dtype=float)[valid]
    vx[flip] = 1 - vx[flip]
    hx = prepared[F.HUMAN_VOTE].to_numpy(dtype=float)[valid]
    hx[flip] = 1 - hx[flip]
    r = rater[valid]
    pair = prepared[F.PAIR].to_numpy()[valid]
    if not valid.any():
        return pd.DataFrame(columns=["generator_x", "generator_y", "rater", "win_rate_x", "n"])
    frames = []
    judged = (r >= 0) & ~np.isnan(vx)
    frames.append(_group_rates(x[judged], y[judged], r[judged], win_credit(vx[judged]), names))
    # One unit per pair for the gold (mean of every judge's vote) and the human rows.
    n_pairs = int(pair.max()) + 1
    first = np.full(n_pairs, -1, dtype=np.int64)
    first[pair[::-1]] = np.arange(pair.size)[::-1]  # any row of the pair: x, y are per pair
    have = first >= 0
    px, py = x[first[have]], y[first[have]]
    ok = ~np.isnan(vx)
    sums = np.bincount(pair[ok], weights=vx[ok], minlength=n_pairs)[have]
    cnt = np.bincount(pair[ok], minlength=n_pairs)[have]
    hmax = np.full(n_pairs, np.nan)
    hok = ~np.isnan(hx)
    hmax[pair[hok]] = hx[hok]
    per_pair = {"gold": np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan), "human": hmax[have]}
    for name in (("gold", "human") if include_gold else ("human",)):
        v = per_pair[name]
        m = ~np.isnan(v)
        if m.any():
            frames.append(_group_rates(px[m], py[m], None, win_credit(v[m]), names, label=name))
    out = pd.concat(frames, ignore_index=True)
    return out.rename(columns={"mean": "win_rate_x", "size": "n"})[
        ["generator_x", "generator_y", "rater", "win_rate_x", "n"]]


def _shared_codes(df: pd.DataFrame, columns: list[str]) -> tuple[list[str], list[np.ndarray]]:
    """Codes into one sorted list of the columns' names (-1: missing), in the smallest integer type
    that holds them: a categorical's own codes are mapped, not the column factorized again."""
    per_col = []
    for c in columns:
        values = df[c]
        if isinstance(values.dtype, pd.CategoricalDtype):
            per_col.append((values.cat.codes.to_numpy(), values.cat.categories))
        else:
            per_col.append(pd.factorize(values))
    names = sorted({str(u) for _, uniques in per_col for u in uniques})
    index = {name: i for i, name in enumerate(names)}
    dtype = np.int16 if len(names) < 2**15 else np.int64
    out = []
    for codes, uniques in per_col:
        lut = np.array([index[str(u)] for u in uniques] + [-1], dtype=dtype)
        out.append(lut[codes])
    return names, out


def _group_rates(x, y, rater, win, names, label: str | None = None) -> pd.DataFrame:
    r = rater if rater is not None else np.zeros_like(x)
    code, groups = F.distinct_rows([x, y, r])
    n, s = np.bincount(code), np.bincount(code, weights=win)
    ux, uy, ur = groups.T
    arr = np.array(names, dtype=object)
    return pd.DataFrame({"generator_x": arr[ux], "generator_y": arr[uy],
                         "rater": arr[ur] if rater is not None else label, "mean": s / n, "size": n})
