"""The leaderboard's estimators on small hand-computed tables, the Bradley-Terry fit against a direct
statsmodels fit, and ``judgebias leaderboard`` on the bundled PandaLM table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import bradley_terry as bt
from judgebias.metrics.leaderboard import fit_leaderboard, style_covariates
from judgebias.metrics.rank_agreement import agreement, kendall_tau_b, rank_change, spearman
from judgebias.reporting.leaderboard import format_leaderboard, leaderboard

PANDALM = Path(__file__).resolve().parents[1] / "judgebias" / "data" / "pandalm_testset.parquet"
LN3, LN4 = math.log(3), math.log(4)


def _rows(judge, a, b, ys, start=0, human=None, texts=("x", "y")):
    """One comparison per outcome (its own prompt), ``y`` = P(A) (1 / 0 / 0.5 as a verdict)."""
    out = []
    for k, y in enumerate(ys):
        verdict = {1.0: "a", 0.0: "b", 0.5: "tie"}.get(y)
        out.append({"pair_id": f"{a}-{b}-{start + k}", "prompt": f"{a}-{b}-{start + k}",
                    "response_a": texts[0], "response_b": texts[1], "generator_a": a, "generator_b": b,
                    "judge": judge, "verdict": verdict, "p_a": None if verdict else y,
                    "human": list(human[k]) if human else []})
    return out


def _strengths(fit):
    return dict(zip(fit.models, fit.strengths, strict=True))


def test_raw_bradley_terry_by_hand_ties_count_half():
    # a vs b: 7 wins, 2 ties, 1 loss -> y mean (7 + 2 * 0.5) / 10 = 0.8; b vs c: 5 wins, 5 losses -> 0.5.
    # A tree of comparisons is saturated: beta_a - beta_b = logit(0.8) = ln 4, beta_b - beta_c = 0;
    # centred (sum 0): beta_b = beta_c = -ln4 / 3, beta_a = 2 ln4 / 3. The 1e-7 ridge moves them < 1e-6.
    rows = _rows("j", "a", "b", [1.0] * 7 + [0.5] * 2 + [0.0]) + _rows("j", "b", "c", [1.0] * 5 + [0.0] * 5)
    board = fit_leaderboard(pd.DataFrame(rows), reps=50)
    s = _strengths(board.fits["raw"]["j"])
    assert s["a"] == pytest.approx(2 * LN4 / 3, abs=1e-5)
    assert s["b"] == pytest.approx(-LN4 / 3, abs=1e-5) and s["c"] == pytest.approx(-LN4 / 3, abs=1e-5)
    # A judge's P(A) of 0.8 on every a-b comparison is the same fractional outcome: the same fit.
    probs = _rows("j", "a", "b", [0.8] * 10) + _rows("j", "b", "c", [1.0] * 5 + [0.0] * 5)
    s2 = _strengths(fit_leaderboard(pd.DataFrame(probs), reps=50).fits["raw"]["j"])
    assert s2["a"] == pytest.approx(s["a"], abs=1e-9)


def test_style_control_by_hand():
    # 12 comparisons m vs base; in 6 m's answer is 30 words against 10 (length feature (30-10)/40 = +0.5)
    # and m wins 5; in 6 it is 10 against 30 (-0.5) and m wins 2. Standardised, the feature is +-1, and
    # two groups make the fit saturated: d + g = logit(5/6) = ln 5, d - g = logit(2/6) = -ln 2, so
    # d = ln(5/2) / 2 (strengths +-d/2) and the length coefficient g = ln 10 / 2. Raw: 7/12 -> d = ln(7/5).
    long_, short = "w " * 30, "w " * 10
    rows = (_rows("j", "m", "base", [1.0] * 5 + [0.0], texts=(long_, short))
            + _rows("j", "m", "base", [1.0] * 2 + [0.0] * 4, start=6, texts=(short, long_)))
    board = fit_leaderboard(pd.DataFrame(rows), reps=50)
    style = board.fits["style"]["j"]
    assert style.covariates == ("length",)  # no markdown: those features do not vary and are left out
    assert _strengths(style)["m"] == pytest.approx(math.log(2.5) / 4, abs=1e-5)
    assert style.covariate("length")[0] == pytest.approx(math.log(10) / 2, abs=1e-5)
    assert _strengths(board.fits["raw"]["j"])["m"] == pytest.approx(math.log(7 / 5) / 2, abs=1e-5)


def test_style_features_are_arena_hard_densities():
    # Row 0: A 4 words with 1 list item, B 4 words with none: density 1/4 vs 0 -> (0.25 - 0) / 1.25 = 0.2.
    # Row 1: the reverse -> -0.2. Standardised: +-1; length is 4 vs 4 both times (constant: left out).
    rows = _rows("j", "m", "base", [1.0], texts=("- one two three", "one two three four"))
    rows += _rows("j", "m", "base", [0.0], start=1, texts=("one two three four", "- one two three"))
    from judgebias.metrics.frame import prepare

    z, names = style_covariates(prepare(pd.DataFrame(rows)), np.arange(2))
    assert names == ["lists"] and z[:, 0].tolist() == pytest.approx([1.0, -1.0])


def _related_table():
    # Judge r (unrelated): a-b 0.5, b-c 0.75. Judge j, a LLaMA-like relative of a (--family j=a):
    # a-b 0.8, b-c 0.75. Humans: a-b 0.5 (one a, one b label per pair), b-c 0.75 (3 of 4 pairs "b").
    hab = [["a", "b"]] * 4
    hbc = [["a"]] * 3 + [["b"]]
    rows = (_rows("r", "a", "b", [0.5] * 4, human=hab) + _rows("r", "b", "c", [1.0] * 3 + [0.0], human=hbc)
            + _rows("j", "a", "b", [1.0] * 3 + [0.2], human=hab)
            + _rows("j", "b", "c", [1.0] * 3 + [0.0], human=hbc))
    return pd.DataFrame(rows)


def test_related_variants_panel_and_human_by_hand():
    # j's a-b outcomes: 1, 1, 1, 0.2 -> mean 0.8, logit ln 4; b-c mean 0.75, logit ln 3 for everyone.
    # related_term: r's a-b rows give d_ab = 0, j's give d_ab + family = ln 4, so family = ln 4; with
    # d_bc = ln 3 the centred strengths are a = b = ln3 / 3, c = -2 ln3 / 3.
    # related (j without its relative's comparisons): b-c only, b = ln3 / 2, c = -ln3 / 2, a not ranked.
    # panel: a-b pairs are judged by r alone (j is related to a), b-c by the mean of j and r: as
    # related_term. human: a-b 0.5, b-c 0.75: the same strengths again.
    board = fit_leaderboard(_related_table(), family_map={"j": ["a"]}, reps=50)
    expected = {"a": LN3 / 3, "b": LN3 / 3, "c": -2 * LN3 / 3}
    for variant, rater in (("related_term", "j"), ("panel", "panel"), ("human", "human")):
        assert _strengths(board.fits[variant][rater]) == pytest.approx(expected, abs=1e-5), variant
    assert board.fits["related_term"]["j"].covariates == ("family",)
    assert board.fits["related_term"]["j"].covariate("family")[0] == pytest.approx(LN4, abs=1e-5)
    assert _strengths(board.fits["related"]["j"]) == pytest.approx({"b": LN3 / 2, "c": -LN3 / 2}, abs=1e-5)
    assert board.exclusions["related"]["j"] == {"related_contestant": 4}
    assert "not ranked" in board.notes["related"]["j"] and "'a'" in board.notes["related"]["j"]
    assert "related to no contestant" in board.skipped["related_term"]["r"]
    assert sorted(set(board.panels.values())) == ["j+r", "r"]
    assert sum(v == "r" for v in board.panels.values()) == 4


def test_rank_agreement_by_hand():
    # raw j: a (ln4 above b) > b (ln3 above c) > c; human: a = b > c. Kendall tau-b: pairs (a,b) 0 (human
    # tie), (a,c) +1, (b,c) +1 -> 2 / sqrt(3 * 2) = 0.8165. Spearman: raw ranks (3, 2, 1), human (2.5,
    # 2.5, 1): centred (1, 0, -1) and (0.5, 0.5, -1) -> 1.5 / sqrt(2 * 1.5) = 0.8660.
    board = fit_leaderboard(_related_table(), family_map={"j": ["a"]}, reps=50)
    a = agreement(board.fits["raw"]["j"], board.fits["human"]["human"])
    assert a["kendall_tau"].value == pytest.approx(2 / math.sqrt(6))
    assert a["spearman"].value == pytest.approx(1.5 / math.sqrt(3))
    assert a["kendall_tau"].ci_low <= a["kendall_tau"].ci_high and a["kendall_tau"].n == 3
    # related_term ties a and b (rank 1 both): b moves 2 -> 1, no pair reverses its order.
    moved = rank_change(board.fits["raw"]["j"], board.fits["related_term"]["j"])
    assert moved["largest_rank_change"] == 1
    assert moved["moved_most"] == [{"model": "b", "rank_before": 2, "rank_after": 1}]
    assert moved["swapped"] == [] and 0.0 <= moved["p_top_differs"] <= 1.0


def test_rank_correlations_match_scipy():
    from scipy.stats import kendalltau, spearmanr

    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(20, 6)), rng.normal(size=(20, 6))
    y[:, 2] = y[:, 3]  # a tie in every row of y
    for k in range(20):
        assert kendall_tau_b(x[k], y[k]) == pytest.approx(kendalltau(x[k], y[k]).statistic)
        assert spearman(x[k], y[k]) == pytest.approx(spearmanr(x[k], y[k]).statistic)


def test_p_top_differs_counts_resamples():
    # Two fits whose resamples put a different model on top in 1 of 4 resamples.
    models = ("a", "b")
    point = np.array([1.0, -1.0])
    before = bt.BTFit(models, (), point, np.array([[1, -1], [1, -1], [1, -1], [1, -1.0]]), 4, "")
    after = bt.BTFit(models, (), point, np.array([[1, -1], [-1, 1], [1, -1], [1, -1.0]]), 4, "")
    assert rank_change(before, after)["p_top_differs"] == 0.25


def test_rank_intervals_are_the_quantiles_of_the_bootstrap_ranks_by_hand():
    # 40 resamples of a > b > c: 38 keep that order, one swaps a and b (ranks 2, 1, 3), one swaps b
    # and c (ranks 1, 3, 2). Each model's ranks over the 40, with the inverted-CDF quantiles at 2.5%
    # (F(x) >= 1/40) and 97.5% (F(x) >= 39/40):
    #   a: 39 x 1, 1 x 2            -> F(1) = 39/40        -> [1, 1]
    #   b: 1 x 1, 38 x 2, 1 x 3     -> F(1) = 1/40, F(2) = 39/40 -> [1, 2]
    #   c: 1 x 2, 39 x 3            -> F(2) = 1/40         -> [2, 3]
    boot = np.array([[1.0, 0.0, -1.0]] * 38 + [[0.0, 1.0, -1.0], [1.0, -1.0, 0.0]])
    fit = bt.BTFit(("a", "b", "c"), (), np.array([1.0, 0.0, -1.0]), boot, 40, "")
    got = {r["model"]: (r["rank"], r["rank_ci_low"], r["rank_ci_high"]) for r in bt.ranking_records(fit)}
    assert got == {"a": (1, 1, 1), "b": (2, 1, 2), "c": (3, 2, 3)}


def test_bradley_terry_matches_a_direct_statsmodels_fit():
    import statsmodels.api as sm

    from judgebias.metrics.frame import prepare
    from judgebias.metrics.leaderboard import judge_comparisons

    prep = prepare(pd.read_parquet(PANDALM)).reset_index(drop=True)
    c = judge_comparisons(prep, "pandalm-7b")
    models = sorted(set(c.model_a) | set(c.model_b))
    x = bt.design(models, c.model_a, c.model_b)
    z, _ = style_covariates(prep, c.rows)
    full = np.hstack([x, z])
    ours = bt.fit_batch(full, c.y, np.ones((1, c.y.size)), len(models), ridge=1e-9)[0]
    # statsmodels: the last model is the reference (its column dropped), then centred like ours.
    glm = sm.GLM(c.y, np.hstack([x[:, :-1], z]), family=sm.families.Binomial()).fit()
    ref = np.append(glm.params[: len(models) - 1], 0.0)
    assert ours[: len(models)] == pytest.approx(ref - ref.mean(), abs=1e-6)
    assert ours[len(models):] == pytest.approx(glm.params[len(models) - 1:], abs=1e-6)
    logit = sm.Logit(c.y, x[:, :-1]).fit(disp=0)
    raw = bt.fit_batch(x, c.y, np.ones((1, c.y.size)), len(models), ridge=1e-9)[0]
    ref = np.append(logit.params, 0.0)
    assert raw == pytest.approx(ref - ref.mean(), abs=1e-6)


def test_resamples_fitted_in_chunks_give_the_same_fits(monkeypatch):
    rng = np.random.default_rng(3)
    a, b = rng.choice(["a", "b", "c"], size=40), rng.choice(["a", "b", "c"], size=40)
    keep = a != b
    x = bt.design(["a", "b", "c"], a[keep], b[keep])
    y = rng.random(keep.sum())
    w = rng.poisson(1.0, size=(7, keep.sum())).astype(float)
    whole = bt.fit_batch(x, y, w, 3)
    monkeypatch.setattr(bt, "CHUNK_CELLS", 2 * keep.sum())  # two resamples per chunk
    assert bt.fit_batch(x, y, w, 3) == pytest.approx(whole, abs=1e-12)


def test_bootstrap_resamples_prompts_with_one_seed():
    codes, counts = bt.cluster_draws(np.array(["p", "q", "p", "r"]), reps=30, seed=7)
    assert codes[0] == codes[2] and counts.shape == (30, 3)
    assert np.all(counts.sum(axis=1) == 3)  # each resample draws as many prompts as there are
    _, again = bt.cluster_draws(np.array(["p", "q", "p", "r"]), reps=30, seed=7)
    _, other = bt.cluster_draws(np.array(["p", "q", "p", "r"]), reps=30, seed=8)
    assert np.array_equal(counts, again) and not np.array_equal(counts, other)


def test_bad_input_is_named():
    table = pd.DataFrame(_rows("j", "a", "b", [1.0, 0.0]))
    with pytest.raises(ValueError, match="generator_a"):
        fit_leaderboard(table.drop(columns=["generator_a"]), reps=50)
    apart = pd.DataFrame(_rows("j", "a", "b", [1.0, 0.0]) + _rows("j", "c", "d", [1.0, 0.0]))
    board = fit_leaderboard(apart, reps=50)
    assert "do not link every model" in board.skipped["raw"]["j"]
    with pytest.raises(ValueError, match="judge"):
        fit_leaderboard(table, judges=["nobody"], reps=50)


def test_leaderboard_json_contract_and_printed_table():
    result = leaderboard(_related_table(), family_map={"j": ["a"]}, reps=50)
    assert set(result["rankings"]) == {"raw", "style", "related", "related_term", "panel", "human_anchored",
                                       "human"}
    row = result["rankings"]["raw"]["j"][0]
    assert set(row) == {"model", "strength", "ci_low", "ci_high", "rank", "rank_ci_low", "rank_ci_high"}
    assert result["human"] == result["rankings"]["human"]["human"]
    tau = result["agreement_with_human"]["raw"]["j"]["kendall_tau"]
    assert {"value", "ci_low", "ci_high"} <= set(tau)
    assert "agreement_with_human" not in result["not_computed"]
    json.dumps(result, allow_nan=False)
    text = format_leaderboard(result)
    assert "== j ==" in text and "related_term" in text and "not ranked" in text
    # a table this small carries the coverage benchmark's warning, in the JSON and the printed table
    raw = result["details"]["raw"]["j"]
    assert raw["warning"] == bt.small_sample_warning(raw["n"], len(result["rankings"]["raw"]["j"]))
    assert "raw: warning:" in text


def test_small_sample_warning_threshold_in_comparisons_per_model():
    # 6 models: each comparison involves 2, so n comparisons give 2n / 6 per model; the warning
    # stops at the first n with 2n / 6 >= RELIABLE_PER_MODEL, which it names.
    need = math.ceil(bt.RELIABLE_PER_MODEL * 6 / 2)
    assert bt.small_sample_warning(need, 6) is None
    warning = bt.small_sample_warning(need - 1, 6)
    assert warning is not None and f"here {need} comparisons" in warning
    assert warning.startswith(f"{need - 1} comparisons")
    assert bt.small_sample_warning(need - 1, 2) is None   # two models: the same n is plenty


def _cli(*args: str, mlflow_uri: str | None = None) -> subprocess.CompletedProcess:
    """The command with ``--no-mlflow``, or logging to ``mlflow_uri``."""
    env = {**os.environ, **({"MLFLOW_TRACKING_URI": mlflow_uri} if mlflow_uri else {})}
    return subprocess.run([sys.executable, "-m", "judgebias", "leaderboard", *args,
                           *([] if mlflow_uri else ["--no-mlflow"])], capture_output=True, text=True,
                          timeout=600, env=env)


def test_cli_on_pandalm(tmp_path):
    out, plots = tmp_path / "lb.json", tmp_path / "plots"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = _cli(str(PANDALM), "--family", "pandalm-7b=llama-7b", "--reps", "200", "--out", str(out),
               "--plots-dir", str(plots), "--timing", "gpt-3.5-turbo=40:1.5", mlflow_uri=uri)
    assert run.returncode == 0, run.stderr
    result = json.loads(out.read_text())
    assert result["models"] == sorted(["bloom-7b", "cerebras-gpt-6.7B", "llama-7b", "opt-7b", "pythia-6.9b"])
    for variant in ("raw", "style", "related"):
        assert set(result["rankings"][variant]) == {"gpt-3.5-turbo", "pandalm-7b"}
    assert set(result["rankings"]["related_term"]) == {"pandalm-7b"}
    for per in result["rankings"].values():
        for rows in per.values():
            for r in rows:
                assert r["ci_low"] <= r["strength"] <= r["ci_high"]
                assert r["rank_ci_low"] <= r["rank"] <= r["rank_ci_high"]
    assert "llama-7b" not in {r["model"] for r in result["rankings"]["related"]["pandalm-7b"]}
    # The question of the issue: the family term takes PandaLM-7B's view of LLaMA-7B (its base model)
    # closer to the humans' than its raw view.
    def strength(variant, rater):
        return next(r["strength"] for r in result["rankings"][variant][rater] if r["model"] == "llama-7b")
    human = strength("human", "human")
    assert abs(strength("related_term", "pandalm-7b") - human) < abs(strength("raw", "pandalm-7b") - human)
    assert set(result["agreement_with_human"]) == {"raw", "style", "related", "related_term", "panel",
                                                   "human_anchored"}
    assert sum(result["panels"]["comparisons_per_panel"].values()) == len(result["panels"]["per_pair"])
    assert "== pandalm-7b ==" in run.stdout and "Agreement with the human ranking" in run.stdout
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert pngs == ["leaderboard_forest.png", "leaderboard_ranks_gpt-3.5-turbo.png",
                    "leaderboard_ranks_pandalm-7b.png"]
    from PIL import Image

    assert Image.open(plots / "leaderboard_forest.png").info["dpi"][0] >= 149
    # The recommendation: PandaLM-7B is LLaMA-7B's fine-tune, so R1 keeps it from ranking alone; the
    # figures each rule read are in the JSON and printed.
    r = result["recommendation"]
    assert r["raters"]["pandalm-7b"]["checks"][0] == {"rule": "R1", "outcome": "excluded",
                                                      "figure": "related to family: llama-7b"}
    assert r["recommended"] in ("gpt-3.5-turbo", "panel") and r["recommended"] == r["order"][0]
    assert r["raters"]["gpt-3.5-turbo"]["profile"]["timing"]["usd_per_1000"] == 1.5
    assert r["raters"]["gpt-3.5-turbo"]["profile"]["kappa_human"]["n"] > 900
    assert 0 < r["planner"]["labels_needed"] <= r["planner"]["population"]
    assert f"use: {r['recommended']}" in run.stdout
    assert "R1 excluded: related to family: llama-7b" in run.stdout
    # Logged to MLflow like analyze: the JSON, the plots and the strengths as metrics.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    (logged,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert logged.data.tags["judgebias.command"] == "leaderboard"
    assert "leaderboard.raw.pandalm-7b.llama-7b.strength" in logged.data.metrics
    assert logged.data.params["leaderboard.recommended"] == r["recommended"]
    assert logged.data.metrics["leaderboard.planner.labels_needed"] == r["planner"]["labels_needed"]
    assert logged.data.metrics["leaderboard.timing.gpt-3.5-turbo.usd_per_1000"] == 1.5
    names = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert "leaderboard.json" in names and "plots" in names


def test_cli_names_from_data_are_inert(tmp_path):
    hostile = "\x1b]0;owned\x07" + "m" * 300
    judge = "j\x1b[2J"
    rows = _rows(judge, hostile, "b", [1.0, 0.0, 1.0]) + _rows(judge, "b", "c", [1.0, 0.0, 0.0], start=3)
    path = tmp_path / "t.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    run = _cli(str(path), "--reps", "30", "--plots-dir", str(tmp_path / "p"))
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout and "\x07" not in run.stdout and "\\x1b" in run.stdout
    assert all(p.parent == tmp_path / "p" for p in (tmp_path / "p").iterdir())


def test_cli_rejects_a_family_the_table_lacks():
    run = _cli(str(PANDALM), "--family", "pandalm-7b=llama-70b", "--reps", "30")
    assert run.returncode == 2 and "llama-70b" in run.stderr and "Traceback" not in run.stderr


def test_anchored_weights_and_estimating_equation_by_hand():
    from judgebias.metrics.anchored import anchored_weights

    # Labelled: yhat 0.8, y 1, pi 0.5, lam 0.5 -> weight 0.5 + 0.5 / 0.5 = 1.5, pseudo-outcome
    # (0.5 * 0.8 + (1 - 0.5 * 0.8) / 0.5) / 1.5 = 1.6 / 1.5. Unlabelled: weight lam, outcome yhat.
    w, t = anchored_weights(np.array([0.8, 0.3]), np.array([1.0, np.nan]), np.array([True, False]),
                            np.array([0.5, 0.5]), 0.5)
    assert w.tolist() == pytest.approx([1.5, 0.5]) and t.tolist() == pytest.approx([1.6 / 1.5, 0.3])
    # a vs b four times, judge yhat = 1, 1, 1, 0; humans label the first two: y = 0, 1; pi = 1/2; lam = 1.
    # Score equation for two models: N mu = sum yhat + sum_s (y - yhat) / pi = 3 + (-1 + 0) * 2 = 1, so
    # mu = 1/4: beta_a - beta_b = logit(1/4) = -ln 3 and the centred a = -ln3 / 2 (the judge alone: +ln3 / 2).
    yhat, y = np.array([1.0, 1, 1, 0]), np.array([0.0, 1, np.nan, np.nan])
    lab = np.array([True, True, False, False])
    w, t = anchored_weights(yhat, y, lab, np.full(4, 0.5), 1.0)
    x = bt.design(["a", "b"], np.array(["a"] * 4), np.array(["b"] * 4))
    beta = bt.fit_batch(x, t, w[None, :], 2, bounded=False)[0]
    assert beta[0] == pytest.approx(-LN3 / 2, abs=1e-5)


def test_tuned_lambda_trusts_a_perfect_judge_and_needs_a_sample():
    from judgebias.metrics.anchored import tuned_lambda

    # A judge that matches the humans on every labelled comparison: s_i = shat_i, so lam = 1. With
    # every comparison certain to be labelled (pi = 1) there is nothing to predict: lam = 0.
    x = bt.design(["a", "b", "c"], np.array(["a", "b", "a", "b", "a", "c"]),
                  np.array(["b", "c", "c", "a", "b", "b"]))
    yhat = np.array([1.0, 0.0, 1.0, 1.0, 0.5, 1.0])
    lab = np.array([True, True, True, True, False, False])
    assert tuned_lambda(x, yhat, yhat, lab, np.full(6, 4 / 6), 3) == pytest.approx(1.0)
    assert tuned_lambda(x, yhat, yhat, np.ones(6, bool), np.ones(6), 3) == 0.0


def test_human_anchored_with_every_label_is_the_humans_ranking():
    # _related_table labels every pair: pi = 1, lam = 0, weight 1 and outcome y on every comparison, so
    # the anchored strengths of r and j are the human strengths a = b = ln3 / 3, c = -2 ln3 / 3.
    board = fit_leaderboard(_related_table(), family_map={"j": ["a"]}, reps=50)
    expected = {"a": LN3 / 3, "b": LN3 / 3, "c": -2 * LN3 / 3}
    for judge in ("r", "j"):
        assert _strengths(board.fits["human_anchored"][judge]) == pytest.approx(expected, abs=1e-5)
        assert "every comparison labelled" in board.notes["human_anchored"][judge]
    sampled = fit_leaderboard(_related_table(), reps=50, label_sample=3)
    assert "3 of 8 comparisons human-labelled" in sampled.notes["human_anchored"]["j"]


def test_mlflow_logging_round_trip(tmp_path):
    from mlflow.tracking import MlflowClient

    from judgebias.reporting.plots_leaderboard import leaderboard_figures
    from judgebias.tracking.log_leaderboard import flatten_leaderboard, log_leaderboard
    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.settings import TrackingSettings

    result = leaderboard(_related_table(), family_map={"j": ["a"]}, reps=50)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with mlflow_run("leaderboard", settings=TrackingSettings(tracking_uri=uri, experiment_name="lb")) as run:
        counts = log_leaderboard(result, figures={"leaderboard_forest": leaderboard_figures(result)[
            "leaderboard_forest"]})
    logged = MlflowClient(tracking_uri=uri).get_run(run.info.run_id).data
    assert counts["metrics"] == len(flatten_leaderboard(result)) == len(logged.metrics)
    family = result["details"]["related_term"]["j"]["coefficients"]["family"]
    assert logged.metrics["leaderboard.related_term.j.term.family"] == pytest.approx(family["value"])
    tau = result["agreement_with_human"]["raw"]["j"]["kendall_tau"]
    assert logged.metrics["leaderboard.agreement.raw.j.kendall_tau"] == pytest.approx(tau["value"])
    assert logged.params["leaderboard.family_map"] == "j=a"
    assert {"leaderboard.json", "plots"} <= {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(
        run.info.run_id)}


@pytest.mark.parametrize("rows, says", [
    # One model only: every comparison pits m1 against itself, so none is usable.
    (_rows("j", "m1", "m1", [1.0, 0.0, 1.0]), "fewer than two models"),
    # Two groups no comparison links: m1-m2 and m3-m4.
    (_rows("j", "m1", "m2", [1.0, 0.0, 1.0]) + _rows("j", "m3", "m4", [1.0, 0.0, 0.0], start=3),
     "separate groups: [['m1', 'm2'], ['m3', 'm4']]"),
])
def test_cli_refuses_a_table_no_ranking_can_come_from_in_one_line(tmp_path, rows, says):
    path = tmp_path / "t.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    run = _cli(str(path), "--reps", "30", "--out", str(tmp_path / "lb.json"))
    assert run.returncode == 2, run.stdout[-1000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "RuntimeWarning" not in run.stderr, run.stderr[-2000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no model ranking could be fitted" in errors[0] and says in errors[0]
    assert not (tmp_path / "lb.json").exists()
