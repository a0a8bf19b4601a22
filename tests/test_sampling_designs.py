"""Probability designs of the annotation loop and the human-label estimands built on them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import DATA

from judgebias.annotation.replay import ReplaySettings, replay, summarize
from judgebias.annotation.sampling import (
    Frame,
    combined_design,
    draw_batch,
    neyman_allocation,
    poisson_probabilities,
    population_frame,
)
from judgebias.importers.pandalm import import_pandalm
from judgebias.metrics import agreement, self_preference_eo, verbosity_bias
from judgebias.metrics.human import ESTIMANDS, estimate, human_figures, pair_features, variables
from judgebias.metrics.survey import STRATIFIED, SampleDesign

SELF = {"pandalm-7b": ["llama-7b"]}


@pytest.fixture(scope="module")
def pandalm():
    table, _ = import_pandalm(DATA / "pandalm")
    return table


def test_neyman_allocation_by_hand():
    # N_h S_h = 100*0.5, 100*0.1, 10*0.5 = 50, 10, 5; n = 20: floors of 2 each leave 14 to share
    # 50:10:5 -> 10.77, 2.15, 1.08 -> 10, 2, 1 and the last unit to the largest remainder (0.77).
    alloc = neyman_allocation(pd.Series({"a": 100, "b": 100, "c": 10}),
                              pd.Series({"a": 0.5, "b": 0.1, "c": 0.5}), 20)
    assert alloc.to_dict() == {"a": 13, "b": 4, "c": 3}
    with pytest.raises(ValueError, match="below 2 pairs"):
        neyman_allocation(pd.Series({"a": 5, "b": 5}), pd.Series({"a": 1.0, "b": 1.0}), 3)


def test_poisson_probabilities_follow_the_score_above_the_floor():
    pi = poisson_probabilities(np.array([0.0, 1.0, 2.0, 4.0, 8.0]), 2.0, 0.1)
    assert pi.sum() == pytest.approx(2.0)
    assert pi[0] == pytest.approx(0.1)  # a zero score still gets the floor: no pair is left out
    # c * 8 would pass 1, so that pair is certain; the rest share 2 - 1 - 0.1 = 0.9 in proportion to
    # the score: c = 0.9 / (1 + 2 + 4), so 4/2 = 2/1 = 2.
    assert pi[4] == 1.0 and pi[3] == pytest.approx(4 * 0.9 / 7)
    assert pi[3] / pi[2] == pytest.approx(2.0) and pi[2] / pi[1] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="lower --min-prob"):
        poisson_probabilities(np.ones(10), 2.0, 0.5)


def _frame(n=40):
    pairs = pd.DataFrame({"pair_key": [f"k{i}" for i in range(n)], "score": np.linspace(0, 1, n),
                          "stratum": ["s1"] * (n // 2) + ["s2"] * (n - n // 2),
                          "spread": [0.5] * n}, index=[f"p{i}" for i in range(n)])
    return Frame(pairs=pairs, population="all")


def test_batches_draw_from_what_is_left_and_combine_into_one_simple_random_sample():
    frame = _frame()
    first = draw_batch(frame, "uniform", 10, seed=1)
    assert first["selected"].sum() == 10 and np.allclose(first["pi"], 10 / 40)
    second = draw_batch(frame, "uniform", 6, exclude=first.index[first["selected"]], seed=2)
    # Every pair is recorded with the probability it has (or, if drawn before, would have had): 6/30.
    assert len(second) == 40 and np.allclose(second["pi"], 6 / 30)
    assert not set(second.index[second["selected"]]) & set(first.index[first["selected"]])
    draws = pd.concat([first.assign(batch=1, design="uniform"), second.assign(batch=2, design="uniform")])
    draws = draws.rename_axis("pair_id").reset_index()
    drawn = draws.loc[draws["selected"], "pair_id"]
    design, order, info = combined_design(draws, drawn)
    # Two simple random samples of the remaining units add up to one of 16 out of 40.
    assert design.variance == STRATIFIED and np.allclose(design.pi, 16 / 40)
    assert design.n == 16 and info["batches"] == 2 and len(order) == 40
    # Nonresponse: 2 of the first batch's 10 never labelled -> that batch counts 8 of 10, pi = 14/40.
    design2, _, info2 = combined_design(draws, drawn.iloc[2:])
    assert design2.n == 14 and np.allclose(design2.pi, 14 / 40) and info2["labelled"] == 14


def test_poisson_batches_combine_by_the_product_of_misses():
    frame = _frame(20)
    first = draw_batch(frame, "poisson", 5, seed=0)
    second = draw_batch(frame, "poisson", 5, exclude=first.index[first["selected"]], seed=1)
    draws = pd.concat([first.assign(batch=1, design="poisson"), second.assign(batch=2, design="poisson")])
    draws = draws.rename_axis("pair_id").reset_index()
    design, order, info = combined_design(draws, draws.loc[draws["selected"], "pair_id"])
    # Poisson batches give every pair a probability in every batch (a re-draw is free), so a pair's
    # inclusion probability is exactly 1 - prod(1 - pi_b), drawn in batch 1 or not.
    for i, unit in enumerate(order):
        q = draws[draws["pair_id"] == unit]["pi"].to_numpy()
        assert len(q) == 2 and design.pi[i] == pytest.approx(1 - np.prod(1 - q))
    assert info["variance"] == "Poisson"


def test_census_estimands_equal_the_plain_metrics(pandalm):
    # With every pair labelled (pi = 1), each design estimate is the metric over all labelled pairs.
    for judge in ("pandalm-7b", "gpt-3.5-turbo"):
        f = pair_features(pandalm, judge, self_map=SELF)
        census = SampleDesign(np.ones(len(f)), np.ones(len(f), bool))
        plain = {"agreement_human": agreement(pandalm, judge, "human").value,
                 "verbosity": verbosity_bias(pandalm, judge).value}
        if judge == "pandalm-7b":
            plain["eo"] = self_preference_eo(pandalm, judge, SELF).value
        for name, value in plain.items():
            y, yhat = variables(f, name)
            assert estimate(y, None, name, census).value == pytest.approx(value), (judge, name)
            assert estimate(y, yhat, name, census).value == pytest.approx(value), (judge, name)


def test_rates_read_their_own_domain_and_dp_is_a_rate_on_the_signed_scale():
    # Six pairs, the judge's own response always A (code 0). Humans prefer own (A) on 2, judge picks
    # own on 1 of them; humans prefer other (B) on 4, judge picks other on 3.
    # TPR = 1/2, TNR = 3/4, EO = -1/4; humans' DP = 2 * (2/6) - 1 = -1/3.
    feats = pd.DataFrame({"own": 0, "choice": [0, 1, 1, 1, 1, 0], "vote": np.nan,
                          "human": [0, 0, 1, 1, 1, 1], "human_vote": np.nan, "gold": 0.5,
                          "words_a": 10, "words_b": 10}, index=[f"p{i}" for i in range(6)])
    # All six labelled with pi = 1/2 (a Poisson draw that took them all): the Hájek rates are the
    # plain ones, with a non-zero design variance.
    census = SampleDesign(np.full(6, 0.5), np.ones(6, bool))
    tnr = estimate(*variables(feats, "tnr")[:1], None, "tnr", census)
    assert tnr.value == pytest.approx(0.75) and tnr.details["domain"] == 4  # TNR's own domain, not TPR's
    eo = estimate(*variables(feats, "eo")[:1], None, "eo", census)
    assert eo.value == pytest.approx(-0.25)
    assert [r["labels_in_domain"] for r in eo.details["rates"]] == [2, 4]
    dp = estimate(*variables(feats, "dp_human")[:1], None, "dp_human", census)
    assert dp.value == pytest.approx(-1 / 3) and -1 <= dp.ci_low <= dp.value <= dp.ci_high <= 1
    # A plain rate such as agreement has no null to test; DP and EO test 0.
    assert dp.p_value is not None and eo.p_value is not None
    agree = estimate(*variables(feats, "agreement_human")[:1], None, "agreement_human", census)
    assert agree.p_value is None


def test_human_figures_report_estimator_population_and_labels(pandalm):
    frame = population_frame(pandalm, "all", judges=["pandalm-7b"], self_map=SELF)
    draws = draw_batch(frame, "uniform", 18, seed=4).assign(batch=1, design="uniform")
    draws = draws.rename_axis("pair_id").reset_index()
    design, order, _ = combined_design(draws, draws.loc[draws["selected"], "pair_id"], population="all")
    figs = human_figures(pair_features(pandalm, "pandalm-7b", self_map=SELF), design, order)
    agree = figs["agreement_human"]
    assert agree["labels"] == 18 and agree["population_size"] == len(frame.pairs)
    assert "Hájek" in agree["design_based"]["method"] and "PPI++" in agree["ppi"]["method"]
    assert agree["design_based"]["effective_sample_size"] > 0
    lo, hi = agree["ppi"]["ci_low"], agree["ppi"]["ci_high"]
    assert 0 <= lo <= agree["ppi"]["value"] <= hi <= 1
    assert set(figs) >= {"eo", "agreement_human", "verbosity", "dbg_human"}
    assert ESTIMANDS["eo"].kind == "rate_difference"
    # A uniform batch is one stratum: no warning. Split into strata, EO carries the measured shortfall
    # of stratified intervals for differences of domain rates; agreement, which met the target, not.
    assert not figs["eo"]["design_based"].get("warnings")
    split = SampleDesign(design.pi, design.sampled, STRATIFIED,
                         np.where(np.arange(design.size) % 2 == 0, "h1", "h2"), "all")
    figs2 = human_figures(pair_features(pandalm, "pandalm-7b", self_map=SELF), split, order)
    assert any("stratified design" in w for w in figs2["eo"]["design_based"].get("warnings", []))
    assert not figs2["agreement_human"]["design_based"].get("warnings")


def test_replay_runs_every_method_and_scores_it_against_the_census(pandalm):
    settings = ReplaySettings(judges=["pandalm-7b"], budgets=(10,), reps=3, batch=5, design="uniform",
                              figures=("agreement_human",), self_map=SELF)
    results = replay(pandalm, settings)
    assert set(results["method"]) == {"ranking", "uniform", "design", "ppi"}
    truth = agreement(pandalm, "pandalm-7b", "human").value
    assert np.allclose(results["truth"], truth)
    table = summarize(results)
    assert set(table.columns) >= {"bias", "rmse", "coverage", "width", "defined"}
    assert (table.loc[table["method"] == "ranking", "reps"] == 1).all()  # deterministic ranking


@pytest.mark.parametrize("budgets", ["-5", "0", "abc", "25,,50"])
def test_replay_refuses_a_bad_budget_with_a_clear_message(budgets, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    res = CliRunner().invoke(app, ["annotate", "replay", str(tmp_path / "never-read.parquet"), "-j", "J",
                                   "--budgets", budgets, "--out", str(tmp_path / "out")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "is not a positive whole number of labels" in res.output


def test_labels_saved_interpolates_the_hajek_labels_for_the_ppi_width():
    from judgebias.annotation.replay import labels_saved, saved_markdown

    # Hájek widths 0.4 at 25 and 0.2 at 100 labels (w ~ 1/sqrt(n)); PPI++ width 0.2828 at 25 lies
    # between: log-log interpolation gives n = 25 * (0.4 / 0.2828)^2 = 50, so 25 labels saved (+100%).
    # PPI++ width 0.15 at 100 is narrower than any Hájek width replayed: not extrapolated.
    rows = [("design", 25, 25, 0.4), ("design", 100, 100, 0.2), ("ppi", 25, 25, 0.4 / 2**0.5),
            ("ppi", 100, 100, 0.15)]
    summary = pd.DataFrame([{"judge": "J", "figure": "eo", "method": m, "budget": b, "labels": n, "width": w}
                            for m, b, n, w in rows])
    saved = labels_saved(summary).set_index("budget")
    assert saved.loc[25, "hajek_labels_for_that_width"] == pytest.approx(50.0)
    assert saved.loc[25, "labels_saved"] == pytest.approx(25.0)
    assert np.isnan(saved.loc[100, "labels_saved"])
    assert "beyond the replayed budgets" in saved_markdown(labels_saved(summary))


def test_plan_uniform_matches_the_closed_form_and_the_cli_prints_every_design(pandalm, tmp_path):
    from typer.testing import CliRunner

    from judgebias.annotation.planning import labels_needed, pilot
    from judgebias.cli import app
    from judgebias.metrics.survey import required_labels

    frame = population_frame(pandalm, "all", judges=["pandalm-7b"], self_map=SELF)
    p = pilot(frame, pandalm, "pandalm-7b", "agreement_human", self_map=SELF)
    # Uniform: n0 = (t S / h)^2, n = n0 / (1 + n0 / N), with S^2 the pilot variance of z and t on
    # the df of the pairs that carry z (share of the population) among n.
    s2 = float(np.var(p["z"], ddof=1))
    share = float(np.mean(p["z"] != 0))
    need = required_labels(s2, len(frame.pairs), 0.2, share)
    assert labels_needed(frame, p["z"], "uniform", 0.2) == need
    assert need >= required_labels(s2, len(frame.pairs), 0.2, 1.0)
    res = CliRunner().invoke(app, ["annotate", "plan", str(DATA / "pandalm" / "testset-v1.json"),
                                   "--judge", "pandalm-7b"])
    assert res.exit_code != 0  # not a judgment table: a clear error, no traceback
    assert "Traceback" not in res.output
    from judgebias.tables.files import write_table

    path = write_table(pandalm, tmp_path / "p.jsonl")
    res = CliRunner().invoke(app, ["annotate", "plan", str(path), "--judge", "pandalm-7b", "--self",
                                   "pandalm-7b=llama-7b", "--figure", "agreement_human",
                                   "--half-width", "0.2", "--budget", "10"])
    assert res.exit_code == 0, res.output
    assert f"uniform    Hájek   ±0.2 needs {need} labels" in res.output
    # The table came with its labels, so they are the pilot and PPI++ is planned too.
    assert "poisson" in res.output and "stratified" in res.output and "PPI++" in res.output


def test_sync_stops_when_the_target_half_width_is_met():
    from judgebias.annotation.sync import target_reached

    figs = {"J": {"estimates": {"eo": {"ppi": {"value": 0.1, "ci_low": 0.06, "ci_high": 0.14}}}},
            "K": {"estimates": {"agreement_human": {}}}}  # K has no EO: it does not hold the loop open
    assert "target met: eo 95% half-width <= 0.05 (J ±0.040)" in target_reached(figs, "eo", 0.05)
    assert target_reached(figs, "eo", 0.03) is None
    not_yet = {"J": {"estimates": {"eo": {"ppi": {"value": None, "insufficient": "no label"}}}}}
    assert target_reached(not_yet, "eo", 0.5) is None


def test_replay_summary_is_logged_to_mlflow(pandalm, tmp_path, monkeypatch):
    import mlflow

    from judgebias.tracking.replay_run import log_replay

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    settings = ReplaySettings(judges=["pandalm-7b"], budgets=(10,), reps=2, batch=5,
                              figures=("agreement_human",), self_map=SELF)
    summary = summarize(replay(pandalm, settings))
    (tmp_path / "out").mkdir()
    summary.to_csv(tmp_path / "out" / "summary.csv", index=False)
    run_id = log_replay(summary, tmp_path / "out", {"reps": 2})
    run = mlflow.tracking.MlflowClient(uri).get_run(run_id)
    ppi = summary[(summary["method"] == "ppi")].iloc[0]
    assert run.data.metrics["pandalm-7b.agreement_human.ppi.n10.width"] == pytest.approx(ppi["width"])
    assert run.data.params["reps"] == "2"
