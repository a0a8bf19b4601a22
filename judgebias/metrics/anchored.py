"""``human_anchored``: a judge's Bradley-Terry strengths corrected with human labels on part of its
comparisons, by prediction-powered inference (PPI++: Angelopoulos, Duchi and Zrnic 2023, for an
M-estimator; with inclusion weights as in active inference, Zrnic and Candès 2024).

The judge's outcome ``yhat`` is known on every comparison of the population ``U`` (the judge's
comparisons); the human vote share ``y`` on a sample ``s`` drawn with inclusion probabilities ``pi``.
The strengths solve the prediction-powered score equation

    sum_U lam x (yhat - mu) + sum_s x [(y - mu) - lam (yhat - mu)] / pi = 0,   mu = sigmoid(x' beta),

unbiased for the humans' strengths whatever the judge's errors, for any ``lam``: ``lam = 0`` uses
the labels alone (Hájek), ``lam = 1`` adds the judge's view everywhere and removes its bias where
humans looked. Because the logistic score is linear in the outcome, this is a weighted logistic fit:
an unlabelled comparison gets weight ``lam`` and outcome ``yhat``, a labelled one weight
``lam + (1 - lam) / pi`` and the pseudo-outcome ``(lam yhat + (y - lam yhat) / pi) / weight`` (it may
leave [0, 1]; the objective stays concave). ``lam`` is PPI++'s power tuning for this design: it
minimises the trace of the strengths' linearised design variance (Poisson form, ``sum_U (1 - pi) / pi
(H^-1 (s - lam shat))^2``), estimated on the labelled comparisons at the labels-only fit, clipped to
[0, 1]. With every comparison labelled the estimate is the humans' own. Intervals come from the
same prompt bootstrap as every variant, with ``lam`` held at its value on the whole table.
"""

from __future__ import annotations

import numpy as np

from judgebias.metrics import bradley_terry as bt


def anchored_weights(yhat: np.ndarray, y: np.ndarray, labelled: np.ndarray, pi: np.ndarray,
                     lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(row weights, pseudo-outcomes) of the prediction-powered score equation (module docstring)."""
    w = np.where(labelled, lam + (1.0 - lam) / pi, lam)
    with np.errstate(invalid="ignore", divide="ignore"):
        target = np.where(labelled, (lam * yhat + (np.nan_to_num(y) - lam * yhat) / pi) / w, yhat)
    return w, np.where(w > 0, target, 0.0)


def tuned_lambda(x: np.ndarray, yhat: np.ndarray, y: np.ndarray, labelled: np.ndarray, pi: np.ndarray,
                 n_models: int) -> float:
    """PPI++'s variance-minimising weight, clipped to [0, 1]: with ``a_i = H^-1 x_i (y_i - mu_i)`` and
    ``b_i = H^-1 x_i (yhat_i - mu_i)`` at the labels-only fit, ``lam = sum c_i a_i.b_i / sum c_i b_i.b_i``
    over the labelled comparisons, ``c_i = (1 - pi_i) / pi_i^2``. 0 when every label was certain to be
    drawn (pi = 1: there is nothing left to predict)."""
    lab = np.asarray(labelled, dtype=bool)
    c = (1.0 - pi[lab]) / pi[lab] ** 2
    if not lab.any() or np.all(c <= 0):
        return 0.0
    beta = bt.fit_batch(x[lab], y[lab], (1.0 / pi[lab])[None, :], n_models)[0]
    mu = 1.0 / (1.0 + np.exp(-(x[lab] @ beta)))
    hess = (x[lab].T * ((1.0 / pi[lab]) * mu * (1.0 - mu))) @ x[lab] + np.ones((n_models, n_models))
    hinv = np.linalg.inv(hess + bt.RIDGE * np.eye(n_models))
    a = (x[lab] * (y[lab] - mu)[:, None]) @ hinv
    b = (x[lab] * (yhat[lab] - mu)[:, None]) @ hinv
    den = float(np.sum(c * np.sum(b * b, axis=1)))
    return float(np.clip(np.sum(c * np.sum(a * b, axis=1)) / den, 0.0, 1.0)) if den > 0 else 0.0
