"""Judgments as MLflow traces and back (``judgebias.tracking.judgment_traces``, ``judgebias import mlflow``),
against a real MLflow server on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.tables.files import read_table, write_table
from judgebias.tables.pairwise import validate
from judgebias.tracking.judgment_traces import KEY_TAG, hash_annotator, judgment_records

SECRET = "sk-do-not-log-0123456789"


def small_table() -> pd.DataFrame:
    """6 pairs x 2 judges (j1: P(A) per order; j2: verdict per order, raw output), humans with
    annotator ids, a human-only pair, a judge row without a verdict, a secret-looking column."""
    rows = []
    gens = [("j1", "x"), ("x", "j1"), ("x", "y"), ("j2", "y"), ("y", "x"), ("j1", "j2")]
    p_ab = [0.9, 0.3, 0.6, 0.2, 0.55, 0.8]
    p_ba = [0.7, 0.6, 0.4, 0.1, 0.45, 0.6]
    v_ab = ["a", "b", "a", "b", "tie", "a"]
    v_ba = ["a", "a", "b", "b", "a", None]
    humans = [["a", "a"], ["b", "b", "a"], ["b"], ["b", "b"], [], ["a"]]
    for i, (ga, gb) in enumerate(gens):
        base = {"pair_id": f"p{i}", "prompt": f"question {i} <b>bold</b>", "response_a": "yes " * (i + 1),
                "response_b": "no " * (6 - i), "generator_a": ga, "generator_b": gb, "human": humans[i],
                "annotators": [f"alice{k}@example.com" for k in range(len(humans[i]))], "api_key": SECRET}
        rows.append({**base, "judge": "j1", "p_a_ab": p_ab[i], "p_a_ba": p_ba[i]})
        j2 = {**base, "judge": "j2", "verdict_ab": v_ab[i], "verdict_ba": v_ba[i], "raw_ab": f"[[{v_ab[i]}]]"}
        if v_ba[i] is None:
            j2.update(verdict_ab=None, raw_ab="garbage", judge_error="unparseable")
        rows.append(j2)
    # A judge with one P(A) and no verdict: logged with its choice (0.4 -> b), read back verdict-less.
    rows.append({**rows[0], "judge": "j3", "p_a_ab": None, "p_a_ba": None, "p_a": 0.4})
    rows.append({"pair_id": "p6", "prompt": "only humans", "response_a": "1", "response_b": "2",
                 "human": ["a", "b", "a"], "annotators": ["u1", "u2", "u3"]})
    return validate(pd.DataFrame(rows))[0]


def test_trace_records_tag_what_a_user_filters_on():
    records = {(r["inputs"]["pair_id"], r["inputs"]["judge"]): r
               for r in judgment_records(small_table(), self_map={"j2": ["y"]})}
    tags = {k: r["tags"] for k, r in records.items()}
    # p0/j1: A by j1 itself -> own 'a'; P(A) 0.9 and 0.7 both > 0.5 -> no flip; mean 0.8 -> a, humans a,a.
    assert tags["p0", "j1"]["judgebias.own_response"] == "a"
    assert tags["p0", "j1"]["judgebias.position_flip"] == "false"
    assert tags["p0", "j1"]["judgebias.judge_human_disagree"] == "false"
    # p1/j1: 0.3 (b) then 0.6 (a): a flip; mean 0.45 -> b; humans b,b,a -> b: agree.
    assert tags["p1", "j1"]["judgebias.position_flip"] == "true"
    assert tags["p1", "j1"]["judgebias.judge_human_disagree"] == "false"
    # p2/j2: a then b -> flip, folded to a tie; the human says b: disagree. B was written by y, which
    # is j2 under another name (--self j2=y); for j1 neither response is its own.
    assert tags["p2", "j2"]["judgebias.position_flip"] == "true"
    assert tags["p2", "j2"]["judgebias.judge_human_disagree"] == "true"
    assert tags["p2", "j2"]["judgebias.own_response"] == "b"
    assert tags["p2", "j1"]["judgebias.own_response"] == "none"
    # p3: j2 wrote A, y (j2 under another name, --self j2=y) wrote B -> both; p5: B is j2's.
    assert tags["p3", "j2"]["judgebias.own_response"] == "both"
    assert tags["p5", "j2"]["judgebias.own_response"] == "b"
    # p4/j1: 0.55 then 0.45 -> flip; no human label -> no disagreement tag at all.
    assert "judgebias.judge_human_disagree" not in tags["p4", "j1"]
    # p5/j2 has no verdict: one order only, no flip tag, the reason kept as the exclusion reason.
    assert "judgebias.position_flip" not in tags["p5", "j2"]
    assert records["p5", "j2"]["outputs"]["exclusion_reason"] == "unparseable"
    assert records["p5", "j2"]["choice"] is None
    # Human-only pair: no judge; its labels under hashed ids.
    assert records["p6", None]["humans"] == [("a", hash_annotator("u1")), ("b", hash_annotator("u2")),
                                             ("a", hash_annotator("u3"))]
    text = json.dumps([r for r in records.values()], default=str)
    assert "alice0@example.com" not in text and "u1" not in text.replace(hash_annotator("u1"), "")
    assert SECRET not in text
    assert records["p2", "j2"]["outputs"]["orders"]["ab"] == {"verdict": "a", "p_a": None,
                                                              "raw_output": "[[a]]"}
    assert len({r["tags"][KEY_TAG] for r in records.values()}) == len(records) == 14


def _cli(args: list[str], uri: str, experiment: str):
    from judgebias.cli import app

    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": experiment}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def _figures(path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.server
def test_judgments_round_trip_through_a_real_mlflow_server(mlflow_server, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    table = small_table()
    src = write_table(table, tmp_path / "small.parquet")
    common = ["--self", "j2=y", "--reps", "200", "--no-report"]
    out = _cli(["analyze", str(src), "--out", str(tmp_path / "a.json"), "--traces", *common],
               mlflow_server, "audit")
    assert "MLflow traces: 14 logged, 0 already there" in out
    assert "6 of the table's rows flip with the order; filter: tag.`judgebias.position_flip` = 'true'" in out
    again = _cli(["analyze", str(src), "--out", str(tmp_path / "a2.json"), "--traces", *common],
                 mlflow_server, "audit")
    assert "MLflow traces: 0 logged, 14 already there" in again

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("audit")
    traces = client.search_traces(locations=[experiment.experiment_id], max_results=100)
    assert len(traces) == 14  # the rerun added none
    # The first analyze run's traces are linked to it.
    runs = {t.info.trace_metadata.get("mlflow.sourceRun") for t in traces}
    assert runs == {out.split("MLflow: run ")[1].split()[0]}
    note = client.get_run(runs.pop()).data.tags["mlflow.note.content"]
    assert "tag.`judgebias.position_flip` = 'true'" in note
    # Relative links: an absolute http://127.0.0.1:PORT failed from a UI on any other host or port.
    page = f"#/experiments/{experiment.experiment_id}/traces?startTimeLabel=ALL"
    assert f"and [the experiment's Traces page]({page})" in note
    assert "http://" not in note
    assert "- 6 judgments where the judge flips with the order" in note
    # The run page leads with the answer: the headline table comes first, the traces after it.
    assert note.startswith("| judge | metric | estimate [95% CI] |\n|---|---|---|\n| j1 |")
    assert note.index("| j3 |") < note.index("judgments are logged as traces")
    by_key = {(t.info.tags["judgebias.pair_id"], t.info.tags["judgebias.judge"]): t for t in traces}
    judge = [a for a in by_key["p1", "j1"].info.assessments if a.source.source_type == "LLM_JUDGE"]
    assert [(a.name, a.source.source_id, a.value) for a in judge] == [("preference", "j1", "b")]
    humans = sorted((a.source.source_id, a.value) for a in by_key["p1", "j1"].info.assessments
                    if a.source.source_type == "HUMAN")
    assert humans == sorted((hash_annotator(f"alice{k}@example.com"), v) for k, v in enumerate("bba"))
    no_verdict = [a for a in by_key["p5", "j2"].info.assessments if a.source.source_type == "LLM_JUDGE"]
    assert no_verdict[0].value is None and no_verdict[0].error.error_message == "unparseable"
    dump = json.dumps([t.to_dict() for t in traces], default=str)
    assert "alice0@example.com" not in dump and SECRET not in dump
    flips = client.search_traces(locations=[experiment.experiment_id],
                                 filter_string="tag.`judgebias.position_flip` = 'true'")
    # j1 flips where P(A) crosses 0.5 between orders (p1 0.3/0.6, p2 0.6/0.4, p4 0.55/0.45); j2 where
    # its two verdicts differ (p1 b/a, p2 a/b, p4 tie/a).
    assert sorted((t.info.tags["judgebias.pair_id"], t.info.tags["judgebias.judge"]) for t in flips) == [
        ("p1", "j1"), ("p1", "j2"), ("p2", "j1"), ("p2", "j2"), ("p4", "j1"), ("p4", "j2")]

    _cli(["import", "mlflow", "--experiment", "audit", "--out", str(tmp_path / "back.parquet")],
         mlflow_server, "audit")
    back, _ = read_table(tmp_path / "back.parquet")
    assert len(back) == 14
    j3 = back[back["judge"] == "j3"].iloc[0]
    assert j3["p_a"] == 0.4 and pd.isna(j3["verdict"])  # its feedback said b; the span kept no verdict
    j3_feedback = by_key["p0", "j3"].info.assessments
    assert [a.value for a in j3_feedback if a.source.source_type == "LLM_JUDGE"] == ["b"]
    _cli(["analyze", str(tmp_path / "back.parquet"), "--out", str(tmp_path / "b.json"), "--no-mlflow",
          *common], mlflow_server, "audit")
    # The same table in the importer's (pair, judge) order: the bootstrap draws rows by position.
    ordered = table.sort_values(["pair_id", "judge"], na_position="first", kind="stable")
    write_table(ordered, tmp_path / "ordered.parquet")
    _cli(["analyze", str(tmp_path / "ordered.parquet"), "--out", str(tmp_path / "o.json"), "--no-mlflow",
          *common], mlflow_server, "audit")
    assert _figures(tmp_path / "b.json") == _figures(tmp_path / "o.json")


@pytest.mark.server
def test_import_reads_traces_a_team_logged_with_mlflow_itself(mlflow_server, tmp_path, monkeypatch):
    """Traces in another layout, made through MLflow's public API: fields named by the user."""
    import mlflow
    from mlflow.entities import AssessmentSource

    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("team-app")
    cases = [("q1", "A", ["model_b", "b"]), ("q2", "Tie", []), ("q3", 0.25, ["a"])]
    for qid, verdict, labels in cases:
        with mlflow.start_span("compare") as span:
            span.set_inputs({"question": f"What is {qid}?", "answers": {"left": "one", "right": "two"}})
            span.set_outputs({"winner": str(verdict)})
            mlflow.update_current_trace(tags={"left_model": "m1", "right_model": "m2", "qid": qid})
        mlflow.flush_trace_async_logging()  # feedback on a closed trace goes to the server: it must be there
        mlflow.log_feedback(trace_id=span.trace_id, name="pairwise", value=verdict,
                            source=AssessmentSource("LLM_JUDGE", "gpt-x"), rationale="because")
        mlflow.log_feedback(trace_id=span.trace_id, name="pairwise", value=True,
                            source=AssessmentSource("CODE", "checker"))
        for k, label in enumerate(labels):
            mlflow.log_feedback(trace_id=span.trace_id, name="human_pref", value=label,
                                source=AssessmentSource("HUMAN", f"reviewer{k}"))
    out = _cli(["import", "mlflow", "--experiment", "team-app", "--out", str(tmp_path / "t.jsonl"),
                "--judge-assessment", "pairwise", "--human-assessment", "human_pref",
                "--pair-id-field", "tag.qid", "--prompt-field", "request.question",
                "--response-a-field", "request.answers.left", "--response-b-field", "request.answers.right",
                "--generator-a-field", "tag.left_model", "--generator-b-field", "tag.right_model"],
               mlflow_server, "team-app")
    # The CODE source's boolean is no pairwise verdict: left out and said so, once per trace.
    assert "assessment_not_pairwise: 3" in out
    table, _ = read_table(tmp_path / "t.jsonl")
    got = table.set_index("pair_id")
    assert list(got.index) == ["q1", "q2", "q3"] and set(got["judge"]) == {"gpt-x"}
    assert got.loc["q1", "verdict"] == "a" and got.loc["q2", "verdict"] == "tie"
    assert got.loc["q3", "p_a"] == 0.25 and pd.isna(got.loc["q3", "verdict"])
    assert list(got.loc["q1", "human"]) == ["b", "b"] and list(got.loc["q2", "human"]) == []
    assert got.loc["q1", "prompt"] == "What is q1?" and got.loc["q1", "response_b"] == "two"
    assert (got["generator_a"] == "m1").all() and got.loc["q1", "judge_reason"] == "because"

    from judgebias.cli import app

    missing = CliRunner().invoke(app, ["import", "mlflow", "--experiment", "no-such", "--out", "x.jsonl"],
                                 env={"MLFLOW_TRACKING_URI": mlflow_server})
    assert missing.exit_code == 2 and "no such experiment" in missing.output


def test_import_mlflow_needs_an_experiment():
    from judgebias.cli import app

    result = CliRunner().invoke(app, ["import", "mlflow", "--out", "x.jsonl"])
    assert result.exit_code == 2 and "--experiment" in result.output


def test_traces_are_a_tracking_setting_that_keeps_the_run_folder():
    from test_config import minimal

    from judgebias.config.experiment import parse_config

    off, on = parse_config(minimal()), parse_config(minimal(tracking={"traces": True}))
    assert (off.tracking.traces, on.tracking.traces) == (False, True)
    assert off.config_hash() == on.config_hash()  # switching traces on re-runs no stage


@pytest.mark.server
def test_a_judgebias_judge_as_an_mlflow_scorer_is_read_back_by_import(mlflow_server, tmp_path, monkeypatch):
    import mlflow
    from test_judging import ScriptedBackend

    from judgebias.backends.protocol import OptionScores
    from judgebias.tracking.scorer import pairwise_scorer

    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("scored")
    # Scores keyed by the response shown first: "long answer" first -> P(first) 0.9, so P(A) 0.9 in
    # order ab; "short" first (order ba) -> P(first) 0.3, so P(A) = 1 - 0.3 = 0.7; mean 0.8 -> a.
    backend = ScriptedBackend(scores={"long answer": OptionScores({"A": 0.9, "B": 0.1}, mass=1.0),
                                      "short": OptionScores({"A": 0.3, "B": 0.7}, mass=1.0)})
    data = [{"inputs": {"prompt": "q1", "response_a": "long answer", "response_b": "short"}}]
    mlflow.genai.evaluate(data=data, scorers=[pairwise_scorer(backend, judge="scripted-judge")])
    out = _cli(["import", "mlflow", "--experiment", "scored", "--out", str(tmp_path / "s.jsonl"),
                "--judge-assessment", "scripted-judge"], mlflow_server, "scored")
    assert "judges: 1 (scripted-judge)" in out
    table, _ = read_table(tmp_path / "s.jsonl")
    assert list(table["verdict"]) == ["a"] and table.loc[0, "response_b"] == "short"
    trace = mlflow.search_traces(locations=[mlflow.get_experiment_by_name("scored").experiment_id],
                                 return_type="list")[0]
    (fb,) = [a for a in trace.info.assessments if a.name == "scripted-judge"]
    assert fb.source.source_type == "LLM_JUDGE" and fb.source.source_id == "scripted-judge"
    assert float(fb.metadata["p_a_ab"]) == pytest.approx(0.9)
    assert float(fb.metadata["p_a_ba"]) == pytest.approx(0.7)


@pytest.mark.server
def test_an_experiment_run_logs_its_judgments_as_traces_when_configured(mlflow_server, tmp_path):
    """judgebias.tracking.experiment's step on a small run folder: off logs nothing, on links every row of
    the run's table to the run as a trace, and a rerun in a new run adds none."""
    import mlflow
    from mlflow import MlflowClient
    from test_config import minimal

    from judgebias.config.experiment import demo_config_path, load_config, parse_config
    from judgebias.runs.layout import RunLayout
    from judgebias.runs.store import RunStore
    from judgebias.tracking.experiment_traces import log_run_traces, open_experiment_on, traces_links

    store = RunStore(tmp_path / "run")
    store.write_frame(RunLayout().table, small_table())
    mlflow.set_tracking_uri(mlflow_server)
    experiment_id = mlflow.set_experiment("experiment-traces").experiment_id
    client = MlflowClient(tracking_uri=mlflow_server)
    try:
        with mlflow.start_run():
            assert log_run_traces(parse_config(minimal()), store) is None
        assert client.search_traces(locations=[experiment_id], max_results=100) == []
        on = parse_config(minimal(tracking={"traces": True}))
        with mlflow.start_run() as run:
            counts = log_run_traces(on, store)
            links = traces_links(counts)
        open_experiment_on(experiment_id, traces=True)
        # 6 flips as in the round trip above, with the filter that finds them.
        assert "- 6 judgments where the judge flips with the order" in links
        assert "tag.`judgebias.position_flip` = 'true'" in links
        assert (counts["rows"], counts["logged"], counts["missing"]) == (14, 14, 0)
        assert client.get_run(run.info.run_id).data.tags["judgebias.traces"] == "14"
        traces = client.search_traces(locations=[experiment_id], max_results=100)
        assert len(traces) == 14
        assert {t.info.trace_metadata.get("mlflow.sourceRun") for t in traces} == {run.info.run_id}
        with mlflow.start_run():
            assert log_run_traces(on, store)["skipped"] == 14
        assert len(client.search_traces(locations=[experiment_id], max_results=100)) == 14
        # The experiment now opens on its traces (MLflow's experiment kind, set as nobody chose one).
        assert client.get_experiment(experiment_id).tags["mlflow.experimentKind"] == "genai_development"
    finally:
        mlflow.set_tracking_uri(None)
    # The demo's experiment shows its judgments as traces.
    assert load_config(demo_config_path()).tracking.traces


@pytest.mark.server
def test_an_experiment_opens_on_its_runs_without_traces_and_a_users_choice_stands(mlflow_server):
    import mlflow
    from mlflow import MlflowClient

    from judgebias.tracking.experiment_traces import KIND_TAG, open_experiment_on

    client = MlflowClient(tracking_uri=mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    try:
        plain = client.create_experiment("kind-plain")
        assert open_experiment_on(plain, traces=False) == "custom_model_development"
        assert client.get_experiment(plain).tags[KIND_TAG] == "custom_model_development"
        # Traces logged later: the experiment now opens on them; a later run without keeps them.
        assert open_experiment_on(plain, traces=True) == "genai_development"
        assert open_experiment_on(plain, traces=False) == "genai_development"
        chosen = client.create_experiment("kind-chosen", tags={KIND_TAG: "custom_model_development"})
        assert open_experiment_on(chosen, traces=True) == "custom_model_development"
        assert client.get_experiment(chosen).tags[KIND_TAG] == "custom_model_development"
    finally:
        mlflow.set_tracking_uri(None)


def test_the_traces_page_is_on_the_tracking_server_or_mlflow_uis_default_address():
    from judgebias.tracking.judgment_traces import filter_strings, traces_page

    # Over all time: by default the page shows 7 days, and an older run's link opened "Start tracing".
    assert traces_page("http://mlflow.example:5000/", "7") == \
        "http://mlflow.example:5000/#/experiments/7/traces?startTimeLabel=ALL"
    # A local store has no UI of its own: the link names `mlflow ui`'s default address.
    assert traces_page("sqlite:///x.db", "1") == "http://127.0.0.1:5000/#/experiments/1/traces?startTimeLabel=ALL"
    # In a run's description: relative, so it works from an MLflow UI on any host and port.
    assert traces_page(None, "7") == "#/experiments/7/traces?startTimeLabel=ALL"
    assert filter_strings()["the judge's own response is A or B"] == "tag.`judgebias.own_response` != 'none'"


def _render(url: str, shot, *words: str) -> dict:
    """MLflow's UI at ``url`` in a headless Chromium (tests/render_url.py), once ``words`` show."""
    import re
    import subprocess
    from pathlib import Path

    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("render_url.py")), url, str(shot),
                           *words], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    # The list's request preview names the pair in words ("j1 judges pair p0. Prompt: ..."); the
    # raw JSON form is accepted too (a trace opened in its detail view).
    seen["pairs"] = set(re.findall(r'(?:"pair_id": "|\bpair )(p\d)\b', seen.get("text", "")))
    return seen


@pytest.mark.server
@pytest.mark.slow
def test_mlflows_traces_page_lists_the_judgments_with_their_assessment(mlflow_server, tmp_path):
    """The experiment's Traces page, rendered by MLflow's own JavaScript app from the real server:
    every judgment listed with the ``preference`` assessment as a column."""
    pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="dev extra PyQt6-WebEngine not installed")
    import mlflow

    from judgebias.tracking.judgment_traces import log_judgment_traces

    mlflow.set_tracking_uri(mlflow_server)
    try:
        experiment_id = mlflow.set_experiment("traces-page").experiment_id
        assert log_judgment_traces(small_table())["logged"] == 14
    finally:
        mlflow.set_tracking_uri(None)
    page = _render(f"{mlflow_server}/#/experiments/{experiment_id}/traces", tmp_path / "all.png",
                   "preference", "14 of 14")
    assert page["loaded"] and page["found"] == ["preference", "14 of 14"], page.get("text", "")[:2000]
    assert page["pairs"] == {f"p{i}" for i in range(7)}
    # The judge's verdict shows in the assessment column: p2 is a tie for both judges (0.6/0.4 -> 0.5;
    # a then b, folded), and only their rows are ties besides p4/j2 (tie then a) and p1/j2 (b then a).
    lines = page["text"].split("\n")
    assert lines.count("tie") >= 2


def test_the_note_links_each_equal_tag_question_to_the_page_filtered_by_it():
    from judgebias.tracking.judgment_traces import filtered_page, traces_note

    page = "http://mlflow.example:5000/#/experiments/7/traces"
    flips = page + "?startTimeLabel=ALL&tag=judgebias.position_flip%3Dtrue"
    assert filtered_page(page, "judgebias.position_flip", "true") == flips
    # The all-time page (traces_page's) gets the tag added once, not a second query.
    assert filtered_page(page + "?startTimeLabel=ALL", "judgebias.position_flip", "true") == flips
    # A key or value with '=' or '&' in it stays one parameter, its halves split at the first '='.
    assert filtered_page(page, "a=b", "c&d").endswith("&tag=a%253Db%3Dc%2526d")
    note = traces_note({"rows": 14, "position flips": 6}, page=page)
    assert f"- 6 judgments where the judge flips with the order ([open them]({flips}))" in note
    # 'own response is A or B' is a != filter: the page's URL cannot say it, so no link claims to.
    own = next(line for line in note.splitlines() if "own response" in line)
    assert "open them" not in own


@pytest.mark.server
@pytest.mark.slow
def test_the_notes_link_opens_mlflows_traces_page_on_the_position_flips(mlflow_server, tmp_path):
    pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="dev extra PyQt6-WebEngine not installed")
    import re

    import mlflow

    from judgebias.tracking.judgment_traces import log_judgment_traces, traces_note, traces_page

    mlflow.set_tracking_uri(mlflow_server)
    try:
        experiment_id = mlflow.set_experiment("traces-link").experiment_id
        counts = log_judgment_traces(small_table())
    finally:
        mlflow.set_tracking_uri(None)
    note = traces_note(counts, page=traces_page(mlflow_server, experiment_id))
    (link,) = re.findall(r"flips with the order \(\[open them\]\(([^)]+)\)\)", note)
    page = _render(link, tmp_path / "flips.png", "preference", "6 of 14")
    # The 6 flips of the round trip above: p1, p2, p4 for both judges; no other pair listed.
    assert page["found"] == ["preference", "6 of 14"], page.get("text", "")[:2000]
    assert page["pairs"] == {"p1", "p2", "p4"}


def test_the_report_card_links_the_run_and_its_traces_in_mlflow(tmp_path, monkeypatch):
    """analyze with MLflow and a report: the card (on disk and as the run's artifact) links the run's
    page, the experiment's Traces page and the traces that flip with the order."""
    from html.parser import HTMLParser

    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    src = write_table(small_table(), tmp_path / "small.parquet")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = _cli(["analyze", str(src), "--out", str(tmp_path / "a.json"), "--traces", "--self", "j2=y",
                "--reps", "200"], uri, "cards")
    run_id = out.split("MLflow: run ")[1].split()[0]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("cards").experiment_id

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.hrefs = []

        def handle_starttag(self, tag, attrs):
            if tag == "a":
                self.hrefs.append(dict(attrs).get("href"))

    card = (tmp_path / "a_report.html").read_text()
    parser = Links()
    parser.feed(card)
    base = f"http://127.0.0.1:5000/#/experiments/{exp}"
    # the unfiltered traces link shows every trace however old (MLflow's default is the last 7 days)
    assert f"{base}/runs/{run_id}" in parser.hrefs and f"{base}/traces?startTimeLabel=ALL" in parser.hrefs
    flips = [h for h in parser.hrefs if h and "judgebias.position_flip%3Dtrue" in h]
    assert flips == [f"{base}/traces?startTimeLabel=ALL&tag=judgebias.position_flip%3Dtrue"]
    assert "6 judgments where the judge flips with the order" in card
    assert "14 judgments as MLflow traces" in card
    logged = client.download_artifacts(run_id, "a_report.html", str(tmp_path / "dl"))
    assert Path(logged).read_text() == card  # the run holds the linked card, not the first one


@pytest.mark.server
def test_a_password_in_the_tracking_uri_reaches_no_output(mlflow_server, tmp_path, monkeypatch):
    """A tracking URI with user:password@ (as a proxy in front of MLflow takes it) works, and the
    password is in nothing judgebias prints, writes or logs; the report card links the server without
    credentials. Before: the reachability check took 'alice:pw@127.0.0.1' for a host name and refused."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    password = "pw-" + SECRET
    uri = mlflow_server.replace("http://", f"http://alice:{password}@")
    src = write_table(small_table(), tmp_path / "small.parquet")
    out = _cli(["analyze", str(src), "--out", str(tmp_path / "a.json"), "--traces", "--self", "j2=y",
                "--reps", "200"], uri, "credentials")
    assert f"at {mlflow_server.replace('http://', 'http://alice:***@')} (" in out
    run_id = out.split("MLflow: run ")[1].split()[0]
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(run_id)
    card = (tmp_path / "a_report.html").read_text()
    assert f"href='{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run_id}'" in card
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
                      and p.suffix in (".html", ".md", ".json"))
    logged = json.dumps([run.data.params, run.data.tags]) + "".join(
        str(t.to_dict()) for t in client.search_traces(locations=[run.info.experiment_id]))
    assert password not in out + written + logged


def test_no_disagreement_question_where_no_row_has_a_human_majority():
    """Without human labels "0 judgments where the judge disagrees with the humans' majority" read as
    perfect agreement: the question is left out where it cannot be asked, kept where it can."""
    from judgebias.tracking.judgment_traces import HUMAN_MAJORITY, flag_counts, judgment_records, traces_note

    table = small_table()
    unlabelled = table.assign(human=[[] for _ in range(len(table))])
    counts = {"rows": 15, **flag_counts(judgment_records(unlabelled))}
    assert counts[HUMAN_MAJORITY] == 0
    unlabelled_note = traces_note(counts, page="#/experiments/1/traces")
    assert "disagrees with the humans" not in unlabelled_note
    # Changed on purpose (issue 45, UI 3): the question is answered with why it cannot be asked.
    assert "no judgment has human labels with a majority to compare the judge with" in unlabelled_note
    labelled = {"rows": 15, **flag_counts(judgment_records(small_table()))}
    assert labelled[HUMAN_MAJORITY] > 0
    note = traces_note(labelled, page="#/x")
    assert "judgments where the judge disagrees with the humans' majority" in note


def _artifact_paths(client, run_id: str, path: str | None = None) -> set[str]:
    out = set()
    for a in client.list_artifacts(run_id, path):
        out |= _artifact_paths(client, run_id, a.path) if a.is_dir else {a.path}
    return out


@pytest.mark.server
def test_the_logged_experiment_page_links_only_pages_its_run_holds(experiment_run, mlflow_server, tmp_path):
    """The report.html logged to the experiment's MLflow run linked its ablations' pages (and the
    imported data's) by relative paths that no artifact of the run held: dead links in MLflow's
    artifact view. The shared tiny experiment's folder, logged again to a real server: every relative
    link of every logged page names an artifact of the same run."""
    import posixpath
    import shutil
    from html.parser import HTMLParser
    from urllib.parse import unquote, urlsplit

    import mlflow
    from mlflow import MlflowClient

    from judgebias.runs.store import RunStore
    from judgebias.tracking.experiment import log_experiment

    class Hrefs(HTMLParser):
        def __init__(self):
            super().__init__()
            self.hrefs = []

        def handle_starttag(self, tag, attrs):
            self.hrefs += [v for k, v in attrs if k == "href" and v]

    # a copy: the shared run folder (and its mlflow.json) stays as the other tests read it
    folder = shutil.copytree(experiment_run["store"].root, tmp_path / "run")
    cfg = experiment_run["cfg"]
    cfg = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(
        update={"tracking_uri": mlflow_server, "experiment": "linked-pages", "traces": False})})
    try:
        run_id = log_experiment(cfg, RunStore(folder),
                                config_source=str(experiment_run["config_path"]))["run_id"]
    finally:
        mlflow.set_tracking_uri(None)
    client = MlflowClient(tracking_uri=mlflow_server)
    held = _artifact_paths(client, run_id)
    pages = sorted(p for p in held if p.endswith(".html"))
    assert "report.html" in pages
    linked = 0
    for page in pages:
        local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=page,
                                                    dst_path=str(tmp_path / "dl"), tracking_uri=mlflow_server)
        parser = Hrefs()
        parser.feed(Path(local).read_text(encoding="utf-8"))
        for href in parser.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(parts.path)))
            assert target in held, f"{page} links {href!r}, which run {run_id} does not hold"
            linked += 1
    # the tiny run's page links its two style variants' pages and its fine-tune page at least
    assert linked >= 3
    # Issue 42 item 5: each judge's run carries the judge, the data and the template's words as tags,
    # its figures under the same names as the other judges', and its time per 1k judgments.
    parent = client.get_run(run_id)
    children = client.search_runs([parent.info.experiment_id], filter_string=(
        f"tags.mlflow.parentRunId = '{run_id}' and tags.`judgebias.kind` = 'judge'"))
    assert {r.data.tags["judgebias.judge"] for r in children} == {"ta", "tb"}
    from judgebias.reporting.judges_table import per_thousand

    stages = RunStore(folder).manifest().get("stages", {})
    for r in children:
        judge = r.data.tags["judgebias.judge"]
        assert r.data.tags["judgebias.dataset_digest"] == parent.data.params["data_hash"]
        assert len(r.data.tags["judgebias.template_digest"]) == 16
        # Time per 1k over the calls the model made: absent where every judgment came from the call
        # cache (the shared run, when an earlier test of the session had judged the same pairs).
        expected = per_thousand(stages.get(f"judge_pairs[{judge}]") or {})
        if expected:
            assert r.data.metrics["seconds_per_1k"] == pytest.approx(expected["seconds_per_1k"])
            assert parent.data.metrics[f"{judge}.seconds_per_1k"] == r.data.metrics["seconds_per_1k"]
        else:
            assert "seconds_per_1k" not in r.data.metrics
    assert any(p.startswith("style-") for p in pages) and any(p.startswith("finetune-") for p in pages)


def test_a_table_too_large_for_traces_keeps_a_named_sample_of_its_disagreements():
    from judgebias.tracking.judgment_traces import (
        HUMAN_MAJORITY,
        disagreement_records,
        disagreements_note,
        flag_counts,
        judgment_records,
    )

    table = small_table()
    counts = flag_counts(judgment_records(table))
    found, total = disagreement_records(table)
    assert counts[HUMAN_MAJORITY] > total == counts["judge disagrees with the humans"] == len(found) > 0
    assert all(r["tags"]["judgebias.judge_human_disagree"] == "true" for r in found)
    one, same_total = disagreement_records(table, cap=1)
    assert same_total == total and one == found[:1]  # the smallest key: the same row on a rerun
    with pytest.raises(ValueError, match="cap"):
        disagreement_records(table, cap=0)
    note = disagreements_note(200, 581, 1878, "7")
    assert ("a sample of 200 (capped at 200, by trace key) of the 581 judgments where the judge "
            "disagrees") in note
    assert "tag=judgebias.judge_human_disagree%3Dtrue" in note and "startTimeLabel=ALL" in note
    assert "other 1678 of 1878 judgments are not logged" in note


@pytest.mark.server
def test_an_imported_run_with_human_labels_logs_its_disagreements_as_traces(mlflow_server, tmp_path,
                                                                           monkeypatch):
    """The demo's imported runs (LLMBar's 400 rows, PandaLM's 1,878: over the 50 rows that get a
    trace each) logged no traces, so "where does the judge disagree with the humans" had no link.
    LLMBar's 75 disagreements are all logged (under the 200 cap), tagged, and the run's description
    names them with a link filtered on them."""
    from mlflow import MlflowClient

    from judgebias.bundled import BUNDLED
    from judgebias.runs.store import RunStore
    from judgebias.tracking.imported import log_imported
    from judgebias.tracking.settings import TrackingSettings

    monkeypatch.chdir(tmp_path)
    (entry,) = [e for e in BUNDLED if e.name == "llmbar-natural"]
    from judgebias.bundled import analyze_bundled

    result = analyze_bundled(entry, reps=100)
    from judgebias.tracking.log_analysis import COMPARE_JUDGES, name_key

    settings = TrackingSettings(tracking_uri=mlflow_server, experiment_name="imported-traces")
    run_id = log_imported(RunStore(tmp_path / "run"), [(entry, result)], settings)[entry.name]
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(run_id)
    traces = client.search_traces(locations=[run.info.experiment_id], max_results=500, include_spans=False)
    assert len(traces) == 75
    assert {t.info.tags["judgebias.judge_human_disagree"] for t in traces} == {"true"}
    assert {t.info.trace_metadata.get("mlflow.sourceRun") for t in traces} == {run_id}
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("IMPORTED DATA")  # the provenance stays first
    assert "Traces: all of the 75 judgments where the judge disagrees with the humans' majority" in note
    assert "tag=judgebias.judge_human_disagree%3Dtrue" in note
    assert run.data.tags["judgebias.traces.sample"] == "judge_human_disagree"
    # Issue 42 item 5: one nested run per judge, its figures under names without the judge (the
    # parent's "<judge>.<figure>" held NaN in MLflow's compare view for every other judge)
    children = client.search_runs([run.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{run_id}'")
    judges = {r.data.tags["judgebias.judge"]: r for r in children}
    assert set(judges) == set(result["judges"]) and len(judges) >= 2
    names = [set(r.data.metrics) for r in judges.values()]
    assert all(n == names[0] for n in names) and "agreement_human" in names[0]
    for r in judges.values():
        assert r.data.tags["judgebias.dataset_digest"] == entry.digest()
        assert run.data.tags["judgebias.dataset_digest"] == entry.digest()
        assert r.data.tags["judgebias.template_digest"].startswith("not recorded")
        assert r.info.run_name == "judge:" + name_key(r.data.tags["judgebias.judge"])
    # The description ends saying how to compare judges across runs (the judge runs' tag).
    assert note.rstrip().endswith(COMPARE_JUDGES)


def test_the_trace_list_previews_read_as_words_and_the_verdict_says_how_firm_it_is():
    """MLflow's trace list showed inputs and outputs as raw JSON, and the judge's assessment a bare
    "b" even at P(A) 0.49999: the previews say who judged what and the verdict with its P(A); the
    feedback's value stays the choice (the import reads it back), its rationale says the P(A)."""
    from judgebias.tracking.judgment_traces import _trace, judgment_records

    table = small_table()
    # a judge with one P(A) just under 0.5 (as j3's row: no per-order reads, no verdict column)
    close = table.iloc[[0]].assign(judge="j4", p_a_ab=None, p_a_ba=None, p_a=0.49999, verdict=None)
    records = {(r["inputs"]["pair_id"], r["inputs"]["judge"]): r
               for r in judgment_records(pd.concat([table, close], ignore_index=True))}
    info, _ = _trace(records["p0", "j4"], "1", None, 0)
    assert info.response_preview == "b at P(A) 0.49999"
    assert info.request_preview.startswith("j4 judges pair p0. Prompt: question 0 <b>bold</b> | A (j1): yes")
    assert not info.request_preview.startswith("{")
    (fb,) = [a for a in info.assessments if a.source.source_type == "LLM_JUDGE"]
    assert fb.value == "b" and fb.rationale == "b at P(A) 0.49999"
    # p1/j1: 0.3 then 0.6, both orders named with their P(A)
    info, _ = _trace(records["p1", "j1"], "1", None, 0)
    assert info.response_preview == "b (A first: b at P(A) 0.3; B first: a at P(A) 0.6)"
    info, _ = _trace(records["p5", "j2"], "1", None, 0)  # no verdict: the reason, no rationale
    assert info.response_preview.startswith("no verdict (unparseable)")
    assert all(a.rationale is None for a in info.assessments if a.source.source_type == "LLM_JUDGE")
    assert _trace(records["p6", None], "1", None, 0)[0].response_preview == "no judge: human labels only"
