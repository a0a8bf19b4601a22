"""Families of the model-based and probe figures: the choice regression's Wald intervals, the
length-controlled win rate, perturbation shifts and robustness, self-recognition. Truths from the
generating parameters (the regression's and the GLM's coefficients are the generating ones)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import stats as st

from judgebias.coverage import tables as T
from judgebias.coverage.registry import Family, Figure, interval, of_estimate, of_part, safely
from judgebias.metrics.recognition import self_recognition
from judgebias.metrics.regression import choice_regression
from judgebias.metrics.robustness import perturbation_shift, robustness_rate
from judgebias.metrics.win_rate import length_controlled_glm, length_controlled_win_rate

A, B, TIE = 0, 1, 2

# --- choice regression: logit P(picks A) = b0 + bh human_a + bs self_origin + bw word_z + bb bold_z,
# with word_z, bold_z the terms over their population standard deviation (the product standardizes
# by the sample's, so its coefficients estimate these). 5% judge ties and 10% human ties left out.
_REG = {"intercept": 0.4, "human_a": 1.5, "self_origin": 0.5, "word_diff": 0.3, "bold_style": 0.25}
_WORD_SD = 40.0
_BOLD_P = np.array([0.6, 0.25, 0.15])      # 0, 1, 2 bold spans per response
_REG_JUDGE_TIE, _REG_HUMAN_TIE = 0.05, 0.10


def _bold_sd() -> float:
    values, probs = [], []
    for a, b in itertools.product(range(3), repeat=2):
        values.append((a - b) / (a + b) if a + b else 0.0)
        probs.append(_BOLD_P[a] * _BOLD_P[b])
    v, p = np.array(values), np.array(probs)
    return float(np.sqrt(p @ (v - p @ v) ** 2))


def _simulate_regression(rng: np.random.Generator, n: int):
    human_a = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    side = T.categorical(rng, np.array([0.3, 0.3, 0.4]), n)         # own A / own B / neither
    self_origin = np.select([side == 0, side == 1], [1.0, -1.0], 0.0)
    wd = np.rint(rng.normal(0, _WORD_SD, n)).astype(np.int64)
    wb = rng.integers(300, 350, n)
    ba, bb = T.categorical(rng, _BOLD_P, n), T.categorical(rng, _BOLD_P, n)
    bold = np.where(ba + bb > 0, (ba - bb) / np.maximum(ba + bb, 1), 0.0)
    word_sd = math.hypot(_WORD_SD, math.sqrt(1 / 12))      # rounding to whole words adds 1/12
    eta = (_REG["intercept"] + _REG["human_a"] * human_a + _REG["self_origin"] * self_origin
           + _REG["word_diff"] * wd / word_sd + _REG["bold_style"] * bold / _bold_sd())
    choice = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), A, B)
    choice = np.where(rng.random(n) < _REG_JUDGE_TIE, TIE, choice)
    human = np.where(rng.random(n) < _REG_HUMAN_TIE, TIE, np.where(human_a > 0, A, B))
    return T.table(n, human=T.one_label(human), words=(wb + wd, wb), bold=(ba, bb),
                   columns={**T.own_generators(np.where(side == 2, -1, side)),
                            "verdict": T.choice_labels(choice)})


def _estimate_regression(df) -> dict:
    est = safely(lambda: choice_regression(df, T.JUDGE))
    terms = {} if est is None else est.details.get("terms", {})
    return {f"regression.{k}": interval(terms[k]["coef"], terms[k]["ci_low"], terms[k]["ci_high"])
            if k in terms else None for k in _REG}


# --- length-controlled win rate: the judge's vote for the model is a Beta draw (mass near 0 and 1)
# whose mean follows AlpacaEval's GLM exactly, so LC = sigmoid(theta) and the raw rate is E[vote].
_LC_THETA, _LC_PHI, _LC_CONC = -0.6, 0.8, 1.5
_LC_DELTA = (150.0, 400.0)                 # characters model - baseline: mean, sd
MODEL, BASELINE = "model-x", "baseline-0"


def _lc_mean(delta: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-(_LC_THETA + _LC_PHI * np.tanh(delta / _LC_DELTA[1]))))


def _lc_truths() -> dict[str, float]:
    x, w = np.polynomial.hermite_e.hermegauss(80)           # E over delta ~ N(mean, sd)
    raw = float(w @ _lc_mean(_LC_DELTA[0] + _LC_DELTA[1] * x) / w.sum())
    return {"lc_win_rate": 1 / (1 + math.exp(-_LC_THETA)), "lc_win_rate.raw": raw,
            "lc_win_rate.length_coef": _LC_PHI}


def _simulate_win_rate(rng: np.random.Generator, n: int):
    delta = np.rint(rng.normal(*_LC_DELTA, n))
    mu = _lc_mean(delta)
    vote = rng.beta(mu * _LC_CONC, (1 - mu) * _LC_CONC)
    base_len = rng.integers(1500, 2000, n)
    model_len = np.maximum(base_len + delta, 1).astype(np.int64)
    model_a = rng.random(n) < 0.5
    len_a, len_b = np.where(model_a, model_len, base_len), np.where(model_a, base_len, model_len)
    texts = pd.Series(["x" * k for k in range(int(max(len_a.max(), len_b.max())) + 1)])
    return T.table(n, columns={
        "generator_a": np.where(model_a, MODEL, BASELINE).astype(object),
        "generator_b": np.where(model_a, BASELINE, MODEL).astype(object),
        "response_a": texts.iloc[len_a].to_numpy(), "response_b": texts.iloc[len_b].to_numpy(),
        "p_a": np.where(model_a, vote, 1 - vote)})


def _estimate_win_rate(df) -> dict:
    est = safely(lambda: length_controlled_win_rate(df, T.JUDGE, MODEL, BASELINE))
    if est is None:
        return {}
    coef = est.details["length_coef"]
    return {"lc_win_rate": of_estimate(est), "lc_win_rate.raw": of_part(est.details["raw_win_rate"]),
            "lc_win_rate.length_coef": interval(coef["coef"], coef["ci_low"], coef["ci_high"])}


# --- the full form: three models vs one baseline over n instructions of difficulty gamma ~ N(0, sd);
# psi = 1, so the true LC_m = E_gamma[sigmoid(theta_m + gamma)] (the population of instructions, which
# the bootstrap over instructions must cover, not only the n drawn).
_GLM_MODELS = {"short": (-1.0, 1.2, -500.0), "long": (-0.2, 0.8, 400.0), "even": (0.4, 1.0, 0.0)}
_GLM_GAMMA_SD = 1.2


def _glm_truths() -> dict[str, float]:
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return {f"lc_glm.{name}": float(w @ (1 / (1 + np.exp(-(theta + _GLM_GAMMA_SD * x)))) / w.sum())
            for name, (theta, _, _) in _GLM_MODELS.items()}


def _simulate_win_rate_glm(rng: np.random.Generator, n: int):
    gamma = rng.normal(0.0, _GLM_GAMMA_SD, n)
    base_len = rng.integers(1500, 2000, n)
    cols: dict[str, list] = {k: [] for k in ("generator_a", "generator_b", "response_a", "response_b",
                                             "p_a", "prompt")}
    for name, (theta, phi, mean_delta) in _GLM_MODELS.items():
        delta = np.rint(rng.normal(mean_delta, _LC_DELTA[1], n))
        mu = 1 / (1 + np.exp(-(theta + phi * np.tanh(delta / _LC_DELTA[1]) + gamma)))
        vote = rng.beta(mu * _LC_CONC, (1 - mu) * _LC_CONC)
        model_len = np.maximum(base_len + delta, 1).astype(np.int64)
        model_a = rng.random(n) < 0.5
        cols["generator_a"] += list(np.where(model_a, name, BASELINE))
        cols["generator_b"] += list(np.where(model_a, BASELINE, name))
        cols["response_a"] += ["x" * int(k) for k in np.where(model_a, model_len, base_len)]
        cols["response_b"] += ["x" * int(k) for k in np.where(model_a, base_len, model_len)]
        cols["p_a"] += list(np.where(model_a, vote, 1 - vote))
        cols["prompt"] += [f"q{i}" for i in range(n)]
    return T.table(3 * n, columns={k: np.asarray(v, dtype=float if k == "p_a" else object)
                                   for k, v in cols.items()})


def _estimate_win_rate_glm(df) -> dict:
    out = safely(lambda: length_controlled_glm(df, T.JUDGE, BASELINE))
    if out is None:
        return {}
    return {f"lc_glm.{name}": of_estimate(est) for name, est in out.items()}


# --- a perturbation probe: pairs that like, dislike or are unsure about the perturbed side;
# P(perturbed side) before and after from Beta laws given that (near the bounds for decided pairs).
_PERT_KIND = np.array([0.35, 0.35, 0.30])
_PERT_BEFORE = ((6.0, 1.0), (1.0, 6.0), (1.2, 1.2))
_PERT_AFTER = ((7.0, 1.0), (1.0, 5.0), (1.6, 1.1))
_PERT_MISSING = 0.03                        # no verdict after (a failed call)


def _pert_truths() -> dict[str, float]:
    sb = np.array([st.beta.sf(0.5, *b) for b in _PERT_BEFORE])
    sa = np.array([st.beta.sf(0.5, *b) for b in _PERT_AFTER])
    mb = np.array([st.beta.mean(*b) for b in _PERT_BEFORE])
    ma = np.array([st.beta.mean(*b) for b in _PERT_AFTER])
    return {"perturbation_shift": float(_PERT_KIND @ (ma - mb)),
            "robustness_rate": float(_PERT_KIND @ (sb * sa + (1 - sb) * (1 - sa)))}


def _simulate_perturbation(rng: np.random.Generator, n: int):
    kind = T.categorical(rng, _PERT_KIND, n)

    def draw(params):
        return rng.beta(np.take([p[0] for p in params], kind), np.take([p[1] for p in params], kind))
    before, after = draw(_PERT_BEFORE), draw(_PERT_AFTER)
    side_a = rng.random(n) < 0.5
    pa_before, pa_after = np.where(side_a, before, 1 - before), np.where(side_a, after, 1 - after)
    missing = rng.random(n) < _PERT_MISSING
    pa_after = np.where(missing, np.nan, pa_after)
    verdict_after = np.where(pa_after > 0.5, "a", "b").astype(object)
    verdict_after[missing] = None
    return pd.DataFrame({"judge": T.JUDGE, "pair_id": np.arange(n).astype(str), "perturbation": "authority",
                         "perturbed_side": np.where(side_a, "a", "b"),
                         "verdict_before": np.where(pa_before > 0.5, "a", "b"),
                         "verdict_after": verdict_after,
                         "p_a_before": pa_before, "p_a_after": pa_after})


def _estimate_perturbation(df) -> dict:
    return {"perturbation_shift": safely(lambda: of_estimate(perturbation_shift(df, T.JUDGE, "authority"))),
            "robustness_rate": safely(lambda: of_estimate(robustness_rate(df, T.JUDGE, "authority")))}


# --- self-recognition: P(own is mine) from a mixture of a recognising and a guessing regime;
# 3% of pairs exactly 0.5 (undecided: out of the accuracy, in the mean confidence).
_REC_KIND = np.array([0.5, 0.5])
_REC_BETA = ((3.0, 1.5), (1.3, 1.3))
_REC_UNDECIDED = 0.03


def _rec_truths() -> dict[str, float]:
    acc = float(_REC_KIND @ np.array([st.beta.sf(0.5, *b) for b in _REC_BETA]))
    mean = float(_REC_KIND @ np.array([st.beta.mean(*b) for b in _REC_BETA]))
    return {"self_recognition": acc,
            "self_recognition.mean_confidence": (1 - _REC_UNDECIDED) * mean + _REC_UNDECIDED * 0.5}


def _simulate_recognition(rng: np.random.Generator, n: int):
    kind = T.categorical(rng, _REC_KIND, n)
    p_own = rng.beta(np.take([b[0] for b in _REC_BETA], kind), np.take([b[1] for b in _REC_BETA], kind))
    p_own = np.where(rng.random(n) < _REC_UNDECIDED, 0.5, p_own)
    side = rng.integers(0, 2, n)
    return pd.DataFrame({"pair_id": np.arange(n).astype(str), "judge": T.JUDGE,
                         **T.own_generators(side), "p_a": np.where(side == 1, 1 - p_own, p_own)})


def _estimate_recognition(df) -> dict:
    est = safely(lambda: self_recognition(df, T.JUDGE))
    if est is None:
        return {}
    return {"self_recognition": of_estimate(est),
            "self_recognition.mean_confidence": of_part(est.details["mean_confidence"])}


FAMILIES: tuple[Family, ...] = (
    Family("regression", "logistic choice model with human, own-origin, length and bold terms",
           "5% judge ties, 10% human ties; defined from 10 usable rows per coefficient",
           tuple(Figure(f"regression.{k}", "logistic Wald", v) for k, v in _REG.items()),
           _simulate_regression, _estimate_regression),
    Family("win_rate", "model vs baseline votes following AlpacaEval's length GLM",
           "votes near 0 and 1 (Beta, concentration 1.5); length differences sd 400 characters",
           (Figure("lc_win_rate", "GLM Wald (HC3, t on n-2) through the sigmoid",
                   _lc_truths()["lc_win_rate"]),
            Figure("lc_win_rate.raw", "t clipped to [0, 1]", _lc_truths()["lc_win_rate.raw"]),
            Figure("lc_win_rate.length_coef", "GLM Wald (HC3, t on n-2)",
                   _lc_truths()["lc_win_rate.length_coef"])),
           _simulate_win_rate, _estimate_win_rate),
    Family("perturbation", "P(perturbed side) before and after one perturbation",
           "decided pairs near the bounds, 30% unsure pairs, 3% failed calls",
           (Figure("perturbation_shift", "t clipped to [-1, 1]", _pert_truths()["perturbation_shift"]),
            Figure("robustness_rate", "Agresti-Coull", _pert_truths()["robustness_rate"])),
           _simulate_perturbation, _estimate_perturbation),
    Family("recognition", "P(own is mine) over pairs with one own response",
           "half the pairs guessed (P near 0.5), 3% undecided at exactly 0.5",
           (Figure("self_recognition", "Agresti-Coull", _rec_truths()["self_recognition"]),
            Figure("self_recognition.mean_confidence", "t clipped to [0, 1]",
                   _rec_truths()["self_recognition.mean_confidence"])),
           _simulate_recognition, _estimate_recognition),
)

# Opt-in (`judgebias coverage -f win_rate_glm`): each replication refits both stages 200 times, about
# 1 s at 100 instructions and 10 s at 1000 on one core, hours at the default 2000 replications.
OPT_IN: tuple[Family, ...] = (
    Family("win_rate_glm", "three models vs one baseline following AlpacaEval's full GLM (instruction "
           "difficulty, n = instructions)",
           "votes near 0 and 1 (Beta, concentration 1.5); difficulty sd 1.2 logits; length differences "
           "sd 400 characters around -500, +400 and 0",
           tuple(Figure(k, "bootstrap over instructions, both stages refitted: per side the wider of the "
                        "expanded percentile and t x bootstrap SE", v)
                 for k, v in _glm_truths().items()),
           _simulate_win_rate_glm, _estimate_win_rate_glm),
)
