"""Win rates against a baseline, raw and length-controlled (AlpacaEval 2).

A judge that prefers longer answers inflates the win rate of every verbose model. AlpacaEval 2's
length-controlled win rate fits, per model, a logistic GLM of the judge's preference for the model
over the baseline on the length difference, and reports the win rate predicted at zero length
difference (Dubois et al. 2024, "Length-Controlled AlpacaEval"):

    logit P(model preferred) = theta + phi * tanh(delta_len / sd(delta_len))

with ``delta_len`` = characters of the model's answer minus the baseline's. The preference is the
judge's vote for the model in [0, 1] (its probability when it has one, 1/0/0.5 from a verdict), a
fractional response fitted by quasi-likelihood with robust (HC3) errors. LC = sigmoid(theta): with
only the length term, the average over instructions of the prediction at delta_len = 0. Left out
from AlpacaEval's form, and said in the result: its per-instruction difficulty term (fitted jointly
across a leaderboard of models) and the regularisation of phi.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from judgebias.metrics import frame as F
from judgebias.stats import ALPHA, Estimate, InsufficientData, mean_t_figure

MIN_PAIRS = 10
_FORM = ("length-only form of AlpacaEval 2's GLM (no instruction-difficulty term, phi not "
         "regularised): LC = sigmoid(theta)")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _rows(df: pd.DataFrame, judge: str, model: str, baseline: str) -> tuple[np.ndarray, np.ndarray]:
    """(vote for the model, characters model - baseline) over the judge's model-vs-baseline rows."""
    rows = F.judge_rows(df, judge, "length_controlled_win_rate")
    ga, gb = rows["generator_a"].astype(object).to_numpy(), rows["generator_b"].astype(object).to_numpy()
    model_a = (ga == model) & (gb == baseline)
    model_b = (gb == model) & (ga == baseline)
    keep = model_a | model_b
    vote = rows[F.VOTE].to_numpy(dtype=float)
    vote = np.where(model_a, vote, 1.0 - vote)[keep]
    len_a = rows["response_a"].str.len().to_numpy(dtype=float)
    len_b = rows["response_b"].str.len().to_numpy(dtype=float)
    delta = np.where(model_a, len_a - len_b, len_b - len_a)[keep]
    ok = ~np.isnan(vote)
    return vote[ok], delta[ok]


def length_controlled_win_rate(df: pd.DataFrame, judge: str, model: str, baseline: str) -> Estimate:
    """LC win rate of ``model`` over ``baseline`` under ``judge`` (value, Wald interval mapped
    through the sigmoid), with the raw win rate (mean vote, t interval) and the length slope in
    ``details``. Raises ``ValueError`` for a missing column, ``InsufficientData`` for too few pairs."""
    import statsmodels.api as sm

    F.require(df, ["judge", "generator_a", "generator_b", "response_a", "response_b"],
              "length_controlled_win_rate")
    if model == baseline:
        raise ValueError(f"length_controlled_win_rate: model and baseline are both {model!r}")
    prepared = F.prepare(df) if F.VOTE not in df.columns else df
    vote, delta = _rows(prepared, judge, model, baseline)
    n = int(vote.size)
    if n < MIN_PAIRS:
        raise InsufficientData(f"{n} judged pairs of {model} vs {baseline} (need {MIN_PAIRS})")
    raw = mean_t_figure(vote, null=0.5, bounds=(0.0, 1.0))
    sd = float(delta.std(ddof=1))
    if sd == 0 or not np.isfinite(sd):
        raise InsufficientData(f"{model} vs {baseline}: every pair has the same length difference")
    X = np.column_stack([np.ones(n), np.tanh(delta / sd)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fractional responses: statsmodels warns, the fit is the QMLE
        res = sm.GLM(vote, X, family=sm.families.Binomial()).fit()
    params = np.asarray(res.params, dtype=float)
    theta, phi = (float(v) for v in params)
    se = _hc3_se(X, vote, params)
    # HC3 errors and t quantiles on n - 2 degrees of freedom: HC0 with normal quantiles covered
    # 0.87 of the time at 10 pairs and 0.92 at 50 in the coverage benchmark (AlpacaEval's own
    # length GLM with votes near 0 and 1).
    q = float(stats.t.ppf(1 - ALPHA / 2, n - 2))
    t = params / se
    p = 2 * stats.t.sf(np.abs(t), n - 2)
    details = {"model": model, "baseline": baseline, "raw_win_rate": raw,
               "length_coef": {"coef": phi, "ci_low": phi - q * se[1], "ci_high": phi + q * se[1],
                               "p_value": float(p[1])},
               "mean_delta_chars": float(delta.mean()), "sd_delta_chars": sd}
    return Estimate(value=_sigmoid(theta), ci_low=_sigmoid(theta - q * se[0]),
                    ci_high=_sigmoid(theta + q * se[0]), n=n, statistic=float(t[0]), p_value=float(p[0]),
                    method=f"{_FORM}; Wald interval of theta (HC3 errors, t on n - 2 df) through the "
                           "sigmoid; test of LC = 0.5", details=details)


def _hc3_se(X: np.ndarray, y: np.ndarray, params: np.ndarray) -> np.ndarray:
    """HC3 sandwich standard errors of a logit-link quasi-likelihood fit: each residual's square
    divided by (1 - leverage)^2 (MacKinnon & White 1985), which keeps small samples honest where
    HC0 is too small. statsmodels' GLM gives HC0 whichever HC variant is asked for."""
    mu = 1.0 / (1.0 + np.exp(-(X @ params)))
    w = mu * (1.0 - mu)
    bread = np.linalg.inv((X * w[:, None]).T @ X)
    leverage = np.clip(np.einsum("ij,jk,ik->i", X, bread, X) * w, 0.0, 1.0 - 1e-12)
    e = (y - mu) / (1.0 - leverage)
    cov = bread @ ((X * (e**2)[:, None]).T @ X) @ bread
    return np.sqrt(np.diag(cov))


def baseline_of(df: pd.DataFrame, judge: str) -> str | None:
    """The generator in every pair the judge judged when exactly one is (AlpacaEval's layout:
    every model against one reference); None otherwise."""
    if all(c in df.columns for c in F.DERIVED):  # prepared: slice the two names, not every column
        df = df[["judge", "generator_a", "generator_b", *F.DERIVED]]
    rows = F.judge_rows(df, judge, "baseline_of")
    common = None
    for a, b in rows[["generator_a", "generator_b"]].drop_duplicates().itertuples(index=False):
        names = {x for x in (a, b) if isinstance(x, str) and x}
        common = names if common is None else common & names
        if not common:
            return None
    return next(iter(common)) if common is not None and len(common) == 1 else None


def length_controlled_win_rates(df: pd.DataFrame, judges: list[str], baseline: str | None = None
                                ) -> tuple[list[dict], dict[str, str]]:
    """Every (judge, model) LC win rate against ``baseline`` (or each judge's detected baseline);
    returns the records and, per judge with none, why."""
    prepared = F.prepare(df)
    # Only these columns are read: per-judge slices then leave the table's other texts alone.
    prepared = prepared[[c for c in ("judge", "generator_a", "generator_b", "response_a", "response_b",
                                     *F.DERIVED) if c in prepared.columns]]
    generators = {str(g) for c in ("generator_a", "generator_b") for g in prepared[c].dropna().unique()}
    if baseline is not None and baseline not in generators:
        raise ValueError(f"baseline {baseline!r} is not a generator in the table (generators: "
                         f"{sorted(generators)[:10]})")
    out, skipped = [], {}
    for judge in judges:
        base = baseline or baseline_of(prepared, judge)
        if base is None:
            skipped[judge] = ("no single generator is in every pair this judge judged (pass --baseline to "
                              "name the reference model)")
            continue
        rows = F.judge_rows(prepared, judge, "length_controlled_win_rates")
        models = sorted({str(g) for c in ("generator_a", "generator_b") for g in rows[c].dropna().unique()}
                        - {base})
        for model in models:
            try:
                est = length_controlled_win_rate(prepared, judge, model, base).to_dict()
            except InsufficientData as exc:
                skipped[f"{judge}/{model}"] = str(exc)
                continue
            out.append({"judge": judge, **est})
    return out, skipped
