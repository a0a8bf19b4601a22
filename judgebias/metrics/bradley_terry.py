"""Bradley-Terry strengths from pairwise outcomes: the logistic fit, its bootstrap over prompts, and
the ranks both give.

The model (Bradley and Terry 1952, in the logistic form Chatbot Arena and Arena-Hard-Auto fit):
``logit P(A beats B) = beta_A - beta_B + z' gamma``, where ``z`` holds optional comparison-level
covariates (style differences, a self/family term). The outcome of one comparison is a number in
[0, 1]: 1 / 0 for a verdict, 0.5 for a tie, or the judge's P(A) itself (a fractional logit: the
same estimating equations, so the same point estimate as counting a tie as half a win each way).

Strengths are centred (their mean is 0, so no reference model has to be chosen): the likelihood does
not move along the all-ones direction (every row of the design sums to zero), so a penalty on
``(sum beta)^2`` fixes that direction without touching any difference of strengths. A very weak
ridge (``RIDGE`` = 1e-7 on the sum of squared strengths) only makes the fit exist when a bootstrap
resample has a model that won every comparison (its strength then stops near log(n / RIDGE), about
20, instead of growing without bound); elsewhere it moves a strength by well under 1e-6. Covariates
are not penalised. The fit is Newton-Raphson, vectorised over bootstrap resamples (one batched solve per
iteration), so 2,000 resamples of a 1,000-comparison table take about a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RIDGE = 1e-7
MAX_ITER = 100
TOL = 1e-10


def design(models: Sequence[str], model_a: np.ndarray, model_b: np.ndarray) -> np.ndarray:
    """(n, M) indicator differences: +1 in A's column, -1 in B's. ValueError names a comparison of a
    model with itself or a model outside ``models``."""
    index = {m: k for k, m in enumerate(models)}
    n = len(model_a)
    x = np.zeros((n, len(models)))
    try:
        ia = np.fromiter((index[m] for m in model_a), dtype=np.int64, count=n)
        ib = np.fromiter((index[m] for m in model_b), dtype=np.int64, count=n)
    except KeyError as exc:
        raise ValueError(f"model {exc.args[0]!r} is not among the models {list(models)}") from None
    if np.any(ia == ib):
        row = int(np.flatnonzero(ia == ib)[0])
        raise ValueError(f"comparison {row} pits {model_a[row]!r} against itself")
    x[np.arange(n), ia] = 1.0
    x[np.arange(n), ib] = -1.0
    return x


def connected(models: Sequence[str], x: np.ndarray, weights: np.ndarray | None = None) -> list[list[str]]:
    """The groups of models linked by comparisons (one group: every strength is comparable)."""
    m = len(models)
    parent = list(range(m))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    rows = x if weights is None else x[np.asarray(weights) > 0]
    for a, b in zip(np.argmax(rows, axis=1), np.argmin(rows, axis=1), strict=True):
        parent[find(int(a))] = find(int(b))
    groups: dict[int, list[str]] = {}
    for k, name in enumerate(models):
        groups.setdefault(find(k), []).append(name)
    return list(groups.values())


def fit_batch(x: np.ndarray, y: np.ndarray, weights: np.ndarray, n_models: int,
              ridge: float = RIDGE, bounded: bool = True) -> np.ndarray:
    """Weighted logistic fits of ``y`` on ``x`` (no intercept), one per row of ``weights`` (B, n).

    The first ``n_models`` columns of ``x`` are the strengths (penalised by ``ridge``), the rest the
    covariates. Returns (B, p) coefficients. ``bounded=False`` accepts pseudo-outcomes outside [0, 1]
    (a prediction-powered estimating equation: still concave in the coefficients for weights > 0)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    n = x.shape[0]
    if y.shape != (n,) or w.shape[1] != n:
        raise ValueError(f"outcomes {y.shape} and weights {w.shape} do not match the design {x.shape}")
    if not np.all(np.isfinite(y)) or (bounded and np.any((y < 0) | (y > 1))):
        raise ValueError("outcomes must be finite numbers in [0, 1]")
    # Resamples are fitted a chunk at a time so the (resamples, comparisons) arrays stay ~16 MB each
    # on a table of any size.
    step_rows = max(1, CHUNK_CELLS // max(n, 1))
    return np.vstack([_newton(x, y, w[k:k + step_rows], n_models, ridge)
                      for k in range(0, w.shape[0], step_rows)])


CHUNK_CELLS = 2_000_000


def _newton(x: np.ndarray, y: np.ndarray, w: np.ndarray, n_models: int, ridge: float) -> np.ndarray:
    p = x.shape[1]
    pen = np.zeros(p)
    pen[:n_models] = ridge
    ones = np.zeros(p)
    ones[:n_models] = 1.0
    centre = np.outer(ones, ones)
    beta = np.zeros((w.shape[0], p))
    for _ in range(MAX_ITER):
        eta = beta @ x.T
        mu = 1.0 / (1.0 + np.exp(-eta))
        grad = (w * (y - mu)) @ x - pen * beta - (beta @ ones)[:, None] * ones
        hess = np.einsum("bn,np,nq->bpq", w * mu * (1.0 - mu), x, x, optimize=True) + np.diag(pen) + centre
        # A tiny jitter keeps a covariate that a resample left constant from making H singular.
        step = np.linalg.solve(hess + 1e-12 * np.eye(p), grad[..., None])[..., 0]
        beta = beta + step
        if np.max(np.abs(step)) < TOL:
            break
    return beta


@dataclass(frozen=True)
class BTFit:
    """A fit and its bootstrap: ``coef`` (p,) point estimates, ``boot`` (B, p) resampled ones; the
    first ``len(models)`` columns are strengths, then ``covariates``."""

    models: tuple[str, ...]
    covariates: tuple[str, ...]
    coef: np.ndarray
    boot: np.ndarray
    n: int
    method: str

    @property
    def strengths(self) -> np.ndarray:
        return self.coef[: len(self.models)]

    @property
    def boot_strengths(self) -> np.ndarray:
        return self.boot[:, : len(self.models)]

    def covariate(self, name: str) -> tuple[float, float, float]:
        k = len(self.models) + self.covariates.index(name)
        low, high = np.quantile(self.boot[:, k], [0.025, 0.975])
        return float(self.coef[k]), float(low), float(high)


def cluster_draws(clusters: np.ndarray, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A bootstrap over clusters (prompts), drawn once for a whole table so every variant and the
    human ranking are refitted on the same resamples: (per-row cluster code, (reps, clusters) counts).
    Each resample draws as many clusters as there are, with replacement; a row's weight in a
    resample is how often its cluster was drawn (``counts[:, codes[rows]]``)."""
    uniques, codes = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(uniques), size=(reps, len(uniques)))
    counts = np.zeros((reps, len(uniques)))
    np.add.at(counts, (np.repeat(np.arange(reps), len(uniques)), draws.ravel()), 1.0)
    return codes, counts


def fit_with_bootstrap(models: Sequence[str], x: np.ndarray, y: np.ndarray, boot_weights: np.ndarray,
                       covariates: Sequence[str] = (), what: str = "Bradley-Terry",
                       row_weights: np.ndarray | None = None, method: str = "",
                       unit: str = "the prompts") -> BTFit:
    """Point fit with ``row_weights`` (default 1) and the bootstrap fits with ``boot_weights`` (from
    ``cluster_draws`` on the same rows) times them. ValueError when the comparisons do not link
    every model."""
    groups = connected(models, x[:, : len(models)])
    if len(groups) > 1:
        raise ValueError(f"{what}: the comparisons do not link every model (separate groups: {groups}); "
                         "strengths of unlinked models cannot be compared")
    m = len(models)
    rw = np.ones(len(y)) if row_weights is None else np.asarray(row_weights, dtype=float)
    bounded = row_weights is None
    coef = fit_batch(x, y, rw[None, :], m, bounded=bounded)[0]
    boot = fit_batch(x, y, boot_weights * rw[None, :], m, bounded=bounded)
    reps = boot_weights.shape[0]
    return BTFit(tuple(str(m) for m in models), tuple(covariates), coef, boot, n=len(y),
                 method=f"{what}: {method or 'logistic fit (ties and P(A) as fractional outcomes)'}, 95% "
                        f"percentile intervals from {reps} bootstrap resamples of {unit}")


# Below this many comparisons per model (2 n / M: each comparison involves two) the coverage
# benchmark's bootstrap intervals of the strengths covered less than 93% (family `leaderboard`,
# six models: 0.86-0.92 at 25 comparisons, 0.89-0.95 at 100-200; 0.936 or more at 400;
# docs/benchmarks.md): the rankings carry a warning. 133 per model = 400 comparisons of six.
RELIABLE_PER_MODEL = 133


def small_sample_warning(n: int, n_models: int) -> str | None:
    """The warning a ranking of ``n_models`` from ``n`` comparisons carries, or None."""
    per = 2 * n / max(n_models, 1)
    if per >= RELIABLE_PER_MODEL:
        return None
    need = math.ceil(RELIABLE_PER_MODEL * n_models / 2)
    return (f"{n} comparisons of {n_models} models ({per:.0f} per model): below {RELIABLE_PER_MODEL} per "
            f"model (here {need} comparisons) the 95% intervals of the strengths covered less than 93% of "
            "the time in the coverage benchmark (ranks: less at 25 comparisons of six models); read them "
            "as too narrow")


TIE_TOL = 1e-6  # strengths closer than this are a tie (the ridge can part equal ones by ~1e-7)


def ranks(strengths: np.ndarray) -> np.ndarray:
    """Rank 1 = strongest, per row of a (B, M) array or one (M,) vector; ties share the best rank."""
    s = np.atleast_2d(strengths)
    out = 1 + (s[:, None, :] > s[:, :, None] + TIE_TOL).sum(axis=2)
    return out[0] if np.ndim(strengths) == 1 else out


def ranking_records(fit: BTFit) -> list[dict]:
    """The JSON contract's rows, strongest first: strength with its percentile interval, rank and
    the 2.5% / 97.5% quantiles of the bootstrap ranks."""
    s = fit.strengths
    lo, hi = np.quantile(fit.boot_strengths, [0.025, 0.975], axis=0)
    r = ranks(s)
    boot_r = ranks(fit.boot_strengths)
    r_lo, r_hi = np.quantile(boot_r, [0.025, 0.975], axis=0, method="inverted_cdf")
    order = np.lexsort((np.array(fit.models), -s))
    return [{"model": str(fit.models[k]), "strength": float(s[k]), "ci_low": float(lo[k]),
             "ci_high": float(hi[k]), "rank": int(r[k]), "rank_ci_low": int(r_lo[k]),
             "rank_ci_high": int(r_hi[k])} for k in order]
