"""How far two rankings of the same models agree, and how much a correction moved one.

Both rankings come with bootstrap strengths drawn on the same resamples of the prompts
(``leaderboard``), so each figure's interval is the 2.5% / 97.5% percentile of the figure computed
resample by resample: the joint variability of both rankings, not of one of them alone.

* Kendall's tau-b (ties in either ranking handled as tau-b does) and Spearman's rho (Pearson
  correlation of the average ranks) over the models both rankings hold;
* the largest rank change from one ranking to the other, the models that moved that far, and every
  pair of models whose order the correction reversed;
* the probability that the top model differs: the share of resamples whose strongest model is not
  the same in both rankings.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
from scipy.stats import rankdata

from judgebias.metrics.bradley_terry import TIE_TOL, BTFit, ranks
from judgebias.stats import Estimate


def _aligned(first: BTFit, second: BTFit) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    common = [m for m in first.models if m in set(second.models)]
    if len(common) < 2:
        raise ValueError(f"fewer than two models in both rankings ({common})")
    if first.boot.shape[0] != second.boot.shape[0]:
        raise ValueError("the two rankings were bootstrapped with different numbers of resamples")
    i = [first.models.index(m) for m in common]
    k = [second.models.index(m) for m in common]
    return (common, first.strengths[i], second.strengths[k], first.boot_strengths[:, i],
            second.boot_strengths[:, k])


def _sign(d: np.ndarray) -> np.ndarray:
    return np.where(np.abs(d) <= TIE_TOL, 0.0, np.sign(d))


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``x`` with the same row of ``y`` ((B, M) or (M,)); NaN where a
    row has every value tied."""
    x2, y2 = np.atleast_2d(x), np.atleast_2d(y)
    i, j = np.triu_indices(x2.shape[1], k=1)
    sx, sy = _sign(x2[:, i] - x2[:, j]), _sign(y2[:, i] - y2[:, j])
    den = np.sqrt((sx != 0).sum(axis=1) * (sy != 0).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(den > 0, (sx * sy).sum(axis=1) / np.where(den > 0, den, 1), np.nan)
    return tau[0] if np.ndim(x) == 1 else tau


def _snap(v: np.ndarray) -> np.ndarray:
    """Values within TIE_TOL of the row's smallest one above them become equal (ties for rankdata)."""
    order = np.argsort(v, axis=1)
    s = np.take_along_axis(v, order, axis=1)
    gap = np.diff(s, axis=1) > TIE_TOL
    group = np.concatenate([np.zeros((s.shape[0], 1)), np.cumsum(gap, axis=1)], axis=1)
    out = np.empty_like(group)
    np.put_along_axis(out, order, group, axis=1)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of ``x`` with the same row of ``y`` (average ranks); NaN where a
    row is constant."""
    rx = rankdata(_snap(np.atleast_2d(x)), axis=1)
    ry = rankdata(_snap(np.atleast_2d(y)), axis=1)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(den > 0, (rx * ry).sum(axis=1) / np.where(den > 0, den, 1), np.nan)
    return rho[0] if np.ndim(x) == 1 else rho


def _estimate(value: float, boot: np.ndarray, n: int, method: str, reps: int) -> Estimate:
    ok = boot[np.isfinite(boot)]
    low, high = (np.quantile(ok, [0.025, 0.975]) if ok.size else (np.nan, np.nan))
    lost = reps - ok.size
    return Estimate(value=float(value), ci_low=float(low), ci_high=float(high), n=n,
                    exclusions={"resamples_all_tied": int(lost)} if lost else {},
                    method=f"{method} over {n} models; 95% percentile interval from {ok.size} bootstrap "
                           "resamples of the prompts (both rankings refitted on each)")


def agreement(fit: BTFit, reference: BTFit) -> dict[str, Estimate]:
    """Kendall's tau-b and Spearman's rho of ``fit``'s strengths with ``reference``'s."""
    common, s, r, bs, br = _aligned(fit, reference)
    reps = bs.shape[0]
    return {"kendall_tau": _estimate(kendall_tau_b(s, r), kendall_tau_b(bs, br), len(common),
                                     "Kendall's tau-b", reps),
            "spearman": _estimate(spearman(s, r), spearman(bs, br), len(common), "Spearman's rho", reps)}


def rank_change(before: BTFit, after: BTFit) -> dict:
    """What the correction ``after`` did to the ranking ``before``: the largest absolute rank change
    and the models that moved that far (ranks among the models both hold), every pair whose order was
    reversed, and the probability that the top model differs (share of resamples)."""
    common, s, r, bs, br = _aligned(before, after)
    rank_b, rank_a = ranks(s), ranks(r)
    moved = np.abs(rank_a - rank_b)
    largest = int(moved.max())
    swapped = [[common[i], common[j]] for i, j in combinations(range(len(common)), 2)
               if _sign(s[i] - s[j]) * _sign(r[i] - r[j]) < 0]
    top_differs = float(np.mean(np.argmax(bs, axis=1) != np.argmax(br, axis=1)))
    return {"models": len(common),
            "largest_rank_change": largest,
            "moved_most": [{"model": common[k], "rank_before": int(rank_b[k]), "rank_after": int(rank_a[k])}
                           for k in np.flatnonzero(moved == largest)] if largest else [],
            "swapped": swapped,
            "top_before": common[int(np.argmax(s))], "top_after": common[int(np.argmax(r))],
            "p_top_differs": top_differs,
            "method": f"ranks among the {len(common)} models both rankings hold; p_top_differs = share of "
                      f"{bs.shape[0]} bootstrap resamples of the prompts whose strongest model differs"}


def missing_models(fit: BTFit, reference: BTFit) -> Sequence[str]:
    """Models of ``reference`` that ``fit`` does not rank (e.g. a relative dropped by ``related``)."""
    return [m for m in reference.models if m not in set(fit.models)]
