"""The leaderboard family: Bradley-Terry strengths and ranks of six models from one judge's verdicts,
computed by the product's own raw-variant path (``leaderboard.judge_comparisons`` -> ``_fit`` on a
bootstrap over prompts -> ``bradley_terry.ranking_records``) with the product's default 1000
resamples. ``n`` counts comparisons.

The generating process keeps the BT strengths the exact estimand while adding what a real table has:
* ties: each prompt has its own tie probability (uniform 5-20%), and a decided comparison's win
  probability is set so that E[outcome] is still what the model below says (a tie counts 0.5);
* a position pull: the model shown first gets +p_prompt on the probability scale (p_prompt uniform in
  0-0.08, mean 0.04). Which model is shown first is a fair coin, so the pull cancels in the estimating
  equations (each ordered pair's x(y - mu) has mean +p and -p in the two orders) and the population
  solution is exactly the generating strengths: E[outcome | i first, j second] = sigmoid(b_i - b_j) + p;
* prompts holding 1-4 comparisons (sharing their tie rate and pull), which the bootstrap resamples as
  clusters.
Truths: the strengths centred to mean 0 (as the product centres them) and the true ranks.
"""

from __future__ import annotations

import numpy as np

from judgebias.coverage import tables as T
from judgebias.coverage.registry import Family, Figure, interval
from judgebias.metrics import bradley_terry as bt
from judgebias.metrics import leaderboard as lb

STRENGTHS = {"m1": -0.7, "m2": -0.35, "m3": -0.1, "m4": 0.05, "m5": 0.35, "m6": 0.7}
_NAMES = tuple(STRENGTHS)
_BETA = np.array(list(STRENGTHS.values()))
_CENTRED = _BETA - _BETA.mean()
_RANK = bt.ranks(_BETA)
_TIES = (0.05, 0.20)
_PULL = (0.0, 0.08)
_PER_PROMPT = (1, 4)
REPS = 1000                              # the product's default (`judgebias leaderboard --reps`)


def _simulate(rng: np.random.Generator, n: int):
    sizes = rng.integers(_PER_PROMPT[0], _PER_PROMPT[1] + 1, n)      # more than enough prompts
    prompt = np.repeat(np.arange(n), sizes)[:n]
    k = prompt.max() + 1
    tie_p, pull = rng.uniform(*_TIES, k)[prompt], rng.uniform(*_PULL, k)[prompt]
    first = rng.integers(0, len(_NAMES), n)
    second = (first + rng.integers(1, len(_NAMES), n)) % len(_NAMES)   # uniform over the others
    mean = 1 / (1 + np.exp(-(_BETA[first] - _BETA[second]))) + pull
    # E[y] = (1 - t) q + t / 2 = mean; the strengths' spread keeps q inside [0, 1]
    q = (mean - tie_p / 2) / (1 - tie_p)
    u = rng.random(n)
    verdict = np.where(u < tie_p, 2, np.where(rng.random(n) < q, 0, 1))
    names = np.array(_NAMES, dtype=object)
    return T.table(n, columns={"generator_a": names[first], "generator_b": names[second],
                               "prompt": np.array([f"p{i}" for i in prompt], dtype=object),
                               "verdict": T.choice_labels(verdict)})


def _estimate(df) -> dict:
    c = lb.judge_comparisons(df, T.JUDGE)
    codes, counts = bt.cluster_draws(lb.prompt_text(df["prompt"]), REPS, 0)
    try:
        fit = lb.fit_bt(c, lb.Draws(codes, counts), f"raw[{T.JUDGE}]")
    except ValueError:          # a model with no comparison, or comparisons that do not link them all
        return {}
    if fit.models != _NAMES:
        return {}
    out = {}
    for rec in bt.ranking_records(fit):
        m = rec["model"]
        out[f"strength.{m}"] = interval(rec["strength"], rec["ci_low"], rec["ci_high"])
        out[f"rank.{m}"] = interval(rec["rank"], rec["rank_ci_low"], rec["rank_ci_high"])
    return out


# Opt-in (`judgebias coverage -f leaderboard --n 25,50,100,200,400,1000`): 1000 batched refits per
# replication, about 0.5 s of CPU at 1000 comparisons, several times the whole default run at 2000
# replications.
OPT_IN: tuple[Family, ...] = (
    Family("leaderboard", "six models' Bradley-Terry strengths (centred) and ranks from one judge's verdicts "
           "(n = comparisons)",
           "5-20% ties per prompt; position pull 0-0.08 toward the first-shown model; 1-4 comparisons per "
           "prompt; strengths -0.7 to 0.7 (two 0.15 apart)",
           tuple(Figure(f"strength.{m}", "percentile bootstrap over prompts (1000 resamples)", float(v))
                 for m, v in zip(_NAMES, _CENTRED, strict=True))
           + tuple(Figure(f"rank.{m}", "2.5%/97.5% quantiles of the bootstrap ranks", float(r))
                   for m, r in zip(_NAMES, _RANK, strict=True)),
           _simulate, _estimate),
)
