"""Two runs of a judge, figure by figure: what changed, with an interval on each difference.

A *side* is one judge in one run: its figures (an ``analyze`` result's entry) and, when known, the
judgment table they were computed from. Two sides are compared on every registry figure both carry
with a 95% interval (``judgebias.metrics.registry``):

* **paired**, where both judged the same pairs (matched by ``pair_id``, else by a digest of the
  prompt and both responses) and both tables are at hand: each figure is recomputed on the matched
  pairs of both runs and on ``reps`` cluster-bootstrap resamples of them. A resample draws the
  clusters (the column the earlier run's ``cluster_by`` names, by default the prompt) with replacement,
  and the SAME draw serves both runs, so what the two runs share (the pairs' difficulty) cancels in
  the difference. The difference's standard error is the standard deviation of the resampled
  differences; interval and test are t on (prompts - 1) degrees of freedom. Figures that are sums
  over rows (shares, kappa, position bias) are resampled by matrix products of per-prompt sums,
  checked against the registry's own value first; the others are recomputed on each resample.
* **independent** otherwise (two ``metrics.json`` files, or runs on different pairs): the difference
  of the two values with a standard error recovered from each run's 95% interval (its width / 2 x
  1.96; an asymmetric interval is read as symmetric), the two added in quadrature, a normal interval
  and z-test. The method each difference used is written beside it.

The p-values of every compared figure form one family adjusted by Holm (``judgebias.multiplicity``):
"something changed" is claimed only where the adjusted p-value is under 5%.
Pure functions on DataFrames and dicts; reading files and MLflow is the command's (``cli/watch.py``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import registry as R
from judgebias.metrics.position import first_shown_wins, order_choices
from judgebias.multiplicity import ALPHA, HOLM, NAMES, PROMISE, adjust, check_method
from judgebias.stats import InsufficientData, jsonable

SCHEMA = 1
DEFAULT_REPS = 1000
# Fewer shared prompts than this: a bootstrap over them says little; the runs are compared as independent.
MIN_CLUSTERS = 10
# A figure with its own bootstrap (DBG) runs it inside every resample at its minimum size: only its
# value is read there.
INNER_REPS = 100
# A resample on which a figure cannot be computed (no pair left of some kind) is dropped; beyond this
# share of dropped resamples the paired interval is not trusted and the figure is compared as independent.
MAX_FAILED_SHARE = 0.1
# UNSIGNED figures that are not shares (an odds ratio, McFadden's R2): their differences print as numbers.
NOT_SHARES = frozenset({"perplexity_own_other", "regression", "regression_human"})
_Z = 1.959963984540054


@dataclass(frozen=True)
class Side:
    """One judge in one run. ``figures``: the judge's entry of an analyze result; ``settings``: the
    result's settings (self and family maps, gold panel) to recompute them; ``table``: the judgment
    table, None when only the figures are known (then every comparison is independent)."""

    run: str
    judge: str
    figures: Mapping[str, Any]
    settings: Mapping[str, Any]
    table: pd.DataFrame | None = None


def is_share(key: str) -> bool:
    fig = R.FIGURES[key]
    return fig.direction is R.Direction.UNSIGNED and key not in NOT_SHARES


def _unreferenced(m: re.Match) -> str:
    """A label's parenthesis without its paper reference (the parts with a year or an equation number)."""
    kept = [p.strip() for p in m.group(1).split(",") if not re.search(r"\d", p)]
    return f" ({', '.join(kept)})" if kept else ""


def figure_name(key: str) -> str:
    """The figure as a statement names it: its label without the paper reference."""
    label = R.FIGURES[key].label
    name = re.sub(r"\s*\(([^)]*)\)", _unreferenced, label).strip(" .")
    if label.startswith(" "):  # an indented sub-row: named after the figure it qualifies
        keys = list(R.FIGURES)[: list(R.FIGURES).index(key)]
        heads = [k for k in keys if not R.FIGURES[k].label.startswith(" ")]
        parent = next((k for k in reversed(heads) if k.split("_")[0] == key.split("_")[0]), None)
        name = name.removeprefix("...").strip()
        return f"{figure_name(parent)} {name}" if parent else key.replace("_", " ")
    return name or key.replace("_", " ")


# --- pairs and prompts -------------------------------------------------------------------------------


def text_digests(table: pd.DataFrame) -> pd.Series:
    """Per row, a digest of the prompt and both responses: the pair's identity when ids differ."""
    F.require(table, ["prompt", "response_a", "response_b"], "run comparison")
    joined = (
        table["prompt"].astype(str)
        + "\x1f"
        + table["response_a"].astype(str)
        + "\x1f"
        + table["response_b"].astype(str)
    )
    return joined.map(lambda s: hashlib.sha256(s.encode("utf-8")).hexdigest()[:20])


def clusters_of(table: pd.DataFrame, by: str = F.DEFAULT_CLUSTER_BY) -> pd.Series:
    """Per row, the cluster the bootstrap resamples: the value of column ``by`` (the run's
    ``cluster_by``, default the prompt; ``"none"``: each pair its own), the pair where it is empty."""
    pair = "pair:" + table["pair_id"].astype(str)
    if by == "none":
        return pair
    if by not in table.columns:
        raise ValueError(f"run comparison: the table has no column {by!r} to cluster by")
    own = table[by]
    return own.astype(str).where(own.notna(), pair)


def _judge_mask(table: pd.DataFrame, judge: str) -> np.ndarray:
    return (table["judge"] == judge).to_numpy(dtype=bool, na_value=False)


def match_pairs(before: Side, after: Side) -> tuple[list[str], str, Callable[[pd.DataFrame], pd.Series]]:
    """The keys of the pairs both judges judged, what matched them ("pair_id" or "text digest"), and
    the function that gives a table's row keys. Empty when either table is missing."""
    if before.table is None or after.table is None:
        return [], "", lambda t: t["pair_id"].astype(str)
    for how, key_of in (("pair_id", lambda t: t["pair_id"].astype(str)), ("text digest", text_digests)):
        a = set(key_of(before.table)[_judge_mask(before.table, before.judge)])
        b = set(key_of(after.table)[_judge_mask(after.table, after.judge)])
        shared = sorted(a & b)
        if shared:
            return shared, how, key_of
    return [], "", lambda t: t["pair_id"].astype(str)


# --- figures that are sums over rows: resampled by matrix products ------------------------------------


def _human_codes(c: R.Inputs, gold: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    choice = c.rows[F.CHOICE].to_numpy().astype(np.int64)
    if gold:  # a pair's gold vote is the other judges' mean on it: a resample that repeats the pair keeps it
        v = c.gold_votes().votes[c.rows[F.PAIR].to_numpy()]
        ref = np.where(np.isnan(v), F.MISSING, np.where(v > 0.5, F.A, np.where(v < 0.5, F.B, F.TIE)))
    else:
        ref = c.rows[F.HUMAN].to_numpy().astype(np.int64)
    return choice, ref, (ref >= 0) & (choice >= 0)


def _ratio(s: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(s[..., 1] > 0, s[..., 0] / np.where(s[..., 1] > 0, s[..., 1], 1), np.nan)


def _kappa_of_cells(s: np.ndarray) -> np.ndarray:
    """Cohen's kappa of 3 x 3 tables given as 9 cell counts (judge row-major, reference columns)."""
    t = s.reshape(*s.shape[:-1], 3, 3)
    n = t.sum(axis=(-1, -2))
    safe = np.where(n > 0, n, 1)
    po = np.trace(t, axis1=-2, axis2=-1) / safe
    pe = (t.sum(axis=-1) * t.sum(axis=-2)).sum(axis=-1) / safe**2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((n > 1) & (pe < 1), (po - pe) / (1 - pe), np.nan)


def _agreement(c: R.Inputs, two_class: bool = False, gold: bool = False) -> np.ndarray:
    choice, ref, keep = _human_codes(c, gold)
    if two_class:
        keep &= ref != F.TIE
    return np.column_stack([keep & (choice == ref), keep]).astype(float)


def _kappa_cells(c: R.Inputs, gold: bool = False) -> np.ndarray:
    choice, ref, keep = _human_codes(c, gold)
    cell = np.where(keep, choice * 3 + ref, 0)
    return (np.eye(9)[cell] * keep[:, None]).astype(float)


def _ties(c: R.Inputs) -> np.ndarray:
    rows = c.rows
    choice = rows[F.CHOICE].to_numpy()
    keep = choice != F.MISSING
    return np.column_stack([keep & (choice == F.TIE), keep]).astype(float)


def _orders(c: R.Inputs, flip: bool) -> np.ndarray:
    ab, ba = order_choices(c.rows)
    keep = (ab != F.MISSING) & (ba != F.MISSING)
    hit = (((ab == F.A) & (ba == F.B)) | ((ab == F.B) & (ba == F.A))) if flip else ab == ba
    return np.column_stack([keep & hit, keep]).astype(float)


def _verbosity(c: R.Inputs) -> np.ndarray:
    rows = c.rows
    human, choice = rows[F.HUMAN].to_numpy(), rows[F.CHOICE].to_numpy()
    wa, wb = rows[F.WORDS_A].to_numpy(), rows[F.WORDS_B].to_numpy()
    keep = np.isin(human, (F.A, F.B)) & np.isin(choice, (F.A, F.B)) & (wa != wb)
    shorter_chosen = np.where(wa > wb, F.A, F.B) != human
    wrong = choice != human
    return np.column_stack(
        [
            keep & wrong & shorter_chosen,
            keep & shorter_chosen,
            keep & wrong & ~shorter_chosen,
            keep & ~shorter_chosen,
        ]
    ).astype(float)


def _rate_gap(s: np.ndarray) -> np.ndarray:
    return _ratio(s[..., :2]) - _ratio(s[..., 2:])


def _first_wins(c: R.Inputs) -> np.ndarray:
    rows = c.rows
    first = first_shown_wins(rows)
    keep = ~np.isnan(first)
    return np.column_stack([np.where(keep, first, 0.0), keep]).astype(float)


# figure -> (per-row sums, the figure from their totals); every other figure is recomputed per resample.
ADDITIVE: Mapping[str, tuple[Callable[[R.Inputs], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "verbosity_bias": (_verbosity, _rate_gap),
    "agreement_human": (_agreement, _ratio),
    "agreement_human_2class": (lambda r: _agreement(r, two_class=True), _ratio),
    "kappa_human": (_kappa_cells, _kappa_of_cells),
    "tie_rate": (_ties, _ratio),
    "agreement_gold": (lambda c: _agreement(c, gold=True), _ratio),
    "kappa_gold": (lambda c: _kappa_cells(c, gold=True), _kappa_of_cells),
    "position_consistency": (lambda r: _orders(r, flip=False), _ratio),
    "position_flip_rate": (lambda r: _orders(r, flip=True), _ratio),
    "position_bias": (_first_wins, _ratio),
}


# --- the two kinds of difference ----------------------------------------------------------------------


def _settings_inputs(settings: Mapping[str, Any]) -> dict[str, Any]:
    def as_sets(m: Any) -> dict[str, set[str]]:
        return {str(k): set(v if isinstance(v, (list, tuple)) else [v]) for k, v in (m or {}).items()}

    return {
        "self_map": as_sets(settings.get("self_map")),
        "family_map": as_sets(settings.get("family_map")),
        "gold": settings.get("gold") or None,
        "human_as_gold": bool(settings.get("human_as_gold", False)),
    }


def independent_difference(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """after - before of two figures from different pairs: SE from each 95% interval, z interval and test."""
    for what, est in (("before", before), ("after", after)):
        if est.get("value") is None or est.get("ci_low") is None or est.get("ci_high") is None:
            raise InsufficientData(f"the {what} run's figure has no value with a 95% interval")
    d = float(after["value"]) - float(before["value"])
    se = math.hypot(
        (after["ci_high"] - after["ci_low"]) / (2 * _Z), (before["ci_high"] - before["ci_low"]) / (2 * _Z)
    )
    from scipy import stats

    p = (1.0 if d == 0 else 0.0) if se == 0 else float(2 * stats.norm.sf(abs(d) / se))
    return {
        "value": d,
        "ci_low": d - _Z * se,
        "ci_high": d + _Z * se,
        "se": se,
        "p_value": p,
        "paired": False,
        "method": "independent runs: difference of the values; standard errors recovered from each "
        "run's 95% interval (width / (2 x 1.96), an asymmetric interval read as symmetric), "
        "added in quadrature; normal interval and z-test",
    }


def _t_difference(d: float, draws: np.ndarray, clusters: int, bounds: tuple[float, float] | None) -> dict:
    from scipy import stats

    se = float(np.std(draws, ddof=1))
    df = clusters - 1
    q = float(stats.t.ppf(1 - ALPHA / 2, df))
    p = (1.0 if d == 0 else 0.0) if se == 0 else float(2 * stats.t.sf(abs(d) / se, df))
    lo, hi = d - q * se, d + q * se
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return {"value": d, "ci_low": lo, "ci_high": hi, "se": se, "p_value": p, "paired": True}


class _Prepared:
    """One side restricted to the matched pairs: its prepared lean table (the columns the figures
    read), the judge's rows, per row the code of its prompt (cluster), and the figures' inputs."""

    def __init__(self, side: Side, keys: set[str], key_of, cluster_code: Mapping[str, int], seed: int):
        from judgebias.reporting.analysis import lean_table

        row_keys = key_of(side.table)
        mask = row_keys.isin(keys).to_numpy()
        self.table = lean_table(F.prepare(side.table.loc[mask].reset_index(drop=True)))
        self.codes = row_keys[mask].map(cluster_code).to_numpy(dtype=np.int64)
        self.judge_pos = np.flatnonzero(_judge_mask(self.table, side.judge))
        self.judge = side.judge
        self.settings = {**_settings_inputs(side.settings), "seed": seed}
        self.inputs = self.at(self.table, self.table.take(self.judge_pos), reps=INNER_REPS)

    def at(self, table: pd.DataFrame, rows: pd.DataFrame, reps: int = INNER_REPS) -> R.Inputs:
        return R.Inputs(table, rows, self.judge, reps=reps, **self.settings)

    def by_cluster(self, positions: np.ndarray, clusters: int) -> list[np.ndarray]:
        codes = self.codes[positions]
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(clusters + 1))
        return [positions[order[bounds[g] : bounds[g + 1]]] for g in range(clusters)]

    def estimate(self, key: str) -> dict[str, Any]:
        return jsonable(R.FIGURES[key].compute(self.inputs).to_dict())


def paired_differences(
    before: Side, after: Side, keys: Sequence[str], *, reps: int = DEFAULT_REPS, seed: int = 0
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, str]]:
    """(pairing, {figure: {"before", "after", "difference"}}, {figure: why not paired}) for the
    figures ``keys`` on the pairs both sides judged. Raises InsufficientData when fewer than
    ``MIN_CLUSTERS`` prompts are shared (the caller compares the runs as independent)."""
    if reps < 100:
        raise ValueError(f"run comparison: reps={reps} is too few for a bootstrap standard error (>= 100)")
    shared, how, key_of = match_pairs(before, after)
    if not shared:
        raise InsufficientData("the two runs share no pair (by pair_id or by text)")
    keyset = set(shared)
    t_before = before.table
    row_keys = key_of(t_before)
    by = str(before.settings.get("cluster_by") or F.DEFAULT_CLUSTER_BY)
    first = pd.Series(clusters_of(t_before, by).to_numpy(), index=row_keys.to_numpy())
    first = first[~first.index.duplicated()]
    names = first.reindex(shared).to_numpy()
    uniques, codes = np.unique(names.astype(str), return_inverse=True)
    clusters = len(uniques)
    if clusters < MIN_CLUSTERS:
        raise InsufficientData(
            f"the two runs share {len(shared)} pair(s) in {clusters} prompt(s), fewer than {MIN_CLUSTERS}"
        )
    cluster_code = dict(zip(shared, codes.tolist(), strict=True))
    sides = [_Prepared(s, keyset, key_of, cluster_code, seed) for s in (before, after)]
    pairing = {
        "paired": True,
        "pairs": len(shared),
        "clusters": clusters,
        "matched_by": how,
        "cluster": by,
        "before_pairs": int(key_of(t_before)[_judge_mask(t_before, before.judge)].nunique()),
        "after_pairs": int(key_of(after.table)[_judge_mask(after.table, after.judge)].nunique()),
        "reps": reps,
    }

    out: dict[str, dict[str, Any]] = {}
    why: dict[str, str] = {}
    additive, generic = [], []
    for key in keys:
        try:
            ests = [s.estimate(key) for s in sides]
        except (InsufficientData, ValueError) as exc:
            why[key] = f"not computable on the shared pairs: {exc}"
            continue
        if any(e.get("value") is None for e in ests):
            why[key] = "no value on the shared pairs"
            continue
        out[key] = {"before": ests[0], "after": ests[1]}
        fast = ADDITIVE.get(key)
        # The fast path is used only where it reproduces the registry's own value.
        ok = fast is not None and all(
            math.isclose(
                float(fast[1](fast[0](s.inputs).sum(axis=0))), e["value"], rel_tol=1e-9, abs_tol=1e-12
            )
            for s, e in zip(sides, ests, strict=True)
        )
        (additive if ok else generic).append(key)

    rng = np.random.default_rng(seed)
    draws = rng.integers(0, clusters, size=(reps, clusters))
    counts = np.zeros((reps, clusters))
    np.add.at(counts, (np.repeat(np.arange(reps), clusters), draws.ravel()), 1.0)
    boot: dict[str, list[np.ndarray]] = {k: [] for k in out}
    for s in sides:
        for key in additive:
            g = ADDITIVE[key][0](s.inputs)
            per_cluster = np.zeros((clusters, g.shape[1]))
            np.add.at(per_cluster, s.codes[s.judge_pos], g)
            boot[key].append(ADDITIVE[key][1](counts @ per_cluster))
        if generic:
            boot_values = _generic_draws(s, generic, draws, clusters)
            for key in generic:
                boot[key].append(boot_values[key])

    for key, entry in out.items():
        b, a = boot[key]
        d = a - b
        ok = np.isfinite(d)
        value = entry["after"]["value"] - entry["before"]["value"]
        if ok.mean() < 1 - MAX_FAILED_SHARE or ok.sum() < 2:
            why[key] = (
                f"the figure could not be computed on {int((~ok).sum())} of {reps} resamples of the "
                "shared prompts"
            )
            del out[key]
            continue
        diff = _t_difference(value, d[ok], clusters, (-1.0, 1.0) if is_share(key) else None)
        diff["method"] = (
            f"paired: both runs on the same {len(shared)} pairs ({clusters} prompts, matched by "
            f"{how}); cluster bootstrap of the prompts ({int(ok.sum())} resamples, the same draw "
            f"for both runs{'' if key in additive else ', the figure recomputed on each'}); t "
            f"interval and test on {clusters - 1} df from the bootstrap standard error"
        )
        if not ok.all():
            diff["failed_resamples"] = int((~ok).sum())
        entry["difference"] = diff
    return pairing, out, why


def _generic_draws(
    side: _Prepared, keys: Sequence[str], draws: np.ndarray, clusters: int
) -> dict[str, np.ndarray]:
    """Each figure recomputed on each resample: the drawn prompts' rows, a prompt drawn twice twice."""
    needs_all = any(n in (R.GOLD, R.REFERENCE) for k in keys for n in R.FIGURES[k].needs)
    judge_rows = side.by_cluster(side.judge_pos, clusters)
    all_rows = side.by_cluster(np.arange(len(side.table)), clusters) if needs_all else None
    out = {k: np.full(len(draws), np.nan) for k in keys}
    for i, drawn in enumerate(draws):
        rows = side.table.take(np.concatenate([judge_rows[g] for g in drawn]))
        table = side.table.take(np.concatenate([all_rows[g] for g in drawn])) if all_rows else rows
        inputs = side.at(table, rows)
        for key in keys:
            try:
                value = R.FIGURES[key].compute(inputs).value
                out[key][i] = math.nan if value is None else value
            except (InsufficientData, ValueError, ZeroDivisionError, FloatingPointError):
                pass
    return out


# --- the comparison ------------------------------------------------------------------------------------


def _brief(est: Mapping[str, Any]) -> dict[str, Any]:
    return {k: est.get(k) for k in ("value", "ci_low", "ci_high", "n") if k in est}


def comparable(side: Side, key: str) -> str | None:
    """Why ``key`` of ``side`` cannot be compared, None when it can."""
    est = side.figures.get(key)
    if not isinstance(est, Mapping) or est.get("value") is None:
        return (side.figures.get("skipped") or {}).get(key) or "not in the run"
    if est.get("ci_low") is None:
        return "no 95% interval in the run (a descriptive figure)"
    return None


def compare_judge(
    before: Side, after: Side, *, reps: int = DEFAULT_REPS, seed: int = 0, only: Sequence[str] | None = None
) -> dict[str, Any]:
    """One judge's figures in two runs: the differences, paired where possible (not yet adjusted)."""
    unknown = [k for k in only or () if k not in R.FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {unknown}; the registry's figures: {', '.join(R.FIGURES)}")
    not_compared: dict[str, str] = {}
    keys = []
    for key in R.FIGURES:
        if only and key not in only:
            continue
        reasons = [
            f"{w}: {r}" for w, s in (("before", before), ("after", after)) if (r := comparable(s, key))
        ]
        if reasons:
            if any(isinstance(s.figures.get(key), Mapping) for s in (before, after)) or only:
                not_compared[key] = "; ".join(reasons)
            continue
        keys.append(key)
    pairing: dict[str, Any] = {"paired": False}
    entries: dict[str, dict[str, Any]] = {}
    if before.table is not None and after.table is not None:
        try:
            pairing, entries, why = paired_differences(before, after, keys, reps=reps, seed=seed)
            for key, reason in why.items():
                pairing.setdefault("independent_figures", {})[key] = reason
        except InsufficientData as exc:
            pairing = {"paired": False, "why": str(exc)}
    else:
        pairing["why"] = (
            "the judgment tables are not both at hand (compare run folders, tables or MLflow runs "
            "that logged their table for paired differences)"
        )
    figures = []
    for key in keys:
        if key in entries:
            e = entries[key]
        else:
            try:
                e = {
                    "before": before.figures[key],
                    "after": after.figures[key],
                    "difference": independent_difference(before.figures[key], after.figures[key]),
                }
            except InsufficientData as exc:
                not_compared[key] = str(exc)
                continue
        figures.append(
            {
                "figure": key,
                "label": figure_name(key),
                "share": is_share(key),
                "before": _brief(e["before"]),
                "after": _brief(e["after"]),
                "difference": e["difference"],
            }
        )
    return {
        "before": {"run": before.run, "judge": before.judge},
        "after": {"run": after.run, "judge": after.judge},
        "pairing": pairing,
        "figures": figures,
        "not_compared": not_compared,
    }


def compare(
    sides: Sequence[tuple[Side, Side]],
    *,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    multiplicity: str = HOLM,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every (before, after) judge pair compared; the p-values of all compared figures adjusted as
    one family (``multiplicity``: Holm by default), each figure's ``changed`` and statement set."""
    if not sides:
        raise ValueError("run comparison: no judge to compare")
    method = check_method(multiplicity)
    comparisons = [compare_judge(b, a, reps=reps, seed=seed, only=only) for b, a in sides]
    members = [f for c in comparisons for f in c["figures"]]
    adjusted = adjust([f["difference"]["p_value"] for f in members], method)
    for f, p in zip(members, adjusted, strict=True):
        f["p_adjusted"] = p
        f["changed"] = p < ALPHA
        f["statement"] = statement(f)
    changed = [
        f"{c['after']['judge']}.{f['figure']}" for c in comparisons for f in c["figures"] if f["changed"]
    ]
    return jsonable(
        {
            "schema": SCHEMA,
            "kind": "judgebias compare",
            "before": sorted({b.run for b, _ in sides}),
            "after": sorted({a.run for _, a in sides}),
            "multiplicity": {
                "method": method,
                "tests": len(members),
                "alpha": ALPHA,
                "promise": f"adjusted for {len(members)} tests ({NAMES[method]}): "
                + PROMISE[method].replace("caution about this judge", "change flagged"),
            },
            "comparisons": comparisons,
            "changed": changed,
        }
    )


def _num(x: float, share: bool, signed: bool = False) -> str:
    if share:
        v = 100 * x
        text = f"{v:+.1f}" if signed else f"{v:.1f}"
        return text.removesuffix(".0")
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def statement(f: Mapping[str, Any]) -> str:
    """ "position consistency rose from 71% to 89% (+18 points [+8, +27], adjusted p 0.002)"."""
    from judgebias.reporting.trust import fmt_p

    share, d = f["share"], f["difference"]
    unit = "%" if share else ""
    before, after = f"{_num(f['before']['value'], share)}{unit}", f"{_num(f['after']['value'], share)}{unit}"
    diff = (
        f"{_num(d['value'], share, True)}{' points' if share else ''} "
        f"[{_num(d['ci_low'], share, True)}, {_num(d['ci_high'], share, True)}], "
        f"adjusted p {fmt_p(f['p_adjusted'])}"
    )
    if f["changed"]:
        verb = "rose" if d["value"] > 0 else "fell"
        return f"{f['label']} {verb} from {before} to {after} ({diff})"
    return f"{f['label']}: {before} -> {after} ({diff}): no detectable change"
