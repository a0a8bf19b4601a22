"""Estimation from a probability sample of human labels: Horvitz-Thompson, Hájek and PPI++.

A human label is bought for a pair drawn by a probability design, so each pair ``i`` of the declared
population ``U`` has a known inclusion probability ``pi_i`` > 0. A figure is a smooth function
``theta = g(T_1, ..., T_k)`` of population totals ``T_j = sum_U y_ji`` of per-pair variables, some
of which need the human label (EO = TPR - TNR is ``T1/T2 - T3/T4``). Then

* Horvitz-Thompson total: ``T_j = sum_s y_ji / pi_i`` (unbiased for any design);
* Hájek / ratio form: ``g`` of those totals (conditional rates are ratios, so the unknown size of a
  domain such as "pairs humans did not call a tie" cancels);
* prediction-powered (PPI++, Angelopoulos et al. 2023, with the inclusion weights of active
  inference, Zrnic and Candès 2024): a prediction ``yhat_ji`` known on every pair of ``U`` (from the
  gold panel) gives ``T_j(lam) = lam sum_U yhat_ji + sum_s (y_ji - lam yhat_ji) / pi_i``: unbiased for
  any ``lam``, whatever the predictor; ``lam`` is tuned to the variance-minimising value, clipped to
  [0, 1], so ``lam = 0`` is the Hájek estimate and a useless predictor cannot widen the interval.

Variances are by linearisation: ``u_i = sum_j dg/dT_j y_ji`` and the design variance of its HT total
(Poisson: ``sum_s (1 - pi) u^2 / pi^2``; stratified simple random sampling without replacement:
``sum_h N_h^2 (1 - n_h/N_h) s_h^2 / n_h``). The effective sample size is the number of uniformly
drawn labels that would give the same variance: ``N^2 S_u^2 / Var``.

Two small-sample corrections keep the 95% intervals at 95% from 25 labels on (measured by the
replay on PandaLM and the coverage benchmark, docs/annotation.md):

* **design degrees of freedom**: the variance is estimated from the few labelled units whose
  linearised variable is not zero (a domain such as "humans preferred the other response" may hold
  five of them), weighted unequally; the interval takes the t quantile on ``df`` = Kish's effective
  number of those units minus one (``n - H`` at most in a stratified design) instead of 1.96;
* **leave-one-out power tuning**: a lambda tuned on the same labels it weights makes the variance
  estimate optimistic (it is chosen to look small). Each labelled unit's lambda is tuned on the
  other labelled units instead, so it does not depend on that unit's own draw: the HT totals stay
  exactly unbiased for any predictor, and the variance no longer rewards the selection.

Pure functions on numpy arrays; ``judgebias.metrics.human`` builds the variables from a table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _stats

from judgebias.stats import ALPHA, Estimate, InsufficientData, wilson

POISSON, STRATIFIED = "poisson", "stratified"
VARIANCES = (POISSON, STRATIFIED)
Z = 1.959963984540054  # the normal 97.5% quantile; intervals use t on the design df (t_quantile)
assert abs(ALPHA - 0.05) < 1e-12


def t_quantile(df: float) -> float:
    """The 97.5% quantile of t on ``df`` degrees of freedom (the normal one for infinite df)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df!r}")
    return Z if math.isinf(df) else float(_stats.t.ppf(1 - ALPHA / 2, df))


def t_p_value(statistic: float, df: float) -> float:
    """Two-sided p-value of a t statistic on ``df`` degrees of freedom (normal for infinite df)."""
    tail = _stats.norm.sf if math.isinf(df) else (lambda x: _stats.t.sf(x, df))
    return float(2 * tail(abs(statistic)))


@dataclass(frozen=True)
class SampleDesign:
    """Who could be labelled and with which probability.

    ``pi``: inclusion probability of each population unit (all > 0); ``sampled``: whether it was
    drawn; ``stratum``: stratum label per unit (stratified design only); ``variance``: which design
    variance applies (``poisson`` for Poisson / PPS draws, ``stratified`` for stratified simple random
    sampling without replacement, uniform being one stratum). ``population`` names the population.
    """

    pi: np.ndarray
    sampled: np.ndarray
    variance: str = POISSON
    stratum: np.ndarray | None = None
    population: str = ""

    def __post_init__(self) -> None:
        pi = np.asarray(self.pi, dtype=float)
        sampled = np.asarray(self.sampled, dtype=bool)
        if pi.ndim != 1 or sampled.shape != pi.shape:
            raise ValueError(f"pi and sampled must be 1-d arrays of one length, got {pi.shape}, "
                             f"{sampled.shape}")
        if pi.size == 0:
            raise ValueError("the population is empty")
        if not np.all(np.isfinite(pi)) or np.any(pi <= 0) or np.any(pi > 1):
            bad = int(np.flatnonzero(~(np.isfinite(pi) & (pi > 0) & (pi <= 1)))[0])
            raise ValueError(f"inclusion probability of unit {bad} is {pi[bad]!r}: every unit of the "
                             "population needs 0 < pi <= 1 (a unit that could not be drawn is not in it)")
        if self.variance not in VARIANCES:
            raise ValueError(f"variance must be one of {VARIANCES}, got {self.variance!r}")
        if self.variance == STRATIFIED and (self.stratum is None or len(self.stratum) != pi.size):
            raise ValueError("a stratified design needs one stratum label per unit")
        object.__setattr__(self, "pi", pi)
        object.__setattr__(self, "sampled", sampled)

    @property
    def size(self) -> int:
        return int(self.pi.size)

    @property
    def n(self) -> int:
        return int(self.sampled.sum())


def ht_total(y: np.ndarray, design: SampleDesign) -> float:
    """Horvitz-Thompson total of ``y`` (read on the sampled units only)."""
    y = _on_sample(y, design, "y")
    return float(np.sum(y / design.pi[design.sampled]))


def design_cov(a: np.ndarray, b: np.ndarray, design: SampleDesign) -> float:
    """Estimated design covariance of the HT totals of ``a`` and ``b`` (``a is b``: the variance)."""
    a = _on_sample(a, design, "a")
    b = _on_sample(b, design, "b")
    pi = design.pi[design.sampled]
    if design.variance == POISSON:
        return float(np.sum((1.0 - pi) * a * b / pi**2))
    strata = np.asarray(design.stratum)
    s_strata = strata[design.sampled]
    total = 0.0
    for h in pd.unique(strata):
        big_n = int(np.sum(strata == h))
        in_h = s_strata == h
        n_h = int(in_h.sum())
        if n_h == 0:
            raise InsufficientData(f"stratum {h!r} has no labelled unit: its total cannot be estimated")
        if n_h == 1:
            if n_h < big_n:
                raise InsufficientData(f"stratum {h!r} has one labelled unit: its variance is unknown "
                                       "(allocate at least 2 per stratum)")
            continue
        cov_h = float(np.cov(a[in_h], b[in_h], ddof=1)[0, 1])
        total += big_n**2 * (1.0 - n_h / big_n) * cov_h / n_h
    return total


def ht_mean(y: np.ndarray, design: SampleDesign) -> Estimate:
    """Horvitz-Thompson mean over a population of known size N: sum_s (y / pi) / N."""
    big_n = design.size
    value = ht_total(y, design) / big_n
    se = math.sqrt(max(design_cov(y, y, design), 0.0)) / big_n
    # s2 on the totals scale (u_i = y_i / N), like every other figure here.
    return _estimate(value, se, design, "Horvitz-Thompson mean", s2=_weighted_var(y, design) / big_n**2,
                     df=design_df(y, design))


def design_df(z: np.ndarray, design: SampleDesign) -> float:
    """Degrees of freedom of the design variance of the linearised variable ``z``: Kish's effective
    number of the labelled units that carry it (``z`` not zero), minus one; in a stratified design at
    most their count minus the strata they fall in. At least 1.

    A conditional rate's variable is zero outside its domain, so a rate over five labelled pairs gets
    4 df however many labels were bought; unequal inclusion probabilities lower it further (Kish:
    ``(sum w)^2 / sum w^2``), since a few heavily weighted units then carry the estimate."""
    z = _on_sample(z, design, "z")
    scale = float(np.max(np.abs(z))) if z.size else 0.0
    carries = np.abs(z) > 1e-12 * scale if scale > 0 else np.zeros(z.shape, bool)
    w = 1.0 / design.pi[design.sampled][carries]
    if w.size < 2:
        return 1.0
    df = float(w.sum() ** 2 / np.sum(w * w)) - 1.0
    if design.variance == STRATIFIED:
        strata = np.asarray(design.stratum)[design.sampled][carries]
        df = min(df, float(w.size - len(pd.unique(strata))))
    return max(df, 1.0)


def _on_sample(y: np.ndarray, design: SampleDesign, what: str) -> np.ndarray:
    y = np.asarray(y, dtype=float)
    if y.shape == design.pi.shape:
        y = y[design.sampled]
    elif y.shape != (design.n,):
        raise ValueError(f"{what} must have one value per population unit ({design.size}) or per "
                         f"sampled unit ({design.n}), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{what} has a missing value on a sampled unit: a drawn pair lacks its label")
    return y


def _weighted_var(u: np.ndarray, design: SampleDesign) -> float:
    """Hájek estimate of the population variance S^2 of ``u``."""
    u = _on_sample(u, design, "u")
    w = 1.0 / design.pi[design.sampled]
    if u.size < 2:
        return math.nan
    mean = np.sum(w * u) / np.sum(w)
    return float(np.sum(w * (u - mean) ** 2) / np.sum(w) * u.size / (u.size - 1))


def _carrying_share(z: np.ndarray, design: SampleDesign) -> float:
    """Estimated share of the population whose linearised variable is not zero (Hájek)."""
    z = _on_sample(z, design, "z")
    w = 1.0 / design.pi[design.sampled]
    scale = float(np.max(np.abs(z))) if z.size else 0.0
    return float(np.sum(w[np.abs(z) > 1e-12 * scale]) / np.sum(w)) if scale > 0 else 0.0


def _estimate(value: float, se: float, design: SampleDesign, method: str, *, s2: float, df: float,
              share: float = 1.0, details: Mapping | None = None) -> Estimate:
    q = t_quantile(df)
    # Effective sample size: the uniformly drawn labels whose classical 95% interval (t on its own
    # df, finite-population corrected) is as wide as this one, so it is read off an interval that
    # covers rather than off a variance ratio that ignores how few units estimated the variance.
    ess = (float(required_labels(design.size**2 * s2, design.size, q * se, share))
           if se > 0 and np.isfinite(s2) and share > 0 else math.nan)
    return Estimate(
        value=value, ci_low=value - q * se, ci_high=value + q * se, n=design.n,
        statistic=value / se if se > 0 else None,
        p_value=t_p_value(value / se, df) if se > 0 else None,
        method=f"{method}; {design.variance} design variance, {T_INTERVAL}",
        details={"se": se, "df": df, "effective_sample_size": ess, "labels": design.n,
                 "population_size": design.size, "population": design.population, **(details or {})})


T_INTERVAL = "95% t interval on the design degrees of freedom"


def numerical_gradient(g: Callable[[np.ndarray], float], t: np.ndarray) -> np.ndarray:
    """Central-difference gradient of ``g`` at the totals ``t`` (steps relative to each total)."""
    grad = np.empty_like(t)
    for j in range(t.size):
        h = 1e-6 * max(abs(t[j]), 1.0)
        up, down = t.copy(), t.copy()
        up[j] += h
        down[j] -= h
        grad[j] = (g(up) - g(down)) / (2 * h)
    return grad


def smooth_estimate(
    y: np.ndarray,
    g: Callable[[np.ndarray], float],
    design: SampleDesign,
    *,
    yhat: np.ndarray | None = None,
    lam: float | None = None,
    name: str = "",
) -> Estimate:
    """``theta = g(T)`` from a probability sample, Hájek form (``yhat`` None) or PPI++ (``yhat`` given).

    ``y``: (k, N) per-unit variables, NaN allowed off the sample; ``yhat``: (k, N) their predictions
    on every unit; ``lam``: fixed PPI weight, or None to tune it (clipped to [0, 1]) leave-one-out:
    each labelled unit's weight from the other labelled units (``details["lambda"]`` is the weight
    tuned on all of them, the one every unlabelled unit gets).
    ``g`` maps the k totals to the figure; it raises ``InsufficientData`` (or returns NaN) where the
    figure is undefined, e.g. a rate whose denominator total is 0.
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))
    if y.shape[1] != design.size:
        raise ValueError(f"y must be (k, {design.size}), got {y.shape}")
    ys = np.vstack([_on_sample(row, design, f"{name or 'y'}[{j}]") for j, row in enumerate(y)])
    w = 1.0 / design.pi[design.sampled]
    t_ht = ys @ w
    if yhat is None:
        value = _checked(g, t_ht, name)
        u = numerical_gradient(g, t_ht) @ ys
        se = math.sqrt(max(design_cov(u, u, design), 0.0))
        return _estimate(value, se, design, "Hájek (ratio of Horvitz-Thompson totals)",
                         s2=_weighted_var(u, design), df=design_df(u, design),
                         share=_carrying_share(u, design))
    yhat = np.atleast_2d(np.asarray(yhat, dtype=float))
    if yhat.shape != y.shape or not np.all(np.isfinite(yhat)):
        raise ValueError(f"yhat must be finite with the shape of y {y.shape}, got {yhat.shape}")
    hs = yhat[:, design.sampled]
    tuned = lam is None
    if tuned:
        _checked(g, t_ht, name)
        lam, lam_s = _leave_one_out_lambda(numerical_gradient(g, t_ht), ys, hs, design)
    elif not np.isfinite(lam):
        raise ValueError(f"lam must be finite, got {lam!r}")
    else:
        lam_s = np.full(ys.shape[1], float(lam))
    lam_all = np.full(design.size, float(lam))
    lam_all[design.sampled] = lam_s
    t_pp = yhat @ lam_all + (ys - lam_s * hs) @ w
    value = _checked(g, t_pp, name)
    grad = numerical_gradient(g, t_pp)
    resid = grad @ ys - lam_s * (grad @ hs)
    se = math.sqrt(max(design_cov(resid, resid, design), 0.0))
    method = ("PPI++ (prediction-powered, power-tuned leave-one-out)" if tuned else
              f"prediction-powered with lambda={lam:g}")
    return _estimate(value, se, design, method, s2=_weighted_var(grad @ ys, design),
                     share=_carrying_share(grad @ ys, design),
                     df=design_df(resid, design), details={"lambda": float(lam)})


def _leave_one_out_lambda(grad: np.ndarray, ys: np.ndarray, hs: np.ndarray, design: SampleDesign) -> tuple[
        float, np.ndarray]:
    """The variance-minimising PPI weight at the Hájek point, clipped to [0, 1]: tuned on every
    labelled unit (for the unlabelled ones) and, for each labelled unit, on the others alone.

    lam = Cov(u, uhat) / Var(uhat) with design (co)variances that are sums over labelled units, so
    dropping unit i subtracts its own term: Poisson a_i u_i uhat_i with a_i = (1 - pi_i) / pi_i^2;
    stratified, the same on deviations from the stratum means with a_i = N_h^2 (1 - f_h) /
    (n_h (n_h - 1)) (the means kept from the whole sample: an O(1/n_h) difference)."""
    u, uh = grad @ ys, grad @ hs
    pi = design.pi[design.sampled]
    if design.variance == STRATIFIED:
        strata = pd.Series(np.asarray(design.stratum)[design.sampled])
        u = u - strata.map(pd.Series(u).groupby(strata).mean()).to_numpy()
        uh = uh - strata.map(pd.Series(uh).groupby(strata).mean()).to_numpy()
        n_h = strata.map(strata.value_counts()).to_numpy(dtype=float)
        big_n_h = n_h / pi
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(n_h > 1, big_n_h**2 * (1.0 - pi) / (n_h * (n_h - 1.0)), 0.0)
    else:
        a = (1.0 - pi) / pi**2
    cuv, vh = a * u * uh, a * uh * uh
    c_all, v_all = float(cuv.sum()), float(vh.sum())
    lam = float(np.clip(c_all / v_all, 0.0, 1.0)) if v_all > 0 else 0.0
    c_i, v_i = c_all - cuv, v_all - vh
    tiny = 1e-12 * max(v_all, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam_s = np.where(v_i > tiny, np.clip(c_i / v_i, 0.0, 1.0), 0.0)
    return lam, lam_s


def _checked(g: Callable[[np.ndarray], float], t: np.ndarray, name: str) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(g(t))
    if not np.isfinite(value):
        raise InsufficientData(f"{name or 'the figure'} is undefined on this sample "
                               f"(totals {np.round(t, 3)})")
    return value


def ratio(num: int, den: int) -> Callable[[np.ndarray], float]:
    """g(T) = T[num] / T[den]: a conditional rate."""
    def g(t: np.ndarray) -> float:
        if t[den] == 0:
            return math.nan
        return t[num] / t[den]
    return g


def ratio_difference(n1: int, d1: int, n2: int, d2: int) -> Callable[[np.ndarray], float]:
    """g(T) = T[n1] / T[d1] - T[n2] / T[d2]: a difference of two conditional rates (EO, Eq. 6)."""
    first, second = ratio(n1, d1), ratio(n2, d2)
    return lambda t: first(t) - second(t)


def required_labels(s2: float, population: int, half_width: float, carrying_share: float = 1.0) -> int:
    """Labels a uniform sample without replacement needs for a 95% half-width, given the population
    variance ``s2`` of the linearised variable (mean scale): n0 = (t S / h)^2, with the finite-
    population correction n = n0 / (1 + n0 / N). t is taken on the df the estimate will have
    (``design_df``: n * ``carrying_share`` - 1, the share of units whose variable is not zero), so n
    is the fixed point of that equation (it falls as t does: a few iterations from t = 1.96)."""
    if half_width <= 0 or not np.isfinite(half_width):
        raise ValueError(f"half-width must be > 0, got {half_width!r}")
    if not np.isfinite(s2) or s2 < 0:
        raise ValueError(f"variance must be finite and >= 0, got {s2!r}")
    if not 0 < carrying_share <= 1:
        raise ValueError(f"carrying_share must be in (0, 1], got {carrying_share!r}")
    q, n = Z, 0
    for _ in range(100):
        n0 = q**2 * s2 / half_width**2
        new = int(min(population, math.ceil(n0 / (1 + n0 / population))))
        if new == n:
            break
        n, q = new, t_quantile(max(new * carrying_share - 1.0, 1.0))
    return n


def wilson_design(p: float, se: float, labelled: int, df: float = math.inf) -> tuple[float, float]:
    """Wilson 95% interval of a rate estimated from a complex sample, with the effective sample size
    n* = p(1 - p) / se^2 in place of n (Korn and Graubard's idea; the survey package's svyciprop
    does the same for its Wilson-type intervals). Unlike the Wald interval it stays inside [0, 1] and
    keeps its coverage for small domains and rates near 0 or 1. When the sample shows no spread
    (p = 0 or 1, se = 0) n* is the number of labelled units in the domain.

    ``df``: the design degrees of freedom of ``se`` (``design_df``); n* is scaled by (z / t_df)^2 so
    the interval carries the uncertainty of a variance estimated from few units (Korn and
    Graubard's degrees-of-freedom adjustment taken against the normal quantile: measured on
    PandaLM, their milder t_(n-1) / t_df ratio left PPI++ at 0.88 on a five-label domain)."""
    n_eff = p * (1 - p) / se**2 if se > 0 and 0 < p < 1 else float(labelled)
    n_eff = max(n_eff * (Z / t_quantile(df)) ** 2, 1e-9)
    _, low, high = wilson(p * n_eff, n_eff)  # statsmodels' Wilson takes a fractional n as it is
    return max(0.0, low), min(1.0, high)


def newcomb_design(p1: float, ci1: tuple[float, float], p2: float, ci2: tuple[float, float]) -> tuple[
        float, float]:
    """Newcomb's hybrid interval of p1 - p2 from the two rates' Wilson intervals (rates of disjoint
    domains, e.g. TPR and TNR, whose covariance is negligible)."""
    d = p1 - p2
    return (d - math.sqrt((p1 - ci1[0]) ** 2 + (ci2[1] - p2) ** 2),
            d + math.sqrt((ci1[1] - p1) ** 2 + (p2 - ci2[0]) ** 2))
