"""A bias-corrected leaderboard: Bradley-Terry strengths of the generators in a pairwise judgment
table, per judge, under variants that each remove one source of the judge's bias.

* ``raw``: the judge's verdicts (or P(A)) as they are;
* ``style``: Arena-Hard-Auto's style control: normalised length and markdown-density differences as
  standardised covariates, so the strengths are those at equal style;
* ``related``: without the comparisons where the judge is related (self or family) to a contestant;
  a contestant related to the judge then drops out of that judge's ranking;
* ``related_term``: the judge's verdicts pooled with those of the other judges that are related to
  neither contestant, strengths shared, plus explicit self and family terms on the judge's rows (a
  self term cannot be told apart from the related model's strength on the judge's rows alone: the
  other judges are its reference);
* ``panel``: per comparison the mean vote of the judges related to neither contestant (PoLL-style:
  Verga et al. 2024, "Replacing Judges with Juries"); the panel is named per comparison;
* ``human_anchored``: the judge's strengths corrected with the human labels by PPI++ (``anchored``);
* ``human``: the human labels' vote share for A (a tie label counting half), where labels exist.

Every fit is refitted on the same bootstrap resamples of the prompts (``bradley_terry``), so the
intervals of a variant, of the human ranking and of their rank agreement (``rank_agreement``) come
from the same draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from judgebias.metrics import bradley_terry as bt
from judgebias.metrics.anchored import anchored_weights, tuned_lambda
from judgebias.metrics.frame import (
    CLUSTER,
    CLUSTER_BY,
    HUMAN_N,
    HUMAN_VOTE,
    MARKDOWN,
    MD_A,
    MD_B,
    PAIR,
    VOTE,
    WORDS_A,
    WORDS_B,
    prepare,
    require,
)
from judgebias.metrics.frame import judges as judge_names
from judgebias.metrics.origin import SelfMap, self_set, with_family

RAW, STYLE, RELATED, RELATED_TERM, PANEL, HUMAN = "raw", "style", "related", "related_term", "panel", "human"
HUMAN_ANCHORED = "human_anchored"
VARIANTS = (RAW, STYLE, RELATED, RELATED_TERM, PANEL, HUMAN_ANCHORED, HUMAN)
STYLE_FEATURES = ("length", *MARKDOWN)


@dataclass(frozen=True)
class Comparisons:
    """The usable comparisons of one rater: rows of the prepared table, contestants, outcome."""

    rows: np.ndarray          # positions in the prepared table
    model_a: np.ndarray
    model_b: np.ndarray
    y: np.ndarray
    exclusions: Mapping[str, int] = field(default_factory=dict)

    def take(self, keep: np.ndarray) -> Comparisons:
        return Comparisons(self.rows[keep], self.model_a[keep], self.model_b[keep], self.y[keep],
                           self.exclusions)


def prompt_text(values: pd.Series) -> np.ndarray:
    return values.astype(object).where(values.notna(), "").astype(str).str.strip().to_numpy()


def judge_comparisons(prep: pd.DataFrame, judge: str) -> Comparisons:
    """The rows of ``judge`` that compare two named, different generators with a usable vote."""
    mask = (prep["judge"] == judge).to_numpy(dtype=bool, na_value=False)
    return _comparisons(prep, np.flatnonzero(mask), prep[VOTE].to_numpy(dtype=float))


def human_comparisons(prep: pd.DataFrame) -> Comparisons:
    """One comparison per pair with human labels: the share of the labels for A (a tie counts half)."""
    labelled = prep[HUMAN_N].to_numpy() > 0
    first = np.zeros(len(prep), dtype=bool)
    _, idx = np.unique(prep[PAIR].to_numpy(), return_index=True)
    first[idx] = True
    out = _comparisons(prep, np.flatnonzero(first & labelled), prep[HUMAN_VOTE].to_numpy(dtype=float))
    unlabelled = int(np.sum(first & ~labelled))
    return Comparisons(out.rows, out.model_a, out.model_b, out.y,
                       {**out.exclusions, **({"no_human_label": unlabelled} if unlabelled else {})})


def _comparisons(prep: pd.DataFrame, rows: np.ndarray, vote: np.ndarray) -> Comparisons:
    ga, gb = prompt_text(prep["generator_a"])[rows], prompt_text(prep["generator_b"])[rows]
    y = vote[rows]
    reasons = [("no_generator", (ga == "") | (gb == "")), ("same_generator", ga == gb),
               ("no_vote", ~np.isfinite(y))]
    bad = np.zeros(rows.size, dtype=bool)
    exclusions: dict[str, int] = {}
    for name, hit in reasons:
        fresh = hit & ~bad
        if fresh.any():
            exclusions[name] = int(fresh.sum())
        bad |= hit
    keep = ~bad
    return Comparisons(rows[keep], ga[keep], gb[keep], y[keep], exclusions)


def style_covariates(prep: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Arena-Hard-Auto's style features of the comparisons ``rows``, standardised (mean 0, sd 1 over
    these comparisons): length (lA - lB) / (lA + lB) in words, and per markdown element (headers,
    list items, bold spans) the density difference (dA - dB) / (dA + dB + 1), d = count / words.
    A feature that does not vary over the rows is left out (named by the caller)."""
    wa = prep[WORDS_A].to_numpy(dtype=float)[rows]
    wb = prep[WORDS_B].to_numpy(dtype=float)[rows]
    total = wa + wb
    cols = [np.divide(wa - wb, total, out=np.zeros_like(total), where=total > 0)]
    for ca, cb in zip(MD_A, MD_B, strict=True):
        da = prep[ca].to_numpy(dtype=float)[rows] / np.maximum(wa, 1.0)
        db = prep[cb].to_numpy(dtype=float)[rows] / np.maximum(wb, 1.0)
        cols.append((da - db) / (da + db + 1.0))
    z, names = [], []
    for name, col in zip(STYLE_FEATURES, cols, strict=True):
        sd = float(np.std(col)) if col.size else 0.0  # no comparison: nothing varies
        if sd > 1e-12:
            z.append((col - col.mean()) / sd)
            names.append(name)
    return (np.column_stack(z) if z else np.zeros((rows.size, 0))), names


def relations(prep: pd.DataFrame, judge: str, self_map: SelfMap | None,
              family_map: SelfMap | None) -> tuple[frozenset[str], frozenset[str]]:
    """(self, family-but-not-self) generator names of ``judge``."""
    mine = self_set(prep, judge, self_map)
    family = frozenset(g for g in with_family(None, family_map).get(judge, ()) if g not in mine)
    return mine, family


def _side_term(c: Comparisons, names: frozenset[str]) -> np.ndarray:
    return np.isin(c.model_a, list(names)).astype(float) - np.isin(c.model_b, list(names)).astype(float)


@dataclass
class Draws:
    """The bootstrap of the whole table: each prepared row's prompt code and the resample counts."""

    codes: np.ndarray
    counts: np.ndarray
    unit: str = "the prompts"  # what the resamples draw (the methods say it)

    def weights(self, rows: np.ndarray) -> np.ndarray:
        return self.counts[:, self.codes[rows]]

    @property
    def reps(self) -> int:
        return int(self.counts.shape[0])


def fit_bt(c: Comparisons, draws: Draws, what: str, z: np.ndarray | None = None,
         covariates: Sequence[str] = ()) -> bt.BTFit:
    models = sorted(set(c.model_a) | set(c.model_b))
    if len(models) < 2 or c.y.size == 0:
        raise ValueError(f"{what}: fewer than two models with a usable comparison")
    x = bt.design(models, c.model_a, c.model_b)
    if z is not None and z.shape[1]:
        x = np.hstack([x, z])
    return bt.fit_with_bootstrap(models, x, c.y, draws.weights(c.rows), covariates, what, unit=draws.unit)


def panel_comparisons(prep: pd.DataFrame, judges: Sequence[str], related: Mapping[str, frozenset[str]]
                      ) -> tuple[Comparisons, np.ndarray]:
    """Per pair, the mean vote of the judges related to neither contestant, and the panel's name
    (its judges joined by ``+``). Pairs whose every judge is related to a contestant are excluded."""
    per_judge = {j: judge_comparisons(prep, j) for j in judges}
    pair = prep[PAIR].to_numpy()
    records = []
    for j, c in per_judge.items():
        rel = list(related[j])
        ok = ~(np.isin(c.model_a, rel) | np.isin(c.model_b, rel))
        records.append(pd.DataFrame({"pair": pair[c.rows], "row": c.rows, "a": c.model_a, "b": c.model_b,
                                     "y": c.y, "judge": j, "ok": ok}))
    if not records:
        raise ValueError("panel: the table has no judge")
    allrows = pd.concat(records, ignore_index=True)
    usable = allrows[allrows["ok"]]
    if usable.empty:
        raise ValueError("panel: every judge is related to a contestant of every comparison")
    grouped = usable.sort_values("judge").groupby("pair", sort=True)
    agg = grouped.agg(row=("row", "first"), a=("a", "first"), b=("b", "first"), y=("y", "mean"),
                      panel=("judge", lambda s: "+".join(s)))
    lost = int(allrows["pair"].nunique() - len(agg))
    exclusions = {"every_judge_related": lost} if lost else {}
    return (Comparisons(agg["row"].to_numpy(), agg["a"].to_numpy(dtype=object).astype(str),
                        agg["b"].to_numpy(dtype=object).astype(str), agg["y"].to_numpy(dtype=float),
                        exclusions), agg["panel"].to_numpy(dtype=object).astype(str))


def related_term_comparisons(prep: pd.DataFrame, judge: str, judges: Sequence[str],
                             related: Mapping[str, frozenset[str]], mine: frozenset[str],
                             family: frozenset[str]) -> tuple[Comparisons, np.ndarray, list[str]]:
    """The judge's comparisons and the reference judges' unrelated ones, with the self / family terms
    (+1 when A is the judge's own / family's, -1 for B, 0 on the reference rows)."""
    own = judge_comparisons(prep, judge)
    refs = []
    for other in judges:
        if other == judge:
            continue
        c = judge_comparisons(prep, other)
        rel = list(related[other])
        refs.append(c.take(~(np.isin(c.model_a, rel) | np.isin(c.model_b, rel))))
    if not refs or sum(r.y.size for r in refs) == 0:
        raise ValueError(f"related_term[{judge}]: no other judge unrelated to the contestants to be the "
                         "reference of the self/family term")
    terms, names = [], []
    for name, group in (("self", mine), ("family", family)):
        t = _side_term(own, group)
        if np.any(t != 0):
            terms.append(np.concatenate([t, *[np.zeros(r.y.size) for r in refs]]))
            names.append(name)
    if not names:
        raise ValueError(f"related_term[{judge}]: the judge is related to no contestant (--self/--family)")
    pooled = Comparisons(np.concatenate([own.rows, *[r.rows for r in refs]]),
                         np.concatenate([own.model_a, *[r.model_a for r in refs]]),
                         np.concatenate([own.model_b, *[r.model_b for r in refs]]),
                         np.concatenate([own.y, *[r.y for r in refs]]), own.exclusions)
    return pooled, np.column_stack(terms), names


@dataclass
class Leaderboard:
    """Every fit: ``fits[variant][rater]`` (rater: a judge, ``panel`` or ``human``), the reasons of
    the fits that could not be made, and the panel's name per comparison."""

    fits: dict[str, dict[str, bt.BTFit]]
    skipped: dict[str, dict[str, str]]
    exclusions: dict[str, dict[str, dict[str, int]]]
    notes: dict[str, dict[str, str]]
    panels: dict[str, str]
    reps: int
    seed: int
    # Each judge's (self, family-but-not-self) generators among the table's: what R1 of
    # ``recommend`` reads.
    relations: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    human_pairs: int = 0  # pairs with a usable human label (the planner's n)
    pairs: int = 0  # pairs in the table (the planner's population)
    cluster_by: str = "prompt"  # the column whose values the bootstrap resamples ("none": pairs)
    clusters: int = 0  # how many it resamples


def _label_mask(prep: pd.DataFrame, label_sample: int | None, seed: int) -> np.ndarray:
    """Rows whose pair's human labels ``human_anchored`` may use: every labelled pair, or a seeded
    uniform sample of ``label_sample`` of them (to see what a small label budget buys; the ``human``
    reference keeps every label)."""
    labelled = (prep[HUMAN_N].to_numpy() > 0) & np.isfinite(prep[HUMAN_VOTE].to_numpy(dtype=float))
    if label_sample is None:
        return labelled
    if label_sample < 1:
        raise ValueError(f"label_sample must be at least 1, got {label_sample}")
    pairs = np.unique(prep[PAIR].to_numpy()[labelled])
    rng = np.random.default_rng([seed, 31])
    keep = rng.choice(pairs, size=min(label_sample, pairs.size), replace=False)
    return labelled & np.isin(prep[PAIR].to_numpy(), keep)


def _anchored(prep: pd.DataFrame, c: Comparisons, usable: np.ndarray, draws: Draws, judge: str
              ) -> tuple[bt.BTFit, str]:
    y = prep[HUMAN_VOTE].to_numpy(dtype=float)[c.rows]
    lab = usable[c.rows]
    if not lab.any():
        raise ValueError(f"human_anchored[{judge}]: no comparison of the judge has human labels")
    models = sorted(set(c.model_a) | set(c.model_b))
    x = bt.design(models, c.model_a, c.model_b)
    # The table carries no design: the labelled comparisons are taken as a uniform sample of the
    # judge's comparisons (pi = n / N); a caller with a sampling design would pass its pi here.
    pi = np.full(c.y.size, lab.mean())
    lam = tuned_lambda(x, c.y, y, lab, pi, len(models))
    w, target = anchored_weights(c.y, y, lab, pi, lam)
    note = (f"{int(lab.sum())} of {c.y.size} comparisons human-labelled (taken as a uniform sample, pi = "
            f"{pi[0]:.3f}); lambda = {lam:.3f}" + ("; every comparison labelled: the humans' own strengths"
                                                   if lab.all() else ""))
    fit = bt.fit_with_bootstrap(models, x, target, draws.weights(c.rows), (), f"human_anchored[{judge}]",
                                row_weights=w, method=f"PPI++ (power-tuned lambda = {lam:.3f})",
                                unit=draws.unit)
    return fit, note


def fit_leaderboard(df: pd.DataFrame, *, self_map: SelfMap | None = None, family_map: SelfMap | None = None,
                    judges: Sequence[str] | None = None, reps: int = 1000, seed: int = 0,
                    label_sample: int | None = None, cluster_by: str | None = None) -> Leaderboard:
    """Fit every variant for every judge of ``df`` (a validated judgment table). ``label_sample``:
    ``human_anchored`` uses a seeded uniform sample of that many labelled pairs instead of all.
    ``cluster_by``: the column whose values the bootstrap resamples (``frame.prepare``'s; default
    the prompt, ``"none"``: every pair on its own), the clusters every other figure reads."""
    require(df, ["pair_id", "prompt", "generator_a", "generator_b", "response_a", "response_b"],
            "leaderboard")
    if reps < 20:
        raise ValueError(f"reps must be at least 20 for a 95% percentile interval, got {reps}")
    prep = prepare(df, cluster_by=cluster_by).reset_index(drop=True)
    names = list(judges) if judges else judge_names(prep)
    unknown = [j for j in names if j not in set(judge_names(prep))]
    if unknown:
        raise ValueError(f"judge(s) {unknown} have no rows (judges in the table: {judge_names(prep)})")
    by = prep.attrs.get(CLUSTER_BY, "prompt")
    # The prompt's texts keep the resamples the leaderboard always drew; any other unit, its codes.
    units = prompt_text(prep["prompt"]) if by == "prompt" else prep[CLUSTER].to_numpy()
    codes, counts = bt.cluster_draws(units, reps, seed)
    unit = {"prompt": "the prompts", "none": "the pairs"}.get(by, f"the values of {by!r}")
    draws = Draws(codes, counts, unit)
    fits: dict[str, dict[str, bt.BTFit]] = {v: {} for v in VARIANTS}
    skipped: dict[str, dict[str, str]] = {v: {} for v in VARIANTS}
    excl: dict[str, dict[str, dict[str, int]]] = {v: {} for v in VARIANTS}
    notes: dict[str, dict[str, str]] = {v: {} for v in VARIANTS}
    rel = {j: relations(prep, j, self_map, family_map) for j in names}
    usable = _label_mask(prep, label_sample, seed)
    related = {j: rel[j][0] | rel[j][1] for j in names}

    def attempt(variant: str, rater: str, make) -> None:
        try:
            fits[variant][rater] = make()
        except ValueError as exc:
            skipped[variant][rater] = str(exc)

    for j in names:
        c = judge_comparisons(prep, j)
        excl[RAW][j] = dict(c.exclusions)
        attempt(RAW, j, lambda c=c, j=j: fit_bt(c, draws, f"raw[{j}]"))
        z, feats = style_covariates(prep, c.rows)
        excl[STYLE][j] = dict(c.exclusions)
        attempt(STYLE, j, lambda c=c, z=z, feats=feats, j=j: fit_bt(c, draws, f"style[{j}]", z, feats))
        hit = np.isin(c.model_a, list(related[j])) | np.isin(c.model_b, list(related[j]))
        excl[RELATED][j] = {**c.exclusions, **({"related_contestant": int(hit.sum())} if hit.any() else {})}
        gone = sorted((set(c.model_a) | set(c.model_b)) - set(c.model_a[~hit]) - set(c.model_b[~hit]))
        if not hit.any():
            notes[RELATED][j] = "the judge is related to no contestant: the same comparisons as raw"
        elif gone:
            notes[RELATED][j] = f"not ranked (every comparison involves a relative of the judge): {gone}"
        attempt(RELATED, j, lambda c=c, hit=hit, j=j: fit_bt(c.take(~hit), draws, f"related[{j}]"))

        def term(j=j):
            pooled, t, tnames = related_term_comparisons(prep, j, names, related, *rel[j])
            excl[RELATED_TERM][j] = dict(pooled.exclusions)
            others = sorted(set(names) - {j})
            notes[RELATED_TERM][j] = (f"{j}'s comparisons pooled with the unrelated comparisons of "
                                      f"{others}: strengths shared, terms {tnames} on {j}'s rows")
            return fit_bt(pooled, draws, f"related_term[{j}]", t, tnames)

        attempt(RELATED_TERM, j, term)

        def anchored(j=j, c=c):
            fit, notes[HUMAN_ANCHORED][j] = _anchored(prep, c, usable, draws, j)
            excl[HUMAN_ANCHORED][j] = dict(c.exclusions)
            return fit

        attempt(HUMAN_ANCHORED, j, anchored)
    panels: dict[str, str] = {}

    def panel() -> bt.BTFit:
        c, names_per = panel_comparisons(prep, names, related)
        excl[PANEL][PANEL] = dict(c.exclusions)
        panels.update(zip(prep["pair_id"].astype(str).to_numpy()[c.rows], names_per, strict=True))
        return fit_bt(c, draws, "panel")

    attempt(PANEL, PANEL, panel)
    h = human_comparisons(prep)
    excl[HUMAN][HUMAN] = dict(h.exclusions)
    if h.y.size:
        attempt(HUMAN, HUMAN, lambda: fit_bt(h, draws, "human"))
    else:
        skipped[HUMAN][HUMAN] = "human: no pair has human labels"
    return Leaderboard(fits, skipped, excl, notes, panels, reps, seed, relations=rel,
                       human_pairs=int(h.y.size), pairs=int(np.unique(prep[PAIR].to_numpy()).size),
                       cluster_by=by, clusters=int(counts.shape[1]))
