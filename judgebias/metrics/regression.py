"""What drives a choice? Logistic regression of "picks A" (ties excluded) on

* ``human_a``: +1 when the human majority prefers A, -1 when it prefers B (so the intercept is
  the judge's pull towards A, i.e. position, at an even human split),
* ``self_origin``: +1 when A is the judge's own response, -1 when B is, 0 otherwise,
* ``family_origin`` (with a family map): the same for responses of the judge's family that are not
  its own (PandaLM-7B is a LLaMA-7B fine-tune), so same-family and exact-self preference separate,
* ``log_ppl_diff``: log ppl_A - log ppl_B, standardized,
* ``word_diff``: words(A) - words(B), standardized,
* style control (Arena-Hard-Auto): ``headers_style``, ``lists_style``, ``bold_style``, each the
  normalised difference (A - B) / (A + B) of the markdown elements (0 when neither has any),
  standardized,

with an intercept (the position preference for A). With every style term in the model,
``self_origin`` is the style-controlled self-preference. ``of="human"`` fits the same model to the
human majority on the judge's pairs (without ``human_a``): the terms humans share with the judge
and those that are the judge's alone. A term whose column is absent (or constant among the usable
rows) is skipped and said so; perfect separation gives a note, not a crash.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.metrics import origin
from judgebias.stats import (
    ALPHA,
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_how,
    count_reasons,
    jsonable,
    nested,
)

MIN_ROWS_PER_TERM = 10
STANDARDIZED = ("log_ppl_diff", "word_diff", *(f"{m}_style" for m in F.MARKDOWN))


def choice_regression(df: pd.DataFrame, judge: str, self_map: origin.SelfMap | None = None, *,
                      of: str = "judge", family_map: origin.SelfMap | None = None) -> Estimate:
    """Fit the model to the judge's choices (``of="judge"``) or to the human majority on the same
    pairs (``of="human"``); ``details.terms`` maps each used term to coef, ci_low, ci_high, p_value
    and the odds ratio; ``value`` is McFadden's pseudo-R2 (no interval)."""
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    if of not in ("judge", "human"):
        raise ValueError(f"choice_regression: of must be 'judge' or 'human', got {of!r}")
    F.require(df, ["judge"], "choice_regression")
    rows = F.judge_rows(df, judge, "choice_regression")
    choice = rows[F.CHOICE].to_numpy()
    human = rows[F.HUMAN].to_numpy()
    skipped: dict[str, str] = {}
    columns: dict[str, np.ndarray] = {}
    if of == "human":
        choice, reasons = human, F.human_reasons(human)
    else:
        reasons = F.judge_reasons(choice)
        if (np.isin(human, (F.A, F.B))).any():
            reasons += F.human_reasons(human)
            columns["human_a"] = np.where(human == F.A, 1.0, -1.0)
        else:
            skipped["human_a"] = "no human labels"
    if "generator_a" in rows.columns and "generator_b" in rows.columns:
        own_a, own_b = origin.own_sides(rows, judge, self_map)
        columns["self_origin"] = own_a.astype(float) - own_b.astype(float)
        if family_map and family_map.get(judge):
            fam_a, fam_b = origin.family_sides(rows, judge, self_map, family_map)
            columns["family_origin"] = fam_a.astype(float) - fam_b.astype(float)
    else:
        skipped["self_origin"] = "no generator columns"
    la = np.log(F.float_col(rows, "ppl_a"))
    lb = np.log(F.float_col(rows, "ppl_b"))
    if np.isfinite(la - lb).any():
        reasons.append(("no_perplexity", ~np.isfinite(la - lb)))
        columns["log_ppl_diff"] = la - lb
    else:
        skipped["log_ppl_diff"] = "no ppl_a/ppl_b"
    if F.WORDS_A in rows.columns:
        columns["word_diff"] = (rows[F.WORDS_A].to_numpy() - rows[F.WORDS_B].to_numpy()).astype(float)
    else:
        skipped["word_diff"] = "no response texts"
    for name, col_a, col_b in zip(F.MARKDOWN, F.MD_A, F.MD_B, strict=True):
        if col_a in rows.columns:
            a, b = rows[col_a].to_numpy(dtype=float), rows[col_b].to_numpy(dtype=float)
            with np.errstate(invalid="ignore", divide="ignore"):
                columns[f"{name}_style"] = np.where(a + b > 0, (a - b) / (a + b), 0.0)
        else:
            skipped[f"{name}_style"] = "no response texts"

    keep, excl = count_reasons(reasons, len(rows))
    y = (choice[keep] == F.A).astype(float)
    n = int(keep.sum())
    if n == 0:
        raise InsufficientData(f"no usable row; excluded: {excl}")
    used, scale = [], {}
    for name, col in columns.items():
        x = col[keep]
        sd = float(x.std())
        if sd == 0 or not np.isfinite(sd):
            skipped[name] = "constant among the usable rows"
            continue
        # A term that a handful of rows move is confounded with the intercept (its standardized
        # value is one constant elsewhere): the fit wanders off without converging (PandaLM's
        # headers: 3 responses with a header in 800 pairs gave intervals of +-100000).
        _, counts = np.unique(x, return_counts=True)
        varied = int(n - counts.max())
        if varied < MIN_ROWS_PER_TERM:
            skipped[name] = f"only {varied} usable row(s) differ from the most common value"
            continue
        if name in STANDARDIZED:
            scale[name] = sd
            x = (x - x.mean()) / sd
        columns[name] = x
        used.append(name)
    if n < MIN_ROWS_PER_TERM * (len(used) + 1):
        raise InsufficientData(f"{n} usable rows are too few for {len(used) + 1} coefficients")
    if y.min() == y.max():
        raise InsufficientData(f"the {of} always picks the same side among the usable rows")
    X = np.column_stack([np.ones(n)] + [columns[name] for name in used])
    names = ["intercept", *used]
    note = None
    clusters = F.clusters(rows, keep)
    groups = clusters.codes if nested(clusters) else None
    beta, converged = _newton(X, y)
    fit = _wald_fit(X, y, beta, groups) if converged else None
    if fit is None:  # not a clean fit: statsmodels fits it and says what went wrong
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                # statsmodels gives the inference; the Newton start makes its own Newton (three
                # passes over the data per step) converge in one or two steps.
                res = sm.Logit(y, X).fit(disp=0, maxiter=200, start_params=beta) if groups is None else \
                    sm.Logit(y, X).fit(disp=0, maxiter=200, start_params=beta, cov_type="cluster",
                                       cov_kwds={"groups": groups}, use_t=True)
            except (PerfectSeparationError, np.linalg.LinAlgError) as exc:
                return _failed(n, excl, used, skipped, f"model not estimable: {exc}")
        if any(issubclass(w.category, PerfectSeparationWarning) for w in caught) or \
                not np.all(np.isfinite(res.bse)):
            note = ("perfect or quasi-perfect separation: some coefficients are unbounded; read signs, not "
                    "sizes, and do not trust their intervals")
        if not res.mle_retvals.get("converged", True):
            note = (note + "; " if note else "") + "the optimizer did not converge"
        fit = _Fit(np.asarray(res.params), np.asarray(res.conf_int(alpha=ALPHA)), np.asarray(res.pvalues),
                   float(res.llf), None)
    terms = {}
    for i, name in enumerate(names):
        coef = float(fit.params[i])
        terms[name] = {"coef": coef, "ci_low": float(fit.ci[i, 0]), "ci_high": float(fit.ci[i, 1]),
                       "p_value": float(fit.pvalues[i]),
                       "odds_ratio": math.exp(coef) if abs(coef) < 700 else None}
        if fit.design_effects is not None:
            terms[name]["design_effect"] = float(fit.design_effects[i])
    details = {"terms": jsonable(terms), "used": used, "skipped_terms": skipped,
               "standardization_sd": scale, "positive_class": f"{of} picks A"}
    if note:
        details["note"] = note
    # McFadden's R2 with the intercept-only log-likelihood in closed form (statsmodels' prsquared
    # would fit a second model to get it).
    ybar = float(y.mean())
    llnull = n * (ybar * math.log(ybar) + (1 - ybar) * math.log(1 - ybar))
    if groups is None:
        how, deff = "Wald intervals", 1.0
    else:
        how = ("Wald intervals and tests on the cluster-robust (CR1 sandwich) covariance, t on clusters "
               f"- 1, {clustered_how(clusters)}")
        # the figure's design effect: its terms' largest (each term's is in details.terms)
        deffs = fit.design_effects
        deff = float(np.max(deffs)) if deffs is not None and np.all(np.isfinite(deffs)) else None
    return Estimate(value=1.0 - fit.llf / llnull, ci_low=None, ci_high=None, n=n, exclusions=excl,
                    method=f"Logit of {of} picks A; {how}; value = McFadden pseudo-R2",
                    details=details, **cluster_fields({"clusters": clusters.count, "design_effect": deff},
                                                      clusters))


class _Fit(NamedTuple):
    params: np.ndarray
    ci: np.ndarray       # (terms, 2): the Wald interval's bounds
    pvalues: np.ndarray
    llf: float
    design_effects: np.ndarray | None  # per term: clustered / independent sandwich variance

_WARM_START_ROWS = 400_000
# Rows per block of a pass over the design: 32k rows of ~10 terms (2.6 MB) stay in the CPU's cache,
# so a Newton step reads the design once instead of six times (3x less CPU at two million rows).
_BLOCK_ROWS = 1 << 15


class _Pass(NamedTuple):
    grad: np.ndarray         # X'(y - p)
    info: np.ndarray         # X'WX, W = p(1 - p)
    llf: float               # sum of log F(q x'b), q = 2y - 1 (NaN for a Newton step)
    largest_miss: float      # max |p - y| (NaN for a Newton step)
    # with groups: the score contributions' outer products summed (clustered, as if independent)
    meat: tuple[np.ndarray, np.ndarray] | None = None


def _logit_pass(X: np.ndarray, y: np.ndarray, beta: np.ndarray, *, inference: bool,
                groups: np.ndarray | None = None) -> _Pass:
    """One pass over the rows, block by block: what a Newton step reads (the linear predictor held
    in [-30, 30], so no probability is exactly 0 or 1) or, with ``inference``, what the Wald
    inference reads (the predictor as it is, the log-likelihood and the largest miss); with
    ``groups`` (cluster codes per row) also the score contributions x_i (y_i - p_i) summed per
    cluster, and their outer products as if every row were its own cluster."""
    k = X.shape[1]
    grad, info, total, miss = np.zeros(k), np.zeros((k, k)), 0.0, 0.0
    resid = np.empty(len(X)) if groups is not None else None
    single = np.zeros((k, k))
    for lo in range(0, len(X), _BLOCK_ROWS):
        xb, yb = X[lo: lo + _BLOCK_ROWS], y[lo: lo + _BLOCK_ROWS]
        eta = xb @ beta
        if not inference:
            np.clip(eta, -30, 30, out=eta)
        p = 1.0 / (1.0 + np.exp(-eta))
        grad += xb.T @ (yb - p)
        info += (xb * (p * (1 - p))[:, None]).T @ xb
        if inference:
            miss = max(miss, float(np.max(np.abs(p - yb), initial=0.0)))
            total += float(np.sum(np.log(1 / (1 + np.exp(-(2 * yb - 1) * eta)))))
        if resid is not None:
            resid[lo: lo + _BLOCK_ROWS] = yb - p
            score = xb * (yb - p)[:, None]
            single += score.T @ score
    if not inference:
        return _Pass(grad, info, math.nan, math.nan)
    if resid is None:
        return _Pass(grad, info, total, miss)
    # per cluster, one column at a time: no (rows x terms) copy of the design
    sums = np.column_stack([np.bincount(groups, weights=X[:, j] * resid) for j in range(k)])
    return _Pass(grad, info, total, miss, (sums.T @ sums, single))


def _newton(X: np.ndarray, y: np.ndarray, steps: int = 25) -> tuple[np.ndarray, bool]:
    """Logistic MLE by plain Newton-Raphson, one pass over the data per step: (coefficients,
    converged). Never returns non-finite values (separation is left to statsmodels).

    Past 400,000 rows it starts from the fit of an evenly spaced 100,000-row subsample: the full data
    then needs four steps instead of six (the same convergence rule decides)."""
    beta = np.zeros(X.shape[1])
    if len(X) > _WARM_START_ROWS:
        every = len(X) // (_WARM_START_ROWS // 4)
        start, converged = _newton(X[::every], y[::every], steps)
        beta = start if converged else beta
    for _ in range(steps):
        at = _logit_pass(X, y, beta, inference=False)
        try:
            step = np.linalg.solve(at.info, at.grad)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)):
            break
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            return beta, True
    return (beta, False) if np.all(np.isfinite(beta)) else (np.zeros(X.shape[1]), False)


def _wald_fit(X: np.ndarray, y: np.ndarray, beta: np.ndarray,
              groups: np.ndarray | None = None) -> _Fit | None:
    """Wald inference at converged coefficients, as statsmodels' Logit computes it (covariance: the
    inverse of the information X'WX; normal quantiles and p-values; the log-likelihood summed as
    log F(q x'b), q = 2y - 1), without refitting (statsmodels' refit and rank check cost 70% of the
    regression on ten million rows). None where statsmodels would warn (perfect prediction) or the
    information cannot be inverted into finite positive variances: statsmodels then decides.

    With ``groups`` (cluster codes of rows that nest), the covariance is the cluster-robust
    sandwich B M B, B the inverse information and M the outer products of the score contributions
    summed per cluster, times G / (G - 1) (N - 1) / (N - K) (CR1 as statsmodels' ``cov_type="cluster"``
    computes it), with t quantiles and p-values on G - 1 degrees of freedom; each term's design
    effect is its variance against the same sandwich with every row its own cluster."""
    from scipy import stats

    at = _logit_pass(X, y, beta, inference=True, groups=groups)
    if at.largest_miss <= 1e-8:  # statsmodels' perfect-prediction check: allclose(p - y, 0)
        return None
    try:
        cov = np.linalg.inv(at.info)
    except np.linalg.LinAlgError:
        return None
    deffs = None
    quantile, sf = stats.norm.ppf(1 - ALPHA / 2), stats.norm.sf
    if at.meat is not None:
        n, k = X.shape
        g = int(np.unique(groups).size)
        clustered, single = (cov @ m @ cov for m in at.meat)
        cov = clustered * (g / (g - 1) * (n - 1) / (n - k))
        with np.errstate(invalid="ignore", divide="ignore"):
            deffs = np.diag(cov) / (np.diag(single) * n / (n - k))
        quantile, sf = stats.t.ppf(1 - ALPHA / 2, g - 1), (lambda z: stats.t.sf(z, g - 1))
    var = np.diag(cov)
    if not (np.all(np.isfinite(cov)) and np.all(var > 0)):
        return None
    bse = np.sqrt(var)
    ci = np.column_stack([beta - quantile * bse, beta + quantile * bse])
    return _Fit(beta, ci, 2 * sf(np.abs(beta / bse)), at.llf, deffs)


def _failed(n, excl, used, skipped, note) -> Estimate:
    return Estimate(value=None, ci_low=None, ci_high=None, n=n, exclusions=excl,
                    method="Logit of judge picks A", details={"terms": {}, "used": used,
                                                              "skipped_terms": skipped, "note": note})
