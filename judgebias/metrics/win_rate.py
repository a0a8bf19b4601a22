"""Win rates against a baseline, raw and length-controlled (AlpacaEval 2).

A judge that prefers longer answers inflates the win rate of every verbose model. AlpacaEval 2's
length-controlled win rate (Dubois et al. 2024, "Length-Controlled AlpacaEval") fits a logistic GLM
of the judge's preference for model m over the baseline on instruction x,

    logit P(m preferred on x) = theta_m + phi_m * tanh(delta_len / sd_m(delta_len)) + psi_m * gamma_x

with ``delta_len`` = characters of the model's answer minus the baseline's and ``gamma_x`` the
instruction's difficulty, and reports the win rate predicted at zero length difference averaged
over the instructions: LC_m = mean_x sigmoid(theta_m + psi_m * gamma_x). The preference is the
judge's vote for the model in [0, 1] (its probability when it has one, 1/0/0.5 from a verdict), a
fractional response fitted by quasi-likelihood.

``length_controlled_glm`` is the full form, for several models judged against one baseline:
AlpacaEval's two stages, (1) gamma_x fitted jointly across the models with psi fixed at 1 (here with
a weak ridge so an instruction every model lost stays finite), (2) per model theta, phi, psi with
gamma fixed. ``length_controlled_win_rate`` is the length-only form for one model (no gamma term),
the only one a single model vs baseline identifies. Neither has AlpacaEval's regularisation of phi
and psi toward the baseline's own length sensitivity: it needs the baseline's annotations against
its verbose and concise selves, which AlpacaEval keeps apart from its results.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

from judgebias.metrics import frame as F
from judgebias.stats import (
    ALPHA,
    Clusters,
    Estimate,
    InsufficientData,
    cluster_fields,
    cluster_note,
    clustered_how,
    clustered_mean_figure,
    expansion,
    nested,
)

MIN_PAIRS = 10
_FORM = ("length-only form of AlpacaEval 2's GLM (no instruction-difficulty term, phi not "
         "regularised): LC = sigmoid(theta)")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _rows(df: pd.DataFrame, judge: str, model: str, baseline: str) -> tuple[np.ndarray, np.ndarray, Clusters]:
    """(vote for the model, characters model - baseline, their clusters) over the judge's
    model-vs-baseline rows."""
    rows = F.judge_rows(df, judge, "length_controlled_win_rate")
    ga, gb = rows["generator_a"].astype(object).to_numpy(), rows["generator_b"].astype(object).to_numpy()
    model_a = (ga == model) & (gb == baseline)
    model_b = (gb == model) & (ga == baseline)
    keep = model_a | model_b
    vote = rows[F.VOTE].to_numpy(dtype=float)
    vote = np.where(model_a, vote, 1.0 - vote)[keep]
    len_a, len_b = F.char_lengths(rows, "response_a"), F.char_lengths(rows, "response_b")
    delta = np.where(model_a, len_a - len_b, len_b - len_a)[keep]
    ok = ~np.isnan(vote)
    return vote[ok], delta[ok], F.clusters(rows, keep).subset(ok)


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
    vote, delta, clusters = _rows(prepared, judge, model, baseline)
    n = int(vote.size)
    if n < MIN_PAIRS:
        raise InsufficientData(f"{n} judged pairs of {model} vs {baseline} (need {MIN_PAIRS})")
    raw = clustered_mean_figure(vote, clusters, null=0.5, bounds=(0.0, 1.0))
    sd = float(delta.std(ddof=1))
    if sd == 0 or not np.isfinite(sd):
        raise InsufficientData(f"{model} vs {baseline}: every pair has the same length difference")
    X = np.column_stack([np.ones(n), np.tanh(delta / sd)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fractional responses: statsmodels warns, the fit is the QMLE
        res = sm.GLM(vote, X, family=sm.families.Binomial()).fit()
    params = np.asarray(res.params, dtype=float)
    theta, phi = (float(v) for v in params)
    # HC3 errors and t quantiles on n - 2 degrees of freedom: HC0 with normal quantiles covered
    # 0.87 of the time at 10 pairs and 0.92 at 50 in the coverage benchmark (AlpacaEval's own
    # length GLM with votes near 0 and 1). Pairs that nest in clusters: the CR1 sandwich, t on
    # clusters - 1.
    if nested(clusters):
        se, deff, df = _cluster_se(X, vote, params, clusters)
        how = f"CR1 cluster-robust errors, t on clusters - 1, {clustered_how(clusters)}"
    else:
        se, deff, df = _hc3_se(X, vote, params), 1.0, n - 2
        how = "HC3 errors, t on n - 2 df"
    q = float(stats.t.ppf(1 - ALPHA / 2, df))
    t = params / se
    p = 2 * stats.t.sf(np.abs(t), df)
    details = {"model": model, "baseline": baseline, "raw_win_rate": raw,
               "length_coef": {"coef": phi, "ci_low": phi - q * se[1], "ci_high": phi + q * se[1],
                               "p_value": float(p[1])},
               "mean_delta_chars": float(delta.mean()), "sd_delta_chars": sd}
    return Estimate(value=_sigmoid(theta), ci_low=_sigmoid(theta - q * se[0]),
                    ci_high=_sigmoid(theta + q * se[0]), n=n, statistic=float(t[0]), p_value=float(p[0]),
                    method=f"{_FORM}; Wald interval of theta ({how}) through the sigmoid; test of LC = 0.5",
                    details=details, **cluster_fields({"clusters": clusters.count, "design_effect": deff},
                                                      clusters))


def _cluster_se(X: np.ndarray, y: np.ndarray, params: np.ndarray,
                clusters: Clusters) -> tuple[np.ndarray, float, int]:
    """CR1 sandwich standard errors of the quasi-likelihood fit (score contributions x_i (y_i - mu_i)
    summed per cluster, G / (G - 1)), the intercept's design effect against the same sandwich with
    every pair its own cluster, and the degrees of freedom G - 1."""
    mu = 1.0 / (1.0 + np.exp(-(X @ params)))
    bread = np.linalg.inv((X * (mu * (1.0 - mu))[:, None]).T @ X)
    score = X * (y - mu)[:, None]
    codes = np.asarray(clusters.codes)
    sums = np.column_stack([np.bincount(codes, weights=score[:, j]) for j in range(X.shape[1])])
    g, n = clusters.count, len(y)
    cov = g / (g - 1) * bread @ (sums.T @ sums) @ bread
    single = n / (n - 1) * bread @ (score.T @ score) @ bread
    deff = float(cov[0, 0] / single[0, 0]) if single[0, 0] > 0 else 1.0
    return np.sqrt(np.diag(cov)), deff, g - 1


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
    """Every (judge, model) LC win rate against ``baseline`` (or each judge's detected baseline):
    the full form (``length_controlled_glm``) where a judge compared two or more models with it and
    every pair has a prompt, else the length-only form per model; returns the records and, per judge
    or model without one (or a full form that fell back), why."""
    prepared = F.prepare(df)
    # Only these columns are read: per-judge slices then leave the table's other texts alone.
    # The prompt is read too: the full form groups pairs by instruction.
    wanted = ("judge", "generator_a", "generator_b", "prompt", "response_a", "response_b", F.CHARS_A,
              F.CHARS_B, *F.DERIVED)
    prepared = prepared[[c for c in wanted if c in prepared.columns]]
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
        if len(models) >= MIN_MODELS and "prompt" in rows.columns and rows["prompt"].notna().all():
            # Several models against one baseline: the full form (instruction difficulty fitted
            # jointly), AlpacaEval 2's figure; the length-only form stays for a single model.
            try:
                joint = length_controlled_glm(prepared, judge, base)
                out += [{"judge": judge, **est.to_dict()} for est in joint.values()]
                continue
            except InsufficientData as exc:
                skipped[f"{judge}/full form"] = f"{exc}; length-only form per model instead"
        for model in models:
            try:
                est = length_controlled_win_rate(prepared, judge, model, base).to_dict()
            except InsufficientData as exc:
                skipped[f"{judge}/{model}"] = str(exc)
                continue
            out.append({"judge": judge, **est})
    return out, skipped


# --- the full form: instruction difficulty fitted jointly across the models (AlpacaEval 2) --------
DIFFICULTY_RIDGE = 0.1   # Gaussian prior on gamma_x of sd 1/sqrt(0.1) ~ 3.2 logits: finite, barely shrunk
DEFAULT_GLM_REPS = 200
MIN_MODELS = 2


def _nll(eta: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    return float(w @ (np.logaddexp(0.0, eta) - y * eta))


def _fit_difficulty(m: np.ndarray, x: np.ndarray, t: np.ndarray, y: np.ndarray, w: np.ndarray,
                    n_models: int, n_instr: int, start: np.ndarray | None) -> np.ndarray:
    """Stage 1: theta_m, phi_m and gamma_x jointly (psi = 1), ridge on gamma. Newton steps: the
    Hessian's gamma block is diagonal, so each step solves a 2M x 2M Schur complement (a fit takes
    milliseconds, which the bootstrap needs)."""
    M, X, lam = n_models, n_instr, DIFFICULTY_RIDGE
    cell = m * X + x

    def objective(p):
        eta = p[m] + p[M + m] * t + p[2 * M + x]
        return _nll(eta, y, w) + lam / 2 * float(p[2 * M:] @ p[2 * M:])

    p = np.zeros(2 * M + X) if start is None else start.copy()
    current = objective(p)
    for _ in range(100):
        g = p[2 * M:]
        mu = 1.0 / (1.0 + np.exp(-(p[m] + p[M + m] * t + g[x])))
        r, v = w * (mu - y), w * mu * (1.0 - mu)
        grad_b = np.concatenate([np.bincount(m, r, M), np.bincount(m, r * t, M)])
        grad_g = np.bincount(x, r, X) + lam * g
        A = np.zeros((2 * M, 2 * M))
        idx = np.arange(M)
        A[idx, idx] = np.bincount(m, v, M)
        A[idx, M + idx] = A[M + idx, idx] = np.bincount(m, v * t, M)
        A[M + idx, M + idx] = np.bincount(m, v * t * t, M)
        B = np.vstack([np.bincount(cell, v, M * X).reshape(M, X),
                       np.bincount(cell, v * t, M * X).reshape(M, X)])
        d = np.bincount(x, v, X) + lam
        S = A - (B / d) @ B.T
        step_b = np.linalg.lstsq(S, grad_b - B @ (grad_g / d), rcond=None)[0]
        step = np.concatenate([step_b, (grad_g - B.T @ step_b) / d])
        for _ in range(30):  # halve a step that does not lower the objective
            trial = objective(p - step)
            if trial <= current + 1e-12:
                break
            step = step / 2
        p, current = p - step, trial
        if np.max(np.abs(step)) < 1e-8:
            break
    return p


def _fit_model(A: np.ndarray, y: np.ndarray, w: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Stage 2 for one model: Newton steps on the quasi-likelihood of logit = A @ b + offset."""
    b = np.zeros(A.shape[1])
    for _ in range(100):
        mu = 1.0 / (1.0 + np.exp(-(A @ b + offset)))
        grad = A.T @ (w * (y - mu))
        hess = (A * (w * mu * (1 - mu))[:, None]).T @ A
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        b += step
        if np.max(np.abs(step)) < 1e-10:
            break
    return b


def _scaled(delta: np.ndarray, m: np.ndarray, n_models: int, w: np.ndarray) -> np.ndarray:
    """tanh(delta / sd) with each model's sd over its (resampled, ``w``-weighted) pairs: a resample
    refits the length scale too, as a fresh sample would."""
    n = np.bincount(m, w, n_models)
    mean = np.bincount(m, w * delta, n_models) / n
    var = np.bincount(m, w * (delta - mean[m]) ** 2, n_models) / np.maximum(n - 1, 1)
    sd = np.sqrt(var)
    return np.tanh(delta / np.where(sd > 0, sd, 1.0)[m])


def _glm_fit(m, x, t, y, w, n_models, n_instr, difficulty, phis, start=None):
    """(LC per model, theta/phi/psi per model, stage-1 parameters) for one (re)sample; ``w`` weights
    rows (a bootstrap's instruction counts), LC averages sigmoid(theta + psi gamma) over the
    instructions with the same weights."""
    params = None
    if difficulty is None:
        params = _fit_difficulty(m, x, t, y, w, n_models, n_instr, start)
        gamma = params[2 * n_models:]
    else:
        gamma = difficulty
    lc, coefs = np.full(n_models, np.nan), np.full((n_models, 3), np.nan)
    for k in range(n_models):
        rows = (m == k) & (w > 0)
        g = gamma[x[rows]]
        if phis is None:
            b = _fit_model(np.column_stack([np.ones(rows.sum()), t[rows], g]), y[rows], w[rows],
                           np.zeros(rows.sum()))
            theta, phi, psi = b
        else:
            phi = phis[k]
            A = np.column_stack([np.ones(rows.sum()), g])
            theta, psi = _fit_model(A, y[rows], w[rows], phi * t[rows])
        lc[k] = float(np.average(1.0 / (1.0 + np.exp(-(theta + psi * g))), weights=w[rows]))
        coefs[k] = theta, phi, psi
    return lc, coefs, params


def length_controlled_glm(df: pd.DataFrame, judge: str, baseline: str, *,
                          instruction_difficulty: pd.Series | None = None,
                          length_coefs: dict[str, float] | None = None,
                          reps: int = DEFAULT_GLM_REPS, seed: int = 0) -> dict[str, Estimate]:
    """AlpacaEval 2's length-controlled win rate of every model the judge compared with ``baseline``
    (full form, see the module docstring), keyed by model. Instructions are the ``prompt`` texts.

    ``instruction_difficulty`` (gamma per prompt text) replaces stage 1, e.g. AlpacaEval's published
    values; ``length_coefs`` (phi per model, on the model-minus-baseline scale) fixes each model's
    length slope, e.g. AlpacaEval's published coefficients (their sign flipped: AlpacaEval's length
    difference is baseline minus model), which carry its regularisation to the baseline. Either is
    said in ``method`` and ``details["form"]``. The interval is a percentile bootstrap over
    instructions refitting both stages (``reps`` resamples), so it carries gamma's uncertainty.
    Raises ``ValueError`` for a missing column or a model without a published coefficient,
    ``InsufficientData`` for fewer than 2 models (without given difficulties) or too few pairs."""
    F.require(df, ["judge", "generator_a", "generator_b", "response_a", "response_b", "prompt"],
              "length_controlled_glm")
    prepared = F.prepare(df) if F.VOTE not in df.columns else df
    rows = F.judge_rows(prepared, judge, "length_controlled_glm")
    ga, gb = rows["generator_a"].astype(object).to_numpy(), rows["generator_b"].astype(object).to_numpy()
    model_a, model_b = (gb == baseline) & (ga != baseline), (ga == baseline) & (gb != baseline)
    keep = model_a | model_b
    vote = rows[F.VOTE].to_numpy(dtype=float)
    vote = np.where(model_a, vote, 1.0 - vote)
    len_a, len_b = F.char_lengths(rows, "response_a"), F.char_lengths(rows, "response_b")
    delta = np.where(model_a, len_a - len_b, len_b - len_a)
    model = np.where(model_a, ga, gb)
    keep &= ~np.isnan(vote)
    prompt = rows["prompt"].astype(object).to_numpy()[keep]
    if (missing := int(pd.isna(prompt).sum())):
        raise ValueError(f"length_controlled_glm: {missing} pairs against {baseline} have no 'prompt' (the "
                         "instruction identifies the difficulty term)")
    vote, delta, model = vote[keep], delta[keep], model[keep].astype(str)
    models = sorted(set(model))
    if instruction_difficulty is None and len(models) < MIN_MODELS:
        raise InsufficientData(f"{len(models)} model(s) against {baseline} under {judge}: the instruction "
                               f"difficulty needs at least {MIN_MODELS} (else length_controlled_win_rate)")
    if length_coefs is not None and (missing := [k for k in models if k not in length_coefs]):
        raise ValueError(f"length_coefs: no coefficient for model(s) {missing[:5]}")
    m = np.searchsorted(models, model)
    instrs, x = np.unique(prompt, return_inverse=True)
    if instruction_difficulty is None:
        difficulty = None
    else:
        found = pd.Series(instrs).map(instruction_difficulty)
        if found.isna().any():
            first = str(instrs[found.isna().to_numpy()][0])[:60]
            raise ValueError(f"instruction_difficulty: no value for prompt {first!r}")
        difficulty = found.to_numpy(dtype=float)
    t = np.zeros(vote.size)
    for k, name in enumerate(models):
        sel = m == k
        if sel.sum() < MIN_PAIRS:
            raise InsufficientData(f"{int(sel.sum())} judged pairs of {name} vs {baseline} "
                                   f"(need {MIN_PAIRS})")
        sd = float(delta[sel].std(ddof=1))
        if sd == 0 or not np.isfinite(sd):
            raise InsufficientData(f"{name} vs {baseline}: every pair has the same length difference")
        t[sel] = np.tanh(delta[sel] / sd)
    phis = None if length_coefs is None else np.array([float(length_coefs[k]) for k in models])
    w = np.ones(vote.size)
    lc, coefs, params = _glm_fit(m, x, t, vote, w, len(models), len(instrs), difficulty, phis)
    # The bootstrap resamples the clusters (--cluster-by; by default the prompts, the instructions)
    clusters = F.clusters(rows, keep)
    unit = x if clusters.by == "prompt" else np.asarray(clusters.codes)
    n_units = int(unit.max()) + 1
    rng = np.random.default_rng(seed)
    boot = np.full((reps, len(models)), np.nan)
    for r in range(reps):
        counts = np.bincount(rng.integers(0, n_units, n_units), minlength=n_units)[unit]
        with np.errstate(all="ignore"):
            boot[r] = _glm_fit(m, x, _scaled(delta, m, len(models), counts), vote, counts.astype(float),
                               len(models), len(instrs), difficulty, phis, start=params)[0]
    lo, hi, boot_se = glm_interval(lc, boot, n_units)
    form = ("AlpacaEval 2's GLM, full form: " +
            ("instruction difficulty as given" if difficulty is not None else
             f"instruction difficulty fitted jointly over {len(models)} models (ridge {DIFFICULTY_RIDGE})") +
            (", length coefficients as given" if phis is not None else ", per-model theta, phi, psi") +
            "; no regularisation to the baseline's gamed variants; LC = mean over instructions of "
            "sigmoid(theta + psi gamma)")
    out = {}
    for k, name in enumerate(models):
        sel = m == k
        theta, phi, psi = coefs[k]
        details = {"model": name, "baseline": baseline,
                   "raw_win_rate": clustered_mean_figure(vote[sel], clusters.subset(sel), null=0.5,
                                                         bounds=(0.0, 1.0)),
                   "form": {"instruction_difficulty": "given" if difficulty is not None else "joint fit",
                            "length_coef": "given" if phis is not None else "fitted",
                            "models_in_fit": models},
                   "theta": float(theta), "phi": float(phi), "psi": float(psi),
                   "n_instructions": len(np.unique(x[sel])), "bootstrap_reps": reps,
                   "bootstrap_failed": int(np.isnan(boot[:, k]).sum()),
                   "bootstrap_se": float(boot_se[k]),
                   "mean_delta_chars": float(delta[sel].mean())}
        what = "instructions" if clusters.by == "prompt" else clustered_how(clusters)
        out[name] = Estimate(value=float(lc[k]), ci_low=float(lo[k]), ci_high=float(hi[k]), n=int(sel.sum()),
                             method=f"{form}; bootstrap over {what} ({reps} resamples, both stages "
                                    "refitted): the wider, per side, of the expanded percentile interval "
                                    f"and LC +- t({'instructions' if clusters.by == 'prompt' else 'clusters'}"
                                    " - 1) x bootstrap SE", details=details,
                             clusters=n_units, cluster_by=clusters.by,
                             warnings=cluster_note(n_units, clusters.by))
    return out


def glm_interval(lc: np.ndarray, boot: np.ndarray, n_instr: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per model (low, high) and the bootstrap SE from the point values ``lc`` (M,) and the
    resampled ones ``boot`` (B, M; NaN for a failed refit), over ``n_instr`` instructions.

    Each side is the farther of two bounds, kept inside [0, 1]: the percentile bound with
    Hesterberg's expansion (``expansion``, as every percentile bootstrap here) and the t bound
    LC -+ t_{n-1} x SE. The expanded percentile alone covered 0.89-0.95 (mean 0.927) in the coverage
    benchmark, where a t interval on the bootstrap SE did better on some cells and not others; taking
    the wider side covers whenever either does, at the cost of some width."""
    lo, hi = np.nanquantile(boot, [ALPHA / 2, 1 - ALPHA / 2], axis=0)
    factor = expansion(n_instr)
    se = np.nanstd(boot, axis=0, ddof=1)
    q = float(stats.t.ppf(1 - ALPHA / 2, max(n_instr - 1, 1)))
    low = np.minimum(lc - factor * (lc - lo), lc - q * se)
    high = np.maximum(lc + factor * (hi - lc), lc + q * se)
    return np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0), se
