"""``analyze``: every bias figure the table's columns allow, per judge, as one JSON-ready dict.

Shape (documented in docs/metrics.md)::

    {"schema": 1, "settings": {...}, "dataset": {...}, "humans": {...}, "win_rates": [...],
     "judges": {<judge>: {<metric>: {"value", "ci_low", "ci_high", "n", "exclusions", ...},
                          "multiplicity": {"method", "tests", "members", ...},
                          "skipped": {<metric>: <reason>}}}}

A metric the data cannot support is absent and its reason is under ``skipped``: never a fake 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.metrics import registry as R
from judgebias.metrics.dbg import DEFAULT_REPS, gold_panel, pairwise_win_rates
from judgebias.metrics.evaluator_quality import CORRECT
from judgebias.metrics.margins import resolve as resolve_margins
from judgebias.metrics.repeats import REPEATS_COLUMN
from judgebias.metrics.verbosity import human_verbosity
from judgebias.metrics.win_rate import length_controlled_win_rates
from judgebias.multiplicity import HOLM, check_method
from judgebias.reporting.trust import attach
from judgebias.stats import InsufficientData, jsonable
from judgebias.tables.pairwise import Exclusions

SCHEMA_VERSION = 1
# What the metrics read once the features are computed; the rest (texts, labels, extras) is dropped
# and names become categoricals, so per-judge slices and comparisons stay cheap on a million rows.
# The prompt (the question: the evaluator-quality baseline's matching) and a verifiable task's
# correctness columns are kept as they are (shared with the table, not copied).
_LEAN = ("judge", "generator_a", "generator_b", "judge_generator", "p_a", "p_a_ab", "p_a_ba", "verdict_ab",
         "verdict_ba", "ppl_a", "ppl_b", "prompt", *CORRECT, REPEATS_COLUMN, *F.DERIVED)
_CATEGORICAL = ("judge", "generator_a", "generator_b", "judge_generator", "verdict_ab", "verdict_ba")


def lean_table(prepared: pd.DataFrame) -> pd.DataFrame:
    """The columns the figures read of a prepared table, names as categoricals (also the run
    comparison's resamples: judgebias.reporting.run_compare)."""
    # Column by column: with copy-on-write the numeric columns are shared with ``prepared``, not
    # copied (a list selection copies the columns it picks out of a consolidated block: the counts).
    lean = pd.DataFrame({c: prepared[c] for c in _LEAN if c in prepared.columns}, copy=False)
    for c in _CATEGORICAL:
        if c in lean.columns:
            codes, uniques = pd.factorize(lean[c], use_na_sentinel=True)
            lean[c] = pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))
    return lean


def _has(df: pd.DataFrame, column: str) -> bool:
    return F.has_values(df, column)


def analyze(df: pd.DataFrame, *, self_map: Mapping[str, Iterable[str]] | None = None,
            gold: Sequence[str] | None = None, human_as_gold: bool = False,
            exclusions: Exclusions | None = None, reps: int = DEFAULT_REPS, seed: int = 0,
            baseline: str | None = None,
            family_map: Mapping[str, Iterable[str]] | None = None,
            multiplicity: str = HOLM, cluster_by: str | None = None,
            margins: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Compute every metric the columns allow for every judge of a validated judgment table.

    ``cluster_by`` names the column whose equal values share a cluster (default the prompt;
    ``"none"``: every pair independent): every figure's interval and test allow for the pairs of a
    cluster being alike (``frame.prepare``), and says how many clusters it rests on.

    ``self_map`` names more generators that are the judge itself; ``family_map`` its relatives
    (fine-tuned from, same base model): they get their own figures (``family_preference_*``,
    ``family_dbg``, the regression's ``family_origin``) beside the exact-self ones.

    ``baseline`` names the reference model of the length-controlled win rates (default: per judge,
    the one generator in every pair it judged, if there is one).

    ``multiplicity`` ("holm" or "bh") adjusts the p-values of each judge's statement tests together
    (``judgebias.reporting.trust``): ``p_adjusted`` beside each member's ``p_value`` and the family
    under the judge's ``multiplicity`` key. ``margins``: {figure: value} overriding declared margins
    of practical irrelevance (``--margin``; ``judgebias.metrics.margins``), recorded with every
    declared one under ``settings.margins``; each member figure gets its ``verdict``."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"analyze: expected a pandas DataFrame, got {type(df).__name__}")
    multiplicity = check_method(multiplicity)  # a typo fails before the work, not after it
    margin_records = resolve_margins(R.margins(), margins)  # so does a margin for no figure
    F.require(df, ["pair_id", "judge"], "analyze")
    if len(df) == 0:
        raise ValueError("analyze: the judgment table has no rows")
    self_map = {k: set([v] if isinstance(v, str) else v) for k, v in (self_map or {}).items()}
    family_map = {k: set([v] if isinstance(v, str) else v) for k, v in (family_map or {}).items()}
    gold = list(gold) if gold else None
    prepared = F.prepare(df, cluster_by=cluster_by)
    lean = lean_table(prepared)
    lean.attrs[F.CLUSTER_BY] = prepared.attrs[F.CLUSTER_BY]  # a new frame: the clusters' column by name
    judges = F.judges(lean)
    if gold:
        gold_panel(lean, None, gold)  # fail early on unknown gold judges
    _check_family(lean, judges, family_map)

    # Which of the table-wide inputs are there: the figures' needs (judgebias.metrics.registry).
    flags = {n.name: (n.check(lean), n.reason) for n in R.TABLE_NEEDS}
    has_human, has_gen = flags[R.HUMAN.name][0], flags[R.GENERATORS.name][0]

    result: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "settings": {"self_map": {k: sorted(v) for k, v in sorted(self_map.items())},
                     "family_map": {k: sorted(v) for k, v in sorted(family_map.items())},
                     "gold": gold, "human_as_gold": human_as_gold, "bootstrap_reps": reps, "seed": seed,
                     "baseline": baseline, "multiplicity": multiplicity,
                     "cluster_by": prepared.attrs[F.CLUSTER_BY], "margins": margin_records},
        "dataset": {**_dataset(prepared, lean, judges, exclusions),
                    "clusters": int(np.unique(prepared[F.CLUSTER].to_numpy()).size)},
        "humans": {}, "win_rates": [], "judges": {},
    }
    if has_human:
        try:
            result["humans"]["verbosity"] = human_verbosity(prepared).to_dict()
        except InsufficientData as exc:
            result["humans"]["skipped"] = {"verbosity": str(exc)}
    else:
        result["humans"]["skipped"] = {"verbosity": R.HUMAN.reason}
    if has_gen:
        wr = pairwise_win_rates(lean)
        result["win_rates"] = jsonable(wr.to_dict(orient="records"))
        rates, why = length_controlled_win_rates(prepared, judges, baseline)
        result["length_controlled"] = {"rates": rates, "skipped": why}

    positions = lean.groupby("judge", sort=True, observed=True).indices
    result["settings"]["self_generators"] = {j: sorted(origin.self_set(lean, j, self_map)) for j in judges}
    result["settings"]["family_generators"] = {
        j: sorted(set(family_map[j]) - origin.self_set(lean, j, self_map))
        for j in judges if family_map.get(j)
    }
    for judge in judges:
        rows = lean.take(positions[judge])
        result["judges"][judge] = _judge_metrics(lean, rows, judge, flags, self_map, family_map, gold,
                                                 human_as_gold, reps, seed)
    return attach(jsonable(result), method=multiplicity, margins=margins)


def _check_family(lean: pd.DataFrame, judges: list[str], family_map: Mapping[str, set[str]]) -> None:
    """A misspelt family name would only show up as a skipped figure: name it before the work."""
    unknown = sorted(j for j in family_map if j not in judges)
    if unknown:
        raise ValueError(f"family map names judge(s) {unknown} not in the table (judges: {judges})")
    gens = {str(g) for c in ("generator_a", "generator_b") if c in lean.columns
            for g in lean[c].dropna().unique()}
    for judge, members in family_map.items():
        missing = sorted(m for m in members if m not in gens)
        if missing:
            raise ValueError(f"family of {judge!r}: generator(s) {missing} not in the table "
                             f"(generators: {sorted(gens)[:20]})")


def _judge_metrics(lean: pd.DataFrame, rows: pd.DataFrame, judge: str, flags: dict, self_map, family_map,
                   gold, human_as_gold: bool, reps: int, seed: int) -> dict[str, Any]:
    """Every figure of the registry's plan for one judge; ``rows`` are its rows, ``lean`` the whole
    table (gold panels). A figure whose needs are missing is skipped with the first missing one's
    reason."""
    out: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    met = dict(flags)
    met[R.GOLD.name] = (bool(gold_panel(lean, judge, gold)), R.GOLD.reason)
    met[R.FAMILY.name] = (bool(family_map.get(judge)), R.FAMILY.reason)
    met[R.REFERENCE.name] = met[R.HUMAN.name if human_as_gold else R.GOLD.name]
    inputs = R.Inputs(lean, rows, judge, self_map, family_map, gold, human_as_gold, reps, seed)
    for fig in R.plan(bool(family_map), repeats_given=flags[R.REPEATS.name][0]):
        missing = [met[need.name][1] for need in fig.needs if not met[need.name][0]]
        if missing:
            skipped[fig.key] = missing[0]
            continue
        try:
            out[fig.key] = R.cluster_caveats(fig.key, fig.compute(inputs)).to_dict()
        except InsufficientData as exc:
            skipped[fig.key] = str(exc)
    out["skipped"] = skipped
    return out


def _dataset(prepared: pd.DataFrame, lean: pd.DataFrame, judges: list[str],
             exclusions: Exclusions | None) -> dict[str, Any]:
    pair = lean[F.PAIR].to_numpy()
    hn = lean[F.HUMAN_N].to_numpy()
    # Distinct pair codes (prepare's non-negative factorize codes) counted, not sorted: two sorts of
    # 10M rows; ``np.unique`` for codes a caller made otherwise.
    if pair.size and np.issubdtype(pair.dtype, np.integer) and pair.min() >= 0:
        labelled = int(np.count_nonzero(np.bincount(pair[hn > 0])))
        n_pairs = int(np.count_nonzero(np.bincount(pair)))
    else:
        labelled, n_pairs = np.unique(pair[hn > 0]).size, np.unique(pair).size
    gens = set()
    for col in ("generator_a", "generator_b"):
        if col in lean.columns:
            gens.update(str(g) for g in lean[col].dropna().unique())
    present = [c for c in ("p_a", "p_a_ab", "p_a_ba", "verdict", "verdict_ab", "verdict_ba", "ppl_a", "ppl_b",
                           "generator_a", "generator_b") if _has(lean, c)]
    if hn.any():
        present.append("human")
    return {
        "rows": len(prepared), "pairs": n_pairs, "judges": judges,
        "rows_per_judge": {str(k): int(v) for k, v in lean["judge"].value_counts().sort_index().items()},
        "human_only_rows": int(lean["judge"].isna().sum()),
        "human_labelled_pairs": int(labelled), "generators": sorted(gens),
        "columns_with_values": present,
        # Which rule made each judge row's verdict from its two orders (judgebias.tables.folding).
        "fold_rules": ({str(k): int(v) for k, v in prepared["fold_rule"].value_counts().sort_index().items()}
                       if "fold_rule" in prepared.columns else {}),
        "exclusions": exclusions.to_dict() if exclusions is not None else {},
    }
