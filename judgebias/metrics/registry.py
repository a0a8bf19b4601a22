"""The figure registry: every per-judge figure of ``analyze``, declared once.

A ``Figure`` says what the figure needs from the table, how it is computed, what it means and where
it comes from, how the terminal labels it, which sign signals the bias, which report-card statement
it feeds and how MLflow names it. The analysis plan (``judgebias.reporting.analysis``), the terminal table
(``judgebias.reporting.console_table``), the report card (``judgebias.reporting.report_card``) and the MLflow
metric names (``judgebias.tracking.log_analysis``) are all read from ``FIGURES``; adding a figure is one
entry in ``_CATALOGUE`` below (docs/metrics.md, "Adding a figure"). The catalogue's order is the papers'
order and the order of every output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.metrics import pointwise as PW
from judgebias.metrics import pointwise_origin as PO
from judgebias.metrics.agreement import agreement, agreement_two_class, cohen_kappa, tie_rate
from judgebias.metrics.ceiling import human_ceiling
from judgebias.metrics.dbg import GoldVotes, dbg_score, gold_votes
from judgebias.metrics.evaluator_quality import CORRECT, family_preference_eqb, self_preference_eqb
from judgebias.metrics.margins import LOWER, PROBE_MARGINS, Margin
from judgebias.metrics.perplexity import (
    perplexity_excess,
    perplexity_familiarity,
    perplexity_own_other,
    perplexity_preference,
)
from judgebias.metrics.pointwise_perplexity import score_perplexity
from judgebias.metrics.position import position_bias, position_consistency, position_flip_rate
from judgebias.metrics.regression import choice_regression
from judgebias.metrics.repeats import REPEATS_COLUMN, repeat_kappa, verdict_stability
from judgebias.metrics.self_preference import (
    family_preference_dp,
    family_preference_eo,
    self_preference_dp,
    self_preference_eo,
    self_preference_score,
)
from judgebias.metrics.verbosity import verbosity_bias
from judgebias.parts import PartFigure
from judgebias.parts import probes as declared_probes
from judgebias.stats import Estimate


@dataclass(frozen=True)
class Need:
    """One input a figure cannot do without. ``check`` reads the whole (prepared) table; a need
    without one depends on the judge or the settings and is decided by ``judgebias.reporting.analysis``.
    ``reason`` is what "not computed" says when it is missing."""

    name: str
    reason: str
    check: Callable[[pd.DataFrame], bool] | None = None


def _has(*columns: str) -> Callable[[pd.DataFrame], bool]:
    return lambda df: all(F.has_values(df, c) for c in columns)


GENERATORS = Need("generators", "no generator names", _has("generator_a", "generator_b"))
HUMAN = Need("human", "no human labels", lambda df: bool((df[F.HUMAN_N].to_numpy() > 0).any()))
HUMANS = Need("humans", "one human label per pair: no other human to compare with",
              lambda df: bool((df[F.HUMAN_N].to_numpy() > 1).any()))
PERPLEXITIES = Need("perplexities", "no perplexities (ppl_a, ppl_b)", _has("ppl_a", "ppl_b"))
PROBABILITIES = Need("probabilities", "no probabilities (p_a)", _has("p_a"))
ORDERS = Need("orders", "no per-order results (p_a_ab/p_a_ba or verdict_ab/verdict_ba)",
              lambda df: _has("p_a_ab", "p_a_ba")(df) or _has("verdict_ab", "verdict_ba")(df))
GOLD = Need("gold", "no other judge to serve as gold")
FAMILY = Need("family", "no family given for this judge (--family JUDGE=GENERATOR)")
# DBG's reference: the human labels under human_as_gold, else the gold panel; analysis resolves it
# to HUMAN or GOLD, whose reason is the one reported.
REFERENCE = Need("reference", "no reference: human labels (human_as_gold) or a gold panel")
# What says a response is wrong: the human majority, or a verifiable task's correctness columns.
WRONG = Need("wrong", "no human labels and no correctness columns (correct_a, correct_b): nothing says which "
             "response is wrong", lambda df: HUMAN.check(df) or _has(*CORRECT)(df))
REPEATS = Need("repeats", "no repeated judgments (judge with --repeats K)", _has(REPEATS_COLUMN))
TABLE_NEEDS = (GENERATORS, HUMAN, HUMANS, PERPLEXITIES, PROBABILITIES, ORDERS, WRONG, REPEATS)
NEEDS = (*TABLE_NEEDS, GOLD, FAMILY, REFERENCE)


class Direction(Enum):
    """Which sign of the value signals the bias (or failure); UNSIGNED figures print without a sign."""

    ABOVE = "a difference around 0: above 0 signals the bias"
    BELOW = "a difference around 0: below 0 signals the bias or failure"
    EITHER = "a difference around 0: either sign is a bias (favours / harder on)"
    UNSIGNED = "a share, rate, odds ratio or R2: its null is named in its reading"


# The report card's statements (judgebias.reporting.trust), by the title each one's text starts with.
ORDER, HUMANS_SAY, SELF, FAMILY_SAY, GOLD_PANEL, LENGTH, STYLE = (
    "Order", "Humans", "Self-preference", "Family preference", "Against the gold panel", "Length", "Style")
STATEMENTS = (ORDER, HUMANS_SAY, SELF, FAMILY_SAY, GOLD_PANEL, LENGTH, STYLE)


@dataclass(frozen=True)
class Inputs:
    """What a compute function reads: the judge's rows, the whole table (gold panels) and the settings."""

    table: pd.DataFrame
    rows: pd.DataFrame
    judge: str
    self_map: Mapping[str, set[str]]
    family_map: Mapping[str, set[str]]
    gold: Sequence[str] | None
    human_as_gold: bool
    reps: int
    seed: int
    _votes: dict[bool, GoldVotes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def gold_votes(self, human_as_gold: bool = False) -> GoldVotes:
        """The judge's gold votes, computed once for its gold figures (a pass over the whole table)."""
        if human_as_gold not in self._votes:
            self._votes[human_as_gold] = gold_votes(self.table, self.judge, self.gold,
                                                    human_as_gold=human_as_gold)
        return self._votes[human_as_gold]


@dataclass(frozen=True)
class Figure:
    """One figure. Every field but the last three is required: a declaration cannot forget one.

    ``label`` / ``how``: the terminal's row (indented labels read as a sub-row of the one above;
    ``how`` may be empty where the label says it all); ``meaning`` / ``source``: the report card's
    columns (``source`` empty only for a plain descriptive share no paper defines); ``statement``:
    the report-card statement it feeds (one of ``STATEMENTS``), None when it is only shown in the
    table. ``mlflow_value``: the MLflow name of the value where the key alone would not say what the
    number is; ``mlflow_parts``: sub-estimates logged as ``<judge>.<key>.<part>``; ``family_only``:
    planned only when some family was given (else every judge would list it as not computed);
    ``repeats_only``: likewise, planned only for a table with repeated judgments (``judge --repeats``);
    ``margin``: the band of practical irrelevance its statement's test is read against
    (``judgebias.metrics.margins``), required for every figure whose test feeds a statement."""

    key: str
    needs: tuple[Need, ...]
    compute: Callable[[Inputs], Estimate]
    label: str
    how: str
    meaning: str
    source: str
    direction: Direction
    statement: str | None
    mlflow_value: str | None = None
    mlflow_parts: tuple[str, ...] = ()
    family_only: bool = False
    repeats_only: bool = False
    margin: Margin | None = None

    def __post_init__(self) -> None:
        def bad(what: str) -> ValueError:
            return ValueError(f"figure registry: {self.key!r} {what}")

        if not isinstance(self.key, str) or not self.key.isidentifier():
            raise bad("is no key: a figure's key is a Python identifier (it names the JSON entry)")
        for name in ("label", "meaning"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise bad(f"has no {name}")
        if not isinstance(self.how, str) or not isinstance(self.source, str):
            raise bad("needs how and source as text (empty where there is nothing to add)")
        if not callable(self.compute):
            raise bad("has no compute function")
        unknown = [n for n in self.needs if n not in NEEDS]
        if not isinstance(self.needs, tuple) or unknown:
            raise bad(f"needs a tuple of the declared inputs (NEEDS), got {self.needs!r}")
        if not isinstance(self.direction, Direction):
            raise bad(f"has direction {self.direction!r}, not a Direction")
        if self.statement is not None and self.statement not in STATEMENTS:
            raise bad(f"feeds unknown statement {self.statement!r} (STATEMENTS, or None)")
        if not all(isinstance(p, str) and p for p in self.mlflow_parts):
            raise bad(f"has MLflow parts {self.mlflow_parts!r}, not names")
        if self.margin is not None and not isinstance(self.margin, Margin):
            raise bad(f"has margin {self.margin!r}, not a Margin")

    @property
    def signed(self) -> bool:
        return self.direction is not Direction.UNSIGNED

    @property
    def mlflow_name(self) -> str:
        return self.mlflow_value or self.key


WATAOKA = "Wataoka et al. 2024"
DBG_PAPER = "Beyond the Surface (DBG), 2025"
SAITO = "Saito et al. 2023"
SHI = "Shi et al. 2024, Judging the judges"
ALPACA = "AlpacaEval (Dubois et al. 2024)"
ARENA = "Arena-Hard style control"
COHEN = "Cohen 1960"
ROYTBURG = "Roytburg et al. 2026, evaluator quality baseline"

EO_PARTS, DBG_PARTS = ("tpr", "tnr"), ("judge_win_rate", "gold_win_rate")
EQB_PARTS = ("own_wrong_vote", "other_wrong_vote")
EQB_MEANING = ("vote for {whose} wrong answers minus vote for other models' wrong answers beaten by the same "
               "opponent on the same question; 0 = the judge's competence explains the preference")
UNSIGNED, ABOVE, BELOW, EITHER = Direction.UNSIGNED, Direction.ABOVE, Direction.BELOW, Direction.EITHER


def _dbg(c: Inputs, who: Mapping[str, set[str]]) -> Estimate:
    return dbg_score(c.table, c.judge, who, c.gold, human_as_gold=c.human_as_gold, reps=c.reps, seed=c.seed,
                     votes=c.gold_votes(c.human_as_gold), rows=c.rows)


# Margins of practical irrelevance (judgebias.metrics.margins): an effect inside one is no concern,
# and "ok" needs the 95% interval inside it. The preference figures are differences of probabilities
# (of a verdict going one way), so one band of 5 points serves them all.
_OWN = "pairs with one own response and a human label"
_FAM = "pairs with one family response and a human label"
PREFERENCE_WHY = ("5 points of TPR - TNR: its own responses decided right 1 in 20 times more often than "
                  "others' is inside the disagreement between annotators")
SELF_MARGIN, FAMILY_MARGIN = Margin(0.05, PREFERENCE_WHY, unit=_OWN), Margin(0.05, PREFERENCE_WHY, unit=_FAM)
DP_WHY = "5 points more picks of its own responses than of others' (raw: includes quality)"
DBG_WHY = "5 points more wins for its own responses than the gold panel gives them, as for EO"
EQB_WHY = ("5 points more votes for its own wrong answers than for other models' wrong answers beaten by "
           "the same opponent, EO's band")
EQB_SELF_MARGIN = Margin(0.05, EQB_WHY, unit="question-opponent pairs")
EQB_FAMILY_MARGIN = Margin(0.05, EQB_WHY, unit="question-opponent pairs with a family answer")
MARGINS_STYLE = Margin(0.2, "+-0.2 log-odds (odds ratio 0.82-1.22) per unit of a term moves P(pick) near an "
                       "even choice by at most 5 points (0.2 x 0.25), the preference figures' band",
                       unit="pairs the judge did not call a tie")

# How many clusters a figure's clustered interval needs before it covers at least 0.93 under strong
# nesting (ICC 0.5, 1-20 pairs per prompt; `judgebias coverage --nested`, docs/metrics.md "How many
# clusters each clustered interval needs"); every other figure holds from stats.FEW_CLUSTERS (20) or
# fewer. The gold forms are taken as their human forms' (not simulated).
CLUSTERS_NEEDED: Mapping[str, int] = MappingProxyType({
    "position_bias": 40, "agreement_human": 80, "kappa_human": 80, "agreement_gold": 80,
    "kappa_gold": 80, "human_ceiling": 80})
# Figures whose clustered interval stayed short under strong nesting at every size simulated: the
# warning a nested table gets instead of a promise.
SHORT_WHEN_NESTED: Mapping[str, str] = MappingProxyType({
    "tie_rate": "a rare share on nested pairs: its interval covered 0.885-0.89 at 5% ties and ICC 0.5 "
                "(20-80 prompts)",
    "regression": "the logistic fit's cluster-robust (CR1) intervals covered 0.85-0.95 per term at ICC 0.5 "
                  "up to 80 prompts: read its terms' p-values as approximate",
    "regression_human": "the logistic fit's cluster-robust (CR1) intervals covered 0.85-0.95 per term at ICC "
                        "0.5 up to 80 prompts: read its terms' p-values as approximate",
})


def cluster_caveats(key: str, est: Estimate) -> Estimate:
    """``est`` with the few-clusters warning its figure needs (``CLUSTERS_NEEDED``) and, on nested
    pairs, the caveat of a figure whose clustered interval is known to run short."""
    import dataclasses

    from judgebias.stats import FEW_CLUSTERS, FEW_CLUSTERS_NOTE, cluster_note

    if est.clusters is None or est.cluster_by in (None, "none"):
        return est
    kept = tuple(w for w in est.warnings if not w.startswith(FEW_CLUSTERS_NOTE))
    notes = cluster_note(est.clusters, est.cluster_by, CLUSTERS_NEEDED.get(key, FEW_CLUSTERS))
    nested = est.design_effect is not None and est.clusters < est.n
    short = (f"{SHORT_WHEN_NESTED[key]} (docs/metrics.md)",) if nested and key in SHORT_WHEN_NESTED else ()
    warnings = kept + notes + short
    return est if warnings == est.warnings else dataclasses.replace(est, warnings=warnings)


# The figures, in the papers' order (the order of the JSON, the terminal and the report card).
# Deliberate parallel: every entry spells all its fields, alike by design (one declaration a figure).
_CATALOGUE = (
    Figure("self_preference_eo", needs=(GENERATORS, HUMAN),
           compute=lambda c: self_preference_eo(c.rows, c.judge, c.self_map),
           label="self-preference (EO, Wataoka Def 4.1)", how="TPR - TNR; 0 = fair",
           meaning="TPR - TNR on pairs with one own response, against the human majority; 0 = fair",
           source=WATAOKA + ", Def. 4.1", direction=EITHER, statement=SELF, mlflow_parts=EO_PARTS,
           margin=SELF_MARGIN),
    Figure("self_preference_eqb", needs=(GENERATORS, WRONG),
           compute=lambda c: self_preference_eqb(c.rows, c.judge, c.self_map),
           label="self-pref. beyond competence (EQB)", how="own wrong - others' wrong",
           meaning=EQB_MEANING.format(whose="its own"), source=ROYTBURG, direction=EITHER, statement=SELF,
           mlflow_parts=EQB_PARTS,
           margin=EQB_SELF_MARGIN),
    Figure("self_preference_dp", needs=(GENERATORS,),
           compute=lambda c: self_preference_dp(c.rows, c.judge, c.self_map),
           label="self-preference (DP, Eq 4)", how="P(own) - P(other)",
           meaning="P(picks own) - P(picks other); includes real quality differences",
           source=WATAOKA + ", Eq. 4", direction=EITHER, statement=SELF,
           margin=Margin(0.05, DP_WHY, unit="pairs with one own response")),
    Figure("self_preference_score", needs=(GENERATORS, PROBABILITIES),
           compute=lambda c: self_preference_score(c.rows, c.judge, c.self_map),
           label="self-preference (mean score)", how="score own - other",
           meaning="mean score own - other = 2 P(own) - 1, from probabilities",
           source=WATAOKA + ", Eq. 3", direction=EITHER, statement=None),
    Figure("dbg", needs=(GENERATORS, REFERENCE), compute=lambda c: _dbg(c, c.self_map),
           label="DBG score", how="judge - gold win rate, own",
           meaning="judge's win rate of its own responses minus the gold panel's on the same pairs",
           source=DBG_PAPER, direction=EITHER, statement=GOLD_PANEL, mlflow_parts=DBG_PARTS,
           margin=Margin(0.05, DBG_WHY, unit="pairs with one own response")),
    Figure("family_preference_eo", needs=(FAMILY, GENERATORS, HUMAN),
           compute=lambda c: family_preference_eo(c.rows, c.judge, c.self_map, c.family_map),
           label="family preference (EO)", how="TPR - TNR, family as own",
           meaning="EO with the judge's family's responses (same base model) counted as its own",
           source=WATAOKA + ", Def. 4.1", direction=EITHER, statement=FAMILY_SAY, mlflow_parts=EO_PARTS,
           family_only=True,
           margin=FAMILY_MARGIN),
    Figure("family_preference_eqb", needs=(FAMILY, GENERATORS, WRONG),
           compute=lambda c: family_preference_eqb(c.rows, c.judge, c.self_map, c.family_map),
           label="family pref. beyond competence (EQB)", how="family wrong - others' wrong",
           meaning=EQB_MEANING.format(whose="its family's"), source=ROYTBURG, direction=EITHER,
           statement=FAMILY_SAY, mlflow_parts=EQB_PARTS, family_only=True,
           margin=EQB_FAMILY_MARGIN),
    Figure("family_preference_dp", needs=(FAMILY, GENERATORS),
           compute=lambda c: family_preference_dp(c.rows, c.judge, c.self_map, c.family_map),
           label="family preference (DP)", how="P(family) - P(other)",
           meaning="DP with the judge's family's responses counted as its own",
           source=WATAOKA + ", Eq. 4", direction=EITHER, statement=FAMILY_SAY, family_only=True,
           margin=Margin(0.05, DP_WHY, unit="pairs with one family response")),
    Figure("family_dbg", needs=(FAMILY, GENERATORS, REFERENCE),
           compute=lambda c: _dbg(c, origin.with_family(c.self_map, c.family_map)),
           label="family DBG score", how="judge - gold win rate, family",
           meaning="DBG with the judge's family's responses counted as its own",
           source=DBG_PAPER, direction=EITHER, statement=GOLD_PANEL, mlflow_parts=DBG_PARTS,
           family_only=True,
           margin=Margin(0.05, DBG_WHY, unit="pairs with one family response")),
    Figure("verbosity_bias", needs=(HUMAN,), compute=lambda c: verbosity_bias(c.rows, c.judge),
           label="verbosity bias (Saito Eq 6)", how="> 0 prefers longer",
           meaning="accuracy gap: picks longer when humans chose shorter, minus the reverse",
           source=SAITO + ", Eq. 6", direction=ABOVE, statement=LENGTH,
           margin=Margin(0.05, "an accuracy gap of 5 points between the pairs where humans chose the longer "
                         "and the shorter response", unit="pairs of unequal length with a human label")),
    Figure("agreement_human", needs=(HUMAN,), compute=lambda c: agreement(c.rows, c.judge, "human"),
           label="agreement with humans", how="share",
           meaning="share of pairs where the judge's choice equals the human majority (3 classes)",
           source=ALPACA, direction=UNSIGNED, statement=HUMANS_SAY),
    Figure("kappa_human", needs=(HUMAN,), compute=lambda c: cohen_kappa(c.rows, c.judge, "human"),
           label="Cohen's kappa vs humans", how="",
           meaning="agreement with the human majority beyond chance",
           source=COHEN, direction=BELOW, statement=None),
    Figure("agreement_human_2class", needs=(HUMAN,), compute=lambda c: agreement_two_class(c.rows, c.judge),
           label="agreement where humans pick a side", how="share; judge tie = miss",
           meaning="agreement where humans picked a side; a judge tie counts as a miss",
           source="LLMBar / MT-bench", direction=UNSIGNED, statement=None),
    Figure("human_ceiling", needs=(HUMANS,), compute=lambda c: human_ceiling(c.rows, c.judge),
           label="human ceiling (leave one label out)", how="human vs other humans",
           meaning="how often one annotator agrees with the others' majority: the reachable agreement",
           source=ALPACA + " human agreement", direction=UNSIGNED, statement=HUMANS_SAY,
           margin=Margin(0.05, "agreeing with the humans' majority 5 points less often than one annotator "
                         "does is inside the annotators' own spread", sides=LOWER,
                         unit="pairs with two or more human labels")),
    Figure("tie_rate", needs=(), compute=lambda c: tie_rate(c.rows, c.judge),
           label="judge says tie", how="share",
           meaning="share of pairs the judge calls a tie",
           source="", direction=UNSIGNED, statement=None),
    Figure("agreement_gold", needs=(GOLD,),
           compute=lambda c: agreement(c.table, c.judge, "gold", gold=c.gold, votes=c.gold_votes(),
                                       rows=c.rows),
           label="agreement with gold panel", how="share",
           meaning="agreement with the gold panel of the other judges",
           source=DBG_PAPER, direction=UNSIGNED, statement=None),
    Figure("kappa_gold", needs=(GOLD,),
           compute=lambda c: cohen_kappa(c.table, c.judge, "gold", gold=c.gold, votes=c.gold_votes(),
                                         rows=c.rows),
           label="Cohen's kappa vs gold panel", how="",
           meaning="agreement with the gold panel beyond chance",
           source=COHEN, direction=BELOW, statement=None),
    Figure("position_consistency", needs=(ORDERS,), compute=lambda c: position_consistency(c.rows, c.judge),
           label="position consistency (Shi 2024)", how="same choice both orders",
           meaning="same choice in both presentation orders",
           source=SHI, direction=UNSIGNED, statement=ORDER),
    Figure("position_flip_rate", needs=(ORDERS,), compute=lambda c: position_flip_rate(c.rows, c.judge),
           label="position flip rate", how="A<->B on swap",
           meaning="A and B swap places when the order swaps",
           source=SHI, direction=UNSIGNED, statement=None),
    Figure("position_bias", needs=(ORDERS,), compute=lambda c: position_bias(c.rows, c.judge),
           label="position bias", how="P(first wins); .5 = none",
           meaning="P(the first-shown response wins); 0.5 = none",
           source=SHI, direction=UNSIGNED, statement=ORDER,
           margin=Margin(0.03, "P(first shown wins) within 0.47-0.53: position acts on every pair, not only "
                         "on own ones, so its band is narrower than the preference figures' 5 points",
                         null=0.5, unit="pairs judged in both orders")),
    Figure("repeat_stability", needs=(REPEATS,), compute=lambda c: verdict_stability(c.rows, c.judge),
           label="verdict stability over repeats", how="share same as modal",
           meaning="per pair, the share of K repeated judgments giving its most frequent verdict; mean",
           source="Wang et al. 2023, Self-Consistency (the majority's share)", direction=UNSIGNED,
           statement=None, repeats_only=True),
    Figure("repeat_kappa", needs=(REPEATS,),
           compute=lambda c: repeat_kappa(c.rows, c.judge, reps=c.reps, seed=c.seed),
           label="run-to-run agreement (Fleiss)", how="kappa over repeats",
           meaning="Fleiss' kappa with the K repeats as raters: agreement between runs beyond chance",
           source="Fleiss 1971", direction=BELOW, statement=None, repeats_only=True),
    Figure("perplexity_preference", needs=(PERPLEXITIES,),
           compute=lambda c: perplexity_preference(c.rows, c.judge),
           label="picks lower perplexity", how="P; .5 = none",
           meaning="P(picks the response of lower perplexity); 0.5 = none",
           source=WATAOKA + ", Sec. 5", direction=UNSIGNED, statement=None),
    Figure("perplexity_excess", needs=(PERPLEXITIES, HUMAN),
           compute=lambda c: perplexity_excess(c.rows, c.judge, reps=c.reps, seed=c.seed),
           label="  ... minus humans", how="> 0 more than humans",
           meaning="the same minus the humans' share on the same pairs",
           source=WATAOKA + ", Fig. 3", direction=ABOVE, statement=None),
    Figure("perplexity_own_other", needs=(PERPLEXITIES, GENERATORS),
           compute=lambda c: perplexity_own_other(c.rows, c.judge, c.self_map),
           label="own vs other at equal ppl", how="MH odds ratio; 1 = none",
           meaning="odds of winning, own vs other texts at equal perplexity; 1 = none",
           source=WATAOKA + ", Sec. 5", direction=UNSIGNED, statement=None),
    Figure("perplexity_familiarity", needs=(PERPLEXITIES, GENERATORS),
           compute=lambda c: perplexity_familiarity(c.rows, c.judge, c.self_map),
           label="log-ppl own - other", how="< 0 own more familiar",
           meaning="mean log-perplexity own - other responses; < 0 = own more familiar",
           source=WATAOKA + ", Sec. 5", direction=BELOW, statement=None),
    Figure("regression", needs=(),
           compute=lambda c: choice_regression(c.rows, c.judge, c.self_map, family_map=c.family_map),
           label="choice regression (style-controlled)", how="McFadden R2",
           meaning="choice regressed on origin, length, markdown, perplexity; value = McFadden R2",
           source=ARENA, direction=UNSIGNED, statement=STYLE, mlflow_value="regression.pseudo_r2",
           margin=MARGINS_STYLE),
    Figure("regression_human", needs=(HUMAN,),
           compute=lambda c: choice_regression(c.rows, c.judge, c.self_map, of="human",
                                               family_map=c.family_map),
           label="  same model on the human majority", how="McFadden R2",
           meaning="the same model on the human majority",
           source=ARENA, direction=UNSIGNED, statement=STYLE),
)


def _index_by_key(figures: Sequence, registry: str) -> Mapping:
    """Declarations by ``key``, read-only; a key declared twice fails (``registry`` names the
    catalogue in the error). Shared by the pairwise and the pointwise registries."""
    out: dict = {}
    for fig in figures:
        if fig.key in out:
            raise ValueError(f"{registry}: {fig.key!r} is declared twice")
        out[fig.key] = fig
    return MappingProxyType(out)


def index_figures(figures: Sequence[Figure]) -> Mapping[str, Figure]:
    """Figures by key, read-only; a key declared twice fails at import (each figure's own fields
    are checked when it is declared)."""
    return _index_by_key(figures, "figure registry")


FIGURES: Mapping[str, Figure] = index_figures(_CATALOGUE)


def plan(family_given: bool, repeats_given: bool = False) -> tuple[Figure, ...]:
    """The figures ``analyze`` tries for a judge, in order; family figures only when some family was
    given (``--family``) and repeat figures only when the table has repeats, so a question nobody
    asked lists no "not computed" lines."""
    return tuple(f for f in FIGURES.values()
                 if (family_given or not f.family_only) and (repeats_given or not f.repeats_only))


def margins() -> Mapping[str, Margin]:
    """Every declared margin by the key ``--margin`` takes: the analysis figures' (their registry
    entries), then the probes' (``judgebias.metrics.margins.PROBE_MARGINS``)."""
    out = {k: f.margin for k, f in FIGURES.items() if f.margin is not None}
    return MappingProxyType({**out, **PROBE_MARGINS})


# --- the pointwise figures (``analyze`` on a pointwise table) --------------------------------------


@dataclass(frozen=True)
class PointwiseInputs:
    """What a pointwise figure's ``compute`` reads: the validated pointwise table (clusters added),
    the judge, the maps and the settings."""

    df: pd.DataFrame
    judge: str
    self_map: origin.SelfMap | None = None
    family_map: origin.SelfMap | None = None
    gold: Sequence[str] | None = None
    pairwise: pd.DataFrame | None = None
    pairwise_judge: str | None = None
    reps: int = 2000
    seed: int = 0


@dataclass(frozen=True)
class PointwiseFigure:
    """One per-judge figure of a pointwise ``analyze``. ``key`` is its JSON key; a dotted key
    (``score_agreement_human.spearman``) is one part of a record keyed by its parts. ``label``,
    ``meaning``, ``source`` and ``signed`` are its report-card row (no label: no row); ``mlflow_value``
    names its value in MLflow where the key alone would not say what it is, ``details`` are plain
    numbers of its record logged beside it and ``detail_estimates`` estimates inside its record."""

    key: str
    compute: Callable[[PointwiseInputs], Estimate]
    label: str = ""
    meaning: str = ""
    source: str = ""
    signed: bool = True
    mlflow_value: str | None = None
    details: tuple[str, ...] = ()
    detail_estimates: tuple[str, ...] = ()
    needs_pairwise: bool = False

    @property
    def record(self) -> str:
        """The JSON key of its record (the key before its part)."""
        return self.key.partition(".")[0]

    @property
    def part(self) -> str:
        return self.key.partition(".")[2]


STUREBORG, SPILIOPOULOU = "Stureborg et al. 2024", "Spiliopoulou et al. 2025"
_POINTWISE: tuple[PointwiseFigure, ...] = (
    PointwiseFigure("score_agreement_human.spearman", lambda c: PW.score_spearman_human(c.df, c.judge)),
    PointwiseFigure("score_agreement_human.kendall", lambda c: PW.score_kendall_human(c.df, c.judge)),
    PointwiseFigure("score_agreement_human.weighted_kappa",
                    lambda c: PW.score_kappa_human(c.df, c.judge, reps=c.reps, seed=c.seed)),
    PointwiseFigure("score_agreement_human.mae", lambda c: PW.score_mae_human(c.df, c.judge)),
    PointwiseFigure("score_self_preference.eo",
                    lambda c: PO.score_self_preference_eo(c.df, c.judge, c.self_map),
                    "score self-preference (vs humans)", "(judge - human) on own responses minus on others'",
                    SPILIOPOULOU),
    PointwiseFigure("score_self_preference.dp",
                    lambda c: PO.score_self_preference_dp(c.df, c.judge, c.self_map),
                    "score own - others (raw)",
                    "mean score of own responses minus others'; includes quality differences", SPILIOPOULOU),
    PointwiseFigure("score_bias_human", lambda c: PW.score_bias_human(c.df, c.judge),
                    "score bias vs humans", "mean judge - mean human score", STUREBORG,
                    mlflow_value="score_bias_human.mean_judge_minus_human"),
    PointwiseFigure("score_dbg", lambda c: PO.score_dbg(c.df, c.judge, c.gold, c.self_map),
                    "score DBG", "own responses: judge's score minus the gold panel's",
                    "Beyond the Surface (DBG), 2025", mlflow_value="score_dbg.mean_judge_minus_gold"),
    PointwiseFigure("score_family_preference",
                    lambda c: PO.score_family_preference_eo(c.df, c.judge, c.self_map, c.family_map),
                    "score family preference", "(judge - human) on its family's responses minus others'",
                    SPILIOPOULOU, mlflow_value="score_family_preference.eo"),
    PointwiseFigure("score_verbosity", lambda c: PO.score_verbosity(c.df, c.judge),
                    "score verbosity", "slope of (judge - human) per 100 words", SAITO,
                    mlflow_value="score_verbosity.slope_gap", details=("judge_slope", "human_slope")),
    PointwiseFigure("score_perplexity", lambda c: score_perplexity(c.df, c.judge),
                    mlflow_value="score_perplexity.slope_gap", details=("judge_slope", "human_slope")),
    PointwiseFigure("score_distribution", lambda c: PW.score_distribution(c.df, c.judge),
                    "score skew", "skew of its scores (0 = symmetric)", STUREBORG,
                    mlflow_value="score_distribution.skew",
                    details=("used_min", "used_max", "levels_used", "levels", "mean"),
                    detail_estimates=("round_share",)),
    PointwiseFigure("pointwise_pairwise_consistency",
                    lambda c: PO.pointwise_pairwise_consistency(c.df, c.pairwise, c.judge, c.pairwise_judge),
                    "lower-scored response wins",
                    "share of compared pairs whose pairwise verdict went to the response it scored lower",
                    "TrustJudge 2025", signed=False,
                    mlflow_value="pointwise_pairwise_consistency.lower_scored_wins", needs_pairwise=True),
)


def index_pointwise(figures: Sequence[PointwiseFigure]) -> Mapping[str, PointwiseFigure]:
    """Pointwise figures by key, read-only; a key declared twice fails at import."""
    return _index_by_key(figures, "pointwise figure registry")


POINTWISE_FIGURES: Mapping[str, PointwiseFigure] = index_pointwise(_POINTWISE)


def pointwise_records() -> dict[str, tuple[PointwiseFigure, ...]]:
    """The pointwise figures by the JSON record they are written to, in declaration order."""
    out: dict[str, list[PointwiseFigure]] = {}
    for fig in POINTWISE_FIGURES.values():
        out.setdefault(fig.record, []).append(fig)
    return {k: tuple(v) for k, v in out.items()}


def probe_figures() -> Mapping[str, PartFigure]:
    """Every probe's figures (``judgebias.parts``: declared with their probe), by
    ``<probe>.<figure>``."""
    return MappingProxyType({f"{part.name}.{fig.key}": fig for part in declared_probes()
                             for fig in part.figures})
