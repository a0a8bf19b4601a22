"""Bias metrics of LLM judges: pure functions on judgment-table DataFrames (``judgebias.tables.pairwise``),
each returning a frozen ``judgebias.stats.Estimate`` with a 95% interval, n and exclusions."""

from judgebias.metrics.agreement import agreement, cohen_kappa, precision_cost
from judgebias.metrics.dbg import dbg_score, gold_votes, pairwise_win_rates
from judgebias.metrics.frame import prepare
from judgebias.metrics.origin import self_generators
from judgebias.metrics.perplexity import (
    perplexity_excess,
    perplexity_familiarity,
    perplexity_own_other,
    perplexity_preference,
)
from judgebias.metrics.position import position_bias, position_flip_rate
from judgebias.metrics.regression import choice_regression
from judgebias.metrics.self_preference import (
    Confusion,
    eo_from_confusion,
    family_preference_dp,
    family_preference_eo,
    self_preference_dp,
    self_preference_eo,
    self_preference_score,
)
from judgebias.metrics.verbosity import human_verbosity, verbosity_bias

__all__ = [
    "Confusion", "agreement", "choice_regression", "cohen_kappa", "dbg_score", "eo_from_confusion",
    "family_preference_dp", "family_preference_eo",
    "gold_votes", "human_verbosity", "pairwise_win_rates", "perplexity_excess", "perplexity_familiarity",
    "perplexity_own_other", "perplexity_preference", "position_bias", "position_flip_rate", "precision_cost",
    "prepare",
    "self_generators", "self_preference_dp", "self_preference_eo", "self_preference_score",
    "verbosity_bias",
]
