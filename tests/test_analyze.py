"""``analyze``: JSON shape, skipped metrics, the CLI, the plots and the MLflow round trip."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.metrics.origin import parse_self_map
from judgebias.reporting.analysis import analyze
from judgebias.reporting.console_table import format_report
from judgebias.reporting.plots import DPI, FIGSIZE, figures_for, save_figures
from judgebias.tables.files import write_table
from judgebias.tables.pairwise import validate

MAIN_KEYS = ("self_preference_eo", "self_preference_dp", "dbg", "verbosity_bias", "agreement_human",
             "kappa_human", "position_flip_rate")


def synthetic(n_pairs: int = 120, seed: int = 0, ppl: bool = True) -> pd.DataFrame:
    """Three judges that also generate, one outside generator, humans, both orders."""
    rng = np.random.default_rng(seed)
    gens = np.array(["j1", "j2", "j3", "other"], dtype=object)
    ga = rng.integers(0, 4, n_pairs)
    gb = (ga + rng.integers(1, 4, n_pairs)) % 4
    wa, wb = rng.integers(3, 60, n_pairs), rng.integers(3, 60, n_pairs)
    q = rng.normal(size=n_pairs)
    rows = []
    for j, judge in enumerate(["j1", "j2", "j3"]):
        own = (ga == j).astype(float) - (gb == j).astype(float)
        logit = q + 0.8 * own + 0.02 * (wa - wb)
        p_ab = 1 / (1 + np.exp(-(logit + 0.3)))
        p_ba = 1 / (1 + np.exp(-(logit - 0.3)))
        for i in range(n_pairs):
            row = {"pair_id": f"p{i}", "prompt": f"q{i}", "response_a": "w " * int(wa[i]),
                   "response_b": "w " * int(wb[i]), "generator_a": gens[ga[i]], "generator_b": gens[gb[i]],
                   "judge": judge, "p_a_ab": p_ab[i], "p_a_ba": p_ba[i], "p_a": (p_ab[i] + p_ba[i]) / 2,
                   "human": ["a" if q[i] + rng.normal(0, 0.5) > 0 else "b"]}
            if ppl:
                row.update(ppl_a=float(np.exp(2 - 0.4 * (ga[i] == j) + rng.normal(0, .3))),
                           ppl_b=float(np.exp(2 - 0.4 * (gb[i] == j) + rng.normal(0, .3))))
            rows.append(row)
    return validate(pd.DataFrame(rows))[0]


@pytest.fixture(scope="module")
def result() -> dict:
    return analyze(synthetic(), reps=500)


def test_json_shape_and_every_figure_has_an_interval(result):
    json.dumps(result, allow_nan=False)  # plain JSON, no NaN
    assert result["dataset"]["rows"] == 360 and result["dataset"]["pairs"] == 120
    assert result["dataset"]["judges"] == ["j1", "j2", "j3"]
    assert "verbosity" in result["humans"]
    assert {"generator_x", "generator_y", "rater", "win_rate_x", "n"} <= set(result["win_rates"][0])
    for judge, metrics in result["judges"].items():
        for key in (*MAIN_KEYS, "agreement_gold", "kappa_gold", "position_bias", "perplexity_preference",
                    "perplexity_familiarity", "regression"):
            assert key in metrics, (judge, key, metrics["skipped"].get(key))
            est = metrics[key]
            assert {"value", "ci_low", "ci_high", "n", "exclusions"} <= set(est)
            if key != "regression":
                assert est["ci_low"] <= est["value"] <= est["ci_high"], (judge, key)
        assert metrics["self_preference_eo"]["confusion"]
        skipped = dict(metrics["skipped"])
        # One pair per prompt: no question where another model lost to the judge's opponent.
        assert skipped.pop("self_preference_eqb").startswith("no comparable pair: on no question did ")
        assert skipped == {"human_ceiling": "one human label per pair: no other human to compare with"}


def test_simulated_self_preference_is_detected(result):
    for judge in ("j1", "j2", "j3"):
        assert result["judges"][judge]["self_preference_dp"]["value"] > 0.15
        assert result["judges"][judge]["perplexity_familiarity"]["value"] < 0


def test_missing_columns_are_skipped_with_a_reason_not_zero():
    df = synthetic(60, ppl=False).drop(columns=["p_a_ab", "p_a_ba"])
    df["human"] = [[] for _ in range(len(df))]
    out = analyze(df, reps=200)
    m = out["judges"]["j1"]
    for key in ("self_preference_eo", "verbosity_bias", "agreement_human", "kappa_human",
                "perplexity_preference", "position_flip_rate", "position_bias"):
        assert key not in m and m["skipped"][key]
    assert m["skipped"]["perplexity_preference"] == "no perplexities (ppl_a, ppl_b)"
    assert "self_preference_dp" in m and "dbg" in m
    assert out["humans"]["skipped"]["verbosity"] == "no human labels"


def test_self_mapping_and_judge_generator_column():
    df = synthetic(90)
    df["generator_a"] = df["generator_a"].replace({"j1": "base-of-j1"})
    df["generator_b"] = df["generator_b"].replace({"j1": "base-of-j1"})
    without = analyze(df, reps=200)["judges"]["j1"]
    assert "self_preference_dp" not in without
    mapped = analyze(df, self_map=parse_self_map(["j1=base-of-j1"]), reps=200)
    assert mapped["judges"]["j1"]["self_preference_dp"]["n"] > 0
    assert mapped["settings"]["self_generators"]["j1"] == ["base-of-j1", "j1"]
    df["judge_generator"] = df["judge"].map({"j1": "base-of-j1"})
    from_column = analyze(df, reps=200)["judges"]["j1"]["self_preference_dp"]
    assert from_column == mapped["judges"]["j1"]["self_preference_dp"]


def test_human_only_rows_label_the_judges_rows():
    base = {"prompt": "q", "response_a": "a b", "response_b": "c", "generator_a": "j", "generator_b": "o"}
    df = validate(pd.DataFrame([
        {**base, "pair_id": "1", "judge": None, "human": ["b", "b", "a"]},  # a human-only row
        {**base, "pair_id": "1", "judge": "j", "verdict": "a"},
        {**base, "pair_id": "2", "judge": "j", "verdict": "b", "human": ["b"]},
    ]))[0]
    out = analyze(df, reps=200)
    agr = out["judges"]["j"]["agreement_human"]
    # pair 1: judge a vs majority b (from the human-only row); pair 2: b vs b -> 1/2
    assert agr["n"] == 2 and agr["value"] == pytest.approx(0.5)
    assert out["dataset"]["human_only_rows"] == 1


def test_bad_input():
    with pytest.raises(ValueError, match="judge"):
        analyze(synthetic(10).drop(columns=["judge"]))
    with pytest.raises(ValueError, match="no rows"):
        analyze(synthetic(10).iloc[:0])
    with pytest.raises(ValueError, match="not in the table"):
        analyze(synthetic(10), gold=["nobody"])
    with pytest.raises(ValueError, match="JUDGE=GENERATOR"):
        parse_self_map(["no-equals-sign"])


def test_one_self_map_from_every_shape():
    # CLI strings, a comma list, a repeated judge (union, first-seen order) and the config's mapping.
    assert parse_self_map(["j=g1,g2", "k=h", "j=g2, g3"]) == {"j": ("g1", "g2", "g3"), "k": ("h",)}
    assert parse_self_map({"j": "g1", "k": ["h", "h2"]}) == {"j": ("g1",), "k": ("h", "h2")}
    assert parse_self_map(None) == {} and parse_self_map([]) == {}
    for bad in ("=g", "j=", "j= , "):
        with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
            parse_self_map([bad])


def test_report_lists_figures_and_reasons(result):
    text = format_report(result)
    assert "self-preference (EO, Wataoka Def 4.1)" in text and "DBG score" in text
    assert text.count("== j") == 3


def test_plots_are_real_pngs_of_the_expected_size(result, tmp_path):
    figs = figures_for(result)
    assert {"confusion_j1", "verbosity_j1", "perplexity_j1", "perplexity_own_other_j1", "dbg",
            "win_rates"} <= set(figs)
    paths = save_figures({k: figs[k] for k in ("verbosity_j1", "dbg", "confusion_j1")}, tmp_path)
    import matplotlib.image as mpimg

    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = mpimg.imread(paths[0]).shape[:2]
    assert (width, height) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def test_mlflow_round_trip(result, mlflow_uri):
    import mlflow
    from mlflow.tracking import MlflowClient

    from judgebias.tracking.log_analysis import flatten_metrics, log_analysis
    from judgebias.tracking.mlflow_run import mlflow_run
    from judgebias.tracking.settings import TrackingSettings

    settings = TrackingSettings(tracking_uri=mlflow_uri, experiment_name="judgebias-test")
    with mlflow_run("round trip", settings=settings) as parent, mlflow_run("child") as child:
        counts = log_analysis(result, figures={"dbg": figures_for(result)["dbg"]})
    client = MlflowClient(tracking_uri=mlflow_uri)
    run = client.get_run(child.info.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    logged = run.data.metrics
    expected = flatten_metrics(result)
    assert counts["metrics"] == len(expected) == len(logged)
    eo = result["judges"]["j1"]["self_preference_eo"]
    assert logged["j1.self_preference_eo"] == pytest.approx(eo["value"])
    assert logged["j1.self_preference_eo.ci_low"] == pytest.approx(eo["ci_low"])
    assert logged["j1.dbg.n"] == result["judges"]["j1"]["dbg"]["n"]
    # A member of the judge's statement family: its adjusted p-value beside the raw one.
    assert logged["j1.self_preference_eo.p_adjusted"] == pytest.approx(eo["p_adjusted"])
    # Names that say what the number is, read in the MLflow UI without the docs.
    assert logged["j1.regression.pseudo_r2"] == pytest.approx(result["judges"]["j1"]["regression"]["value"])
    assert "j1.regression" not in logged
    assert logged["humans.share_preferring_longer"] == pytest.approx(result["humans"]["verbosity"]["value"])
    assert all(math.isfinite(v) for v in logged.values())
    assert run.data.params["judges"] == "j1,j2,j3"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.json", "plots"} <= artifacts
    assert mlflow.active_run() is None


def test_tracking_settings(monkeypatch, tmp_path):
    from pydantic import ValidationError

    from judgebias.tracking.log_analysis import safe_params, sanitize
    from judgebias.tracking.settings import TrackingSettings

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert TrackingSettings().resolved_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert TrackingSettings().resolved_uri() == "http://127.0.0.1:5999"
    with pytest.raises(ValidationError):
        TrackingSettings(unknown_field=1)
    assert safe_params({"OPENAI_API_KEY": "sk-x", "judge": "j"}) == {"judge": "j"}
    assert sanitize("j:1.dbg?") == "j_1.dbg_"


def test_cli_analyze_writes_json_and_logs(tmp_path, mlflow_uri, monkeypatch):
    from judgebias.cli import app

    table = tmp_path / "t.jsonl"
    write_table(synthetic(60), table)
    out = tmp_path / "m.json"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    res = CliRunner().invoke(app, ["analyze", str(table), "--out", str(out), "--self", "j1=other",
                                   "--plots-dir", str(tmp_path / "plots"), "--reps", "200"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["settings"]["self_map"] == {"j1": ["other"]}
    assert "MLflow: run" in res.output and "self-preference" in res.output
    assert (tmp_path / "plots" / "dbg.png").exists()
    bad = CliRunner().invoke(app, ["analyze", str(table), "--out", str(out), "--self", "oops", "--no-mlflow"])
    assert bad.exit_code == 2
    assert "family_preference_eo" not in data["judges"]["j1"]["skipped"]  # no family asked
    fam = CliRunner().invoke(app, ["analyze", str(table), "--out", str(out), "--family", "j1=j2",
                                   "--no-mlflow", "--no-report", "--reps", "200"])
    assert fam.exit_code == 0, fam.output
    data = json.loads(out.read_text())
    assert data["settings"]["family_generators"] == {"j1": ["j2"]}
    j1 = data["judges"]["j1"]
    assert {"family_preference_eo", "family_preference_dp", "family_dbg"} <= set(j1)
    assert "family_origin" in j1["regression"]["terms"] and "self_origin" in j1["regression"]["terms"]
    assert "no family given" in data["judges"]["j2"]["skipped"]["family_preference_eo"]
    typo = CliRunner().invoke(app, ["analyze", str(table), "--out", str(out), "--family", "j1=lama",
                                    "--no-mlflow", "--no-report"])
    assert typo.exit_code == 2 and "'lama'" in typo.output and "not in the table" in typo.output
    missing = CliRunner().invoke(app, ["analyze", str(tmp_path / "nope.jsonl"), "--out", str(out),
                                       "--no-mlflow"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
