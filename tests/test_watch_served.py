"""A watched judge behind an OpenAI-compatible endpoint: what the endpoint says it serves (the reply's
model name and system_fingerprint) is asked before each look and is part of the call cache's key, so a
new model behind the same name is judged afresh; retries and concurrency stay out of the key."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from judgebias.bench.openai_stub import StubServer, StubState
from judgebias.config.watch import WatchConfigError, WatchSettings, load_watch, pinned_table, sha256_file
from judgebias.stages.watch import _judge
from judgebias.tables.pairwise import validate


def _audit(n: int = 4) -> pd.DataFrame:
    return validate(pd.DataFrame({
        "pair_id": [f"p{i}" for i in range(n)],
        "prompt": [f"question {i}" for i in range(n)],
        "response_a": [f"answer a {i}" for i in range(n)],
        "response_b": [f"answer b {i}" for i in range(n)],
        "human": [["a"] if i % 2 else ["b"] for i in range(n)],
    }))[0]


def _settings(base_url: str, concurrency: int = 2, cache: str = "reuse") -> WatchSettings:
    return WatchSettings.model_validate({
        "audit": {"table": "audit.parquet", "sha256": "0" * 64},
        "judge": {"model": "gpt-x", "backend": "openai", "base_url": base_url, "concurrency": concurrency,
                  "cache": cache},
    })


def test_a_new_fingerprint_or_served_model_is_asked_again(tmp_path):
    audit = _audit()
    state = StubState()
    state.fingerprint = "fp_1"
    with StubServer(state) as server:
        def requests() -> int:
            return sum(state.accepted.values())

        table, served = _judge(_settings(server.base_url), audit)
        # One probe, then 4 pairs x 2 orders.
        assert requests() == 1 + 8
        assert served == {"served_model": "gpt-x", "system_fingerprint": "fp_1"}
        assert set(table["system_fingerprint"]) == {"fp_1"} and set(table["served_model"]) == {"gpt-x"}

        _judge(_settings(server.base_url, concurrency=4), audit)  # same model: only the probe is sent
        assert requests() == 1 + 8 + 1

        state.fingerprint = "fp_2"  # the provider updated its backend: every item is asked again
        table, _ = _judge(_settings(server.base_url), audit)
        assert requests() == 1 + 8 + 1 + 1 + 8
        assert set(table["system_fingerprint"]) == {"fp_2"}

        state.served_model = "gpt-x-2026-11-01"  # a new snapshot behind the same name
        table, served = _judge(_settings(server.base_url), audit)
        assert requests() == 1 + 8 + 1 + 1 + 8 + 1 + 8
        assert served["served_model"] == "gpt-x-2026-11-01"

        # cache: fresh (the default): every look asks every pair, even with nothing announced.
        asked = requests()
        _judge(_settings(server.base_url, cache="fresh"), audit, "7@2026-11-27T21:00:00Z")
        _judge(_settings(server.base_url, cache="fresh"), audit, "8@2026-12-04T21:00:00Z")
        assert requests() == asked + 2 * (1 + 8)


def test_the_audit_table_is_pinned_by_its_digest(tmp_path):
    path = tmp_path / "audit.parquet"
    _audit().to_parquet(path)
    config = tmp_path / "watch.yaml"
    config.write_text(
        "watch:\n  audit: {table: audit.parquet, sha256: " + sha256_file(path) + "}\n"
        "  judge: {model: smollm2-135m-instruct}\n", encoding="utf-8")
    settings, base = load_watch(config)
    assert pinned_table(settings, base) == path.resolve()
    _audit(5).to_parquet(path)
    with pytest.raises(WatchConfigError, match=r"watch.audit.table: .* changed \(sha256 .*pinned"):
        pinned_table(settings, base)
    config.write_text("watch:\n  audit: {table: audit.parquet, sha256: abc}\n  judge: {model: m}\n")
    with pytest.raises(WatchConfigError, match=r"watch.audit.sha256"):
        load_watch(config)


def test_serve_builds_a_watch_deployment_on_its_cron(tmp_path):
    from judgebias.flows.serve import build_deployments

    path = tmp_path / "audit.parquet"
    _audit().to_parquet(path)
    config = tmp_path / "watch.yaml"
    config.write_text(
        "watch:\n  name: nightly\n  audit: {table: audit.parquet, sha256: " + sha256_file(path) + "}\n"
        "  judge: {model: smollm2-135m-instruct}\n  cron: '0 5 * * 2'\n", encoding="utf-8")
    (deployment,) = build_deployments(None, watches=(str(config),))
    assert deployment.name == "judgebias-watch-nightly"
    assert deployment.parameters == {"config_path": str(config)}
    assert [s.schedule.cron for s in deployment.schedules] == ["0 5 * * 2"]
    _audit(6).to_parquet(path)  # the audit set changed: refused when serve starts, not at the first run
    with pytest.raises(WatchConfigError, match="changed"):
        build_deployments(None, watches=(str(config),))


def test_a_silent_model_swap_is_flagged_by_the_figures(tmp_path, monkeypatch, prefect_harness):
    """The provider swaps the model behind the same name and fingerprint: ``cache: fresh`` asks every
    pair again, the position figures move, the look ends JudgeChanged and says which figures moved."""
    from typer.testing import CliRunner

    from judgebias.cli import app

    monkeypatch.chdir(tmp_path)
    audit = _audit(20)
    audit.to_parquet(tmp_path / "audit.parquet")
    state = StubState()
    state.fingerprint = "fp_1"
    with StubServer(state) as server:
        (tmp_path / "w.yaml").write_text(
            "watch:\n  name: w\n  audit: {table: audit.parquet, sha256: "
            + sha256_file(tmp_path / "audit.parquet") + "}\n"
            "  judge: {model: gpt-x, backend: openai, base_url: " + server.base_url + "}\n"
            "  looks: 2\n  spending: pocock\n  reps: 200\n", encoding="utf-8")
        runs = []
        for answer in ("A", "A", "B"):  # reference, an unchanged look, then the swapped model
            state.answer = answer
            args = ["watch", str(tmp_path / "w.yaml"), "--no-mlflow", "--exit-code"]
            runs.append(CliRunner().invoke(app, args))
    assert runs[0].exit_code == 0, runs[0].output
    assert runs[1].exit_code == 0 and "look 1/2" in runs[1].output and "no figure changed" in runs[1].output
    assert runs[2].exit_code == 1, runs[2].output
    assert "judge changed" in runs[2].output and "position_bias" in runs[2].output
    record = json.loads((tmp_path / "watch-history" / "w" / "look-0002" / "record.json").read_text())
    assert record["served"] == {"served_model": "gpt-x", "system_fingerprint": "fp_1"}
    assert "position_bias" in record["decision"]["changed"]
    assert record["decision"]["look"] == 2  # look 2 of 2 against the first look
