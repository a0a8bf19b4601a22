"""Which pairs to label, drawn by a probability design so every figure can be estimated without bias.

A hand-picked set of pairs (the most contested first) is not representative of the pairs EO, DBG and
agreement are defined over; averaging it like a random sample gives figures further from the truth
than a random sample (measured: docs/benchmarks.md). Here every pair of a declared population gets a
known inclusion probability and the draw is random:

* ``uniform``: simple random sampling without replacement;
* ``stratified``: strata own/other x judge-gold agree/disagree x order flip/steady, simple random
  sampling within each, Neyman allocation (n_h proportional to N_h S_h, S_h from the gold panel's
  uncertainty, at least 2 per stratum so its variance is estimable);
* ``poisson``: each pair drawn independently with probability proportional to the usefulness score
  of ``judgebias.annotation.selection`` (self-judged, gold split, judge-gold disagreement, order flip),
  floored at ``min_prob`` so no pair is left out: the score shapes probabilities, never decides.

Several pushes are batches, each recorded in the ledger (``judgebias.annotation.store``) with the probability
every pair of the population had in it: simple random batches draw from the pairs not drawn before,
Poisson batches from all of them (a re-draw is free). ``combined_design`` turns the recorded batches
and the labels received into the ``SampleDesign`` the estimators need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from judgebias.annotation.selection import Weights, score_pairs
from judgebias.metrics.survey import POISSON, STRATIFIED, SampleDesign

DESIGNS = ("uniform", "stratified", "poisson")
POPULATIONS = {
    "all": "every pair a measured judge rated",
    "own": "pairs where a measured judge wrote exactly one of the two responses",
}
# Measured by the replay on PandaLM (docs/benchmarks.md): Poisson kept EO's coverage at 0.92-0.95 and
# narrowed it most, while the stratified design under-covered EO (0.86-0.92) though it suited agreement.
DEFAULT_DESIGN = "poisson"
DEFAULT_POPULATION = "all"


@dataclass(frozen=True)
class Frame:
    """The population's pairs (one row each, index ``pair_id``) with ``pair_key``, the usefulness
    ``score`` and its parts, and the ``stratum`` of the stratified design."""

    pairs: pd.DataFrame
    population: str
    unit: str = "pairs"  # what a row is, in messages ("items" for a rating table)


def population_frame(
    table: pd.DataFrame,
    population: str = DEFAULT_POPULATION,
    *,
    judges: Iterable[str] | None = None,
    gold_judges: Iterable[str] | None = None,
    self_map: Mapping[str, Iterable[str]] | None = None,
    weights: Weights = Weights(),
) -> Frame:
    """The declared population of a judgment table, with the scores and strata the designs use."""
    if population not in POPULATIONS:
        raise ValueError(f"unknown population {population!r} (known: {', '.join(POPULATIONS)})")
    pairs, _ = score_pairs(table, judges=judges, gold_judges=gold_judges, self_map=self_map,
                           weights=weights)
    pairs = pairs[pairs["rated"]]
    if population == "own":
        pairs = pairs[pairs["self"] > 0]
    if pairs.empty:
        raise ValueError(f"population {population!r} ({POPULATIONS[population]}) has no pair in this table")
    gold = pairs["gold"]
    pairs = pairs.assign(
        stratum=(np.where(pairs["self"] > 0, "own", "other").astype(object)
                 + np.where(gold.isna(), "|no-gold",
                            np.where(pairs["disagree"] >= 0.5, "|disagree", "|agree"))
                 + np.where(pairs["flip"] > 0, "|flip", "|steady")),
        # The label's uncertainty given the gold panel: sd of a Bernoulli(gold), 1/2 without gold.
        spread=np.sqrt((gold * (1 - gold)).fillna(0.25)) + 0.05,
    )
    return Frame(pairs=pairs.sort_index()[["pair_key", "score", "self", "gold", "disagree", "flip",
                                           "stratum", "spread"]], population=population)


def neyman_allocation(sizes: pd.Series, spreads: pd.Series, n: int, *, unit: str = "pairs") -> pd.Series:
    """n_h proportional to N_h S_h, at least min(2, N_h), at most N_h, summing to n (largest remainders)."""
    if n > int(sizes.sum()):
        raise ValueError(f"budget {n} exceeds the {int(sizes.sum())} {unit} left in the population")
    floor = np.minimum(2, sizes)
    if int(floor.sum()) > n:
        raise ValueError(f"budget {n} is below 2 {unit} for each of the {len(sizes)} strata "
                         f"(needs {int(floor.sum())}); raise it or use the uniform or poisson design")
    alloc = floor.astype(float).copy()
    left = n - int(floor.sum())
    room = (sizes - floor).astype(float)
    while left > 0 and room.sum() > 0:
        want = (sizes * spreads).where(room > 0, 0.0)
        share = want / want.sum() * left if want.sum() > 0 else room / room.sum() * left
        add = np.minimum(np.floor(share), room)
        if add.sum() == 0:  # hand out the remainder one by one, largest fractional share first
            order = (share - np.floor(share)).sort_values(ascending=False, kind="stable").index
            for h in order:
                if left == 0:
                    break
                if room[h] > 0:
                    alloc[h] += 1
                    room[h] -= 1
                    left -= 1
            continue
        alloc += add
        room -= add
        left -= int(add.sum())
    return alloc.astype(int)


def poisson_probabilities(score: np.ndarray, n: float, min_prob: float, *, unit: str = "pairs") -> np.ndarray:
    """pi_i = max(min_prob, c * score_i), capped at 1, with c such that sum(pi) = n."""
    score = np.asarray(score, dtype=float)
    size = score.size
    if not 0 < n <= size:
        raise ValueError(f"expected sample size {n} must be in (0, {size}]")
    if not 0 < min_prob <= 1:
        raise ValueError(f"min_prob must be in (0, 1], got {min_prob}")
    if min_prob * size > n + 1e-9:
        raise ValueError(f"the floor min_prob={min_prob:g} alone draws {min_prob * size:.1f} of {size} "
                         f"{unit}, more than the budget {n}: lower --min-prob")
    score = np.where(score > 0, score, 0.0)

    def total(c: float) -> float:
        return float(np.clip(c * score, min_prob, 1.0).sum())

    if score.sum() == 0 or total(1e12) < n:
        return np.full(size, n / size) if score.sum() == 0 else np.clip(1e12 * score, min_prob, 1.0)
    lo, hi = 0.0, 1.0
    while total(hi) < n:
        hi *= 2
    for _ in range(100):  # bisection on c: total(c) is continuous and non-decreasing
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) < n else (lo, mid)
    return np.clip(hi * score, min_prob, 1.0)


def draw_batch(frame: Frame, design: str, n: int, *, exclude: Iterable[str] = (), seed: int = 0,
               min_prob: float | None = None) -> pd.DataFrame:
    """One batch, as a row for EVERY pair of the population: its ``stratum``, the probability ``pi`` it
    had of being drawn in this batch, and whether it was ``selected``.

    Probabilities never depend on what earlier batches drew, so a pair's inclusion probability over
    all batches is 1 - prod(1 - pi) whatever happened (``combined_design``):

    * uniform / stratified: ``n`` of the pairs not drawn before (``exclude``), simple random sampling
      within strata; a pair drawn before gets the probability its stratum's pairs have now (what it
      would have had), and is never drawn again. Sizes and allocations follow from counts alone.
    * poisson: every pair, drawn before or not, gets pi from the score over the whole population with
      expected size ``n``; a pair drawn again costs no new label.
    """
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r} (known: {', '.join(DESIGNS)})")
    if n <= 0:
        raise ValueError(f"budget must be > 0, got {n}")
    pairs = frame.pairs
    done = pairs.index.isin(list(exclude))
    if done.all():
        raise ValueError(f"every one of the {frame.unit} of the population {frame.population!r} has been "
                         "drawn already")
    rng = np.random.default_rng(seed)
    out = pd.DataFrame({"pair_key": pairs["pair_key"], "stratum": pairs["stratum"]}, index=pairs.index)
    if design == "poisson":
        n = min(n, len(pairs))
        floor = min_prob if min_prob is not None else 0.5 * n / len(pairs)
        out["pi"] = poisson_probabilities(pairs["score"].to_numpy(), n, floor, unit=frame.unit)
        out["selected"] = rng.random(len(pairs)) < out["pi"].to_numpy()
        out["stratum"] = "all"
        return out
    n = min(n, int((~done).sum()))
    out["stratum"] = "all" if design == "uniform" else _strata_for(out["stratum"], out["stratum"][~done], n)
    left = out[~done]
    sizes = left.groupby("stratum", sort=True).size()
    # Neyman weights from every pair of the stratum (not only those left), so they follow from counts.
    spreads = pairs["spread"].groupby(out["stratum"], sort=True).mean().reindex(sizes.index)
    alloc = (pd.Series({"all": n}) if design == "uniform" else neyman_allocation(sizes, spreads, n,
                                                                                 unit=frame.unit))
    out["pi"] = out["stratum"].map((alloc / sizes).to_dict()).fillna(0.0).astype(float)
    out["selected"] = False
    for h, ix in left.groupby("stratum", sort=True).groups.items():
        if int(alloc[h]):
            out.loc[rng.choice(np.asarray(ix), size=int(alloc[h]), replace=False), "selected"] = True
    return out[out["pi"] > 0]


def _strata_for(strata: pd.Series, left: pd.Series, n: int) -> pd.Series:
    """The finest stratification for which ``n`` draws from the pairs ``left`` can give 2 to every
    stratum: the full strata, else own/other alone, else one stratum (a uniform draw)."""
    for level, left_level in ((strata, left), (strata.str.split("|").str[0], left.str.split("|").str[0])):
        if int(np.minimum(2, left_level.value_counts()).sum()) <= n:
            return level
    return pd.Series("all", index=strata.index)


def combined_design(draws: pd.DataFrame, labelled: Iterable[str], *, population: str = "") -> tuple[
        SampleDesign, pd.Index, dict]:
    """The design of everything labelled so far, from the recorded batches.

    ``draws``: the ledger's rows (batch, design, pair_id, stratum, pi, selected) over all batches;
    ``labelled``: pair ids with at least one human label. A drawn pair without a label yet (pending or
    skipped) is nonresponse: within its batch and stratum the labelled pairs are taken as a random
    subset of the drawn ones (the Label Studio project serves tasks in random order), so the
    probability is multiplied by labelled / drawn there. Returns (design, pair ids in design order,
    info with counts and the variance form used).
    """
    if draws.empty:
        raise ValueError("no batch was drawn by a probability design: nothing to estimate from")
    labelled = set(labelled)
    draws = draws.assign(labelled=draws["pair_id"].isin(labelled) & draws["selected"])
    # Response rate per (batch, stratum): labelled among drawn.
    grp = draws[draws["selected"]].groupby(["batch", "stratum"])
    rate = (grp["labelled"].sum() / grp.size()).rename("rate")
    draws = draws.join(rate, on=["batch", "stratum"])
    draws["rate"] = draws["rate"].fillna(1.0)
    draws["q"] = draws["pi"] * draws["rate"]
    per_pair = draws.groupby("pair_id").agg(
        q_miss=("q", lambda s: float(np.prod(1.0 - s.to_numpy()))),
        sampled=("labelled", "any"),
        stratum=("stratum", "first"),
    )
    designs = sorted(set(draws["design"]))
    same_strata = draws.groupby("pair_id")["stratum"].nunique().max() == 1
    stratified = all(d in ("uniform", "stratified") for d in designs) and len(designs) == 1 and same_strata
    info = {
        "batches": int(draws["batch"].nunique()),
        "designs": designs,
        "drawn": int(draws["selected"].sum()),
        "labelled": int(draws["labelled"].sum()),
        "population": population,
        "population_size": len(per_pair),
    }
    if stratified:
        # Sequential simple random samples of one stratum's remaining pairs add up to one simple random
        # sample of the stratum: pi = labelled_h / N_h, with the exact stratified variance.
        n_h = per_pair.groupby("stratum")["sampled"].transform("sum")
        size_h = per_pair.groupby("stratum")["sampled"].transform("size")
        pi = (n_h / size_h).to_numpy(dtype=float)
        keep = pi > 0
        info["variance"] = "stratified simple random sampling without replacement"
        if not keep.all():
            info["strata_without_labels"] = sorted(set(per_pair.loc[~keep, "stratum"]))
        per_pair = per_pair[keep]
        return (SampleDesign(pi[keep], per_pair["sampled"].to_numpy(), STRATIFIED,
                             per_pair["stratum"].to_numpy(), population), per_pair.index, info)
    pi = 1.0 - per_pair["q_miss"].to_numpy()
    keep = pi > 0
    info["variance"] = ("Poisson" if designs == ["poisson"]
                        else "Poisson approximation (batches of different designs or strata)")
    per_pair = per_pair[keep]
    return (SampleDesign(pi[keep], per_pair["sampled"].to_numpy(), POISSON, None, population),
            per_pair.index, info)
