"""The experiment flow end to end on two tiny random-weights models (real SmolLM2 tokenizer, real
Llama forward passes): tables, metrics, ablations, MLflow (embedded and a real server), resumability.

One experiment run is shared by the module (about a minute on 2 cores); each test reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import free_port
from servers import running

from judgebias.random_weights import random_model

pytestmark = pytest.mark.slow

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from judgebias import models

    out = tmp_path_factory.mktemp("tiny-models")
    tok = models.load_tokenizer("smollm2-135m-instruct")
    paths = {}
    for name, seed in (("tiny-a", 1), ("tiny-b", 2)):
        lm = random_model("tiny-llama", tokenizer=tok, seed=seed, device="cpu", initializer_range=0.2)
        lm.model.save_pretrained(out / name)
        tok.save_pretrained(out / name)
        paths[name] = str(out / name)
    return paths


def tiny_config(models: dict, base: Path) -> dict:
    return {
        "name": "tiny",
        "dataset": {"source": "mt-bench-40", "sample": 6, "seed": 0},
        "generators": [
            {
                "name": "ta",
                "model": models["tiny-a"],
                "prompt_kind": "chat",
                "max_new_tokens": 8,
                "batch_size": 4,
            },
            {
                "name": "tb",
                "model": models["tiny-b"],
                "prompt_kind": "few-shot",
                "max_new_tokens": 8,
                "batch_size": 4,
            },
        ],
        "judges": [
            {"name": "ta", "model": models["tiny-a"], "batch_size": 4},
            {"name": "tb", "model": models["tiny-b"], "batch_size": 4, "prompt_kind": "few-shot"},
        ],
        "self_map": {"ta": "ta", "tb": "tb"},
        "analyses": {"perplexity": True, "attention": _has_attention()},
        "ablations": {
            "style_rewrite": {"enabled": True, "model": models["tiny-a"], "sample": 3, "max_new_tokens": 8},
            "finetune": {
                "enabled": True,
                "steps": 2,
                "batch_size": 2,
                "max_length": 64,
                "train_size": 4,
                "sample": 3,
            },
        },
        "tracking": {"experiment": "tiny-test", "tracking_uri": f"sqlite:///{base / 'mlflow.db'}"},
        "run_dir": str(base / "runs"),
        "cache_dir": str(base / "calls"),
    }


def _has_attention() -> bool:
    try:
        import judgebias.attention  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def experiment_run(prefect_harness, tiny_models, tmp_path_factory):
    from flows.experiment import experiment
    from judgebias.config import load_config
    from judgebias.runstore import RunStore

    base = tmp_path_factory.mktemp("experiment")
    config_path = base / "tiny.yaml"
    config_path.write_text(yaml.safe_dump(tiny_config(tiny_models, base)))
    cwd = os.getcwd()
    os.chdir(base)  # MLflow's sqlite store puts artifacts in ./mlruns
    try:
        result = experiment(str(config_path))
    finally:
        os.chdir(cwd)
    cfg = load_config(config_path)
    return {
        "result": result,
        "cfg": cfg,
        "store": RunStore(cfg.run_path()),
        "config_path": config_path,
        "base": base,
    }


def test_table_holds_every_judge_on_every_pair_in_both_orders(experiment_run):
    from judgebias.io import read_table

    store = experiment_run["store"]
    table, excluded = read_table(store.path("table.parquet"))
    assert excluded.total == 0
    pairs = store.read_frame("pairs.parquet")
    assert len(pairs) == 6 and set(pairs["generator_a"]) == {"ta"} and set(pairs["generator_b"]) == {"tb"}
    assert sorted(table["judge"].unique()) == ["ta", "tb"]
    assert len(table) == 2 * len(pairs)
    ok = table["judge_error"].isna()
    assert ok.any()
    both = table[ok]
    # p_a is the mean of both presentation orders (each already mapped back to the original A).
    assert ((both["p_a_ab"] + both["p_a_ba"]) / 2 - both["p_a"]).abs().max() < 1e-12
    assert table[["ppl_a", "ppl_b"]].notna().all().all() and (table[["ppl_a", "ppl_b"]] > 0).all().all()
    for judge in ("ta", "tb"):
        responses = store.read_frame(f"responses/{judge}.parquet")
        assert len(responses) == 6 and responses["error"].isna().all()


def test_metrics_and_gold_are_those_of_analyze_on_the_table(experiment_run):
    from judgebias.analysis import analyze
    from judgebias.io import read_table

    store = experiment_run["store"]
    metrics = store.read_json("metrics.json")
    table, _ = read_table(store.path("table.parquet"))
    assert metrics == json.loads(json.dumps(analyze(table, self_map={"ta": {"ta"}, "tb": {"tb"}})))
    for judge in ("ta", "tb"):
        dbg = metrics["judges"][judge]["dbg"]
        assert dbg["ci_low"] <= dbg["value"] <= dbg["ci_high"]
        assert dbg["gold_panel"] == ["tb" if judge == "ta" else "ta"]
    gold = store.read_frame("gold.parquet")
    assert set(gold["judge"]) == {"ta", "tb"}
    tb_rows = table[table["judge"] == "tb"].set_index("pair_id")["p_a"]
    gold_ta = gold[gold["judge"] == "ta"].set_index("pair_id")["gold_p_a"]
    # The gold of judge ta is the other judge's P(A), pair by pair.
    assert (gold_ta - tb_rows.reindex(gold_ta.index)).abs().max() < 1e-12


def test_ablations_compare_dbg_before_and_after(experiment_run):
    cfg, store = experiment_run["cfg"], experiment_run["store"]
    style = store.read_json(f"style-{cfg.ablation_hash('style_rewrite')}/comparison.json")
    # The rewriter is tiny-a, i.e. judge ta: left out of the gold, so tb has no gold judge left.
    assert style["excluded_from_gold"] == ["ta"]
    assert set(style["judges"]["ta"]) == {"before", "attractive", "humorous"}
    assert style["judges"]["ta"]["before"]["gold_panel"] == ["tb"]
    assert style["judges"]["tb"]["attractive"]["value"] is None
    sem = store.read_frame(f"style-{cfg.ablation_hash('style_rewrite')}/semantic.parquet")
    assert set(sem["style"]) == {"attractive", "humorous"}
    assert sem["cosine"].between(-1, 1).all()
    ft_prefix = f"finetune-{cfg.ablation_hash('finetune')}/"
    ft = store.read_json(f"{ft_prefix}comparison.json")
    assert set(ft["judges"]) == {"ta", "tb"} and set(ft["judges"]["ta"]) == {"before", "finetuned"}
    for gen in ("ta", "tb"):
        info = store.read_json(f"{ft_prefix}adapters/{gen}.json")
        assert len(info["losses"]) == 2 and info["trainable_params"] > 0
        assert (Path(info["adapter_dir"]) / "adapter_config.json").exists()
    before = store.read_frame("responses/ta.parquet")
    after = store.read_frame(f"{ft_prefix}responses/ta.parquet")
    assert len(after) == 3 and set(after["instruction_id"]) <= set(before["instruction_id"])


def test_plots_are_real_pngs(experiment_run):
    cfg, store = experiment_run["cfg"], experiment_run["store"]
    assert png_size(store.path("plots/dbg.png")) == (800, 500)  # judgebias.plots: 8 x 5 in at 100 dpi
    width, height = png_size(store.path("plots/win_rates.png"))  # sized by its number of rows/columns
    assert width >= 300 and height >= 200
    if cfg.analyses.attention:
        assert png_size(store.path("plots/attention_ta.png")) == (640, 400)
    style = f"style-{cfg.ablation_hash('style_rewrite')}/plots/"
    assert png_size(store.path(style + "semantic_shift.png")) == (640, 480)
    assert png_size(store.path(style + "dbg_before_after.png")) == (640, 400)
    ft = f"finetune-{cfg.ablation_hash('finetune')}/plots/dbg_before_after.png"
    assert png_size(store.path(ft)) == (640, 400)


def test_mlflow_has_parent_nested_runs_params_and_artifacts(experiment_run):
    import mlflow
    from mlflow.tracking import MlflowClient

    run_id = experiment_run["result"]["run_id"]
    client = MlflowClient(tracking_uri=experiment_run["cfg"].tracking.tracking_uri)
    parent = client.get_run(run_id)
    params, metrics = parent.data.params, parent.data.metrics
    assert params["config.judges.0.model"].endswith("tiny-a")
    assert len(params["data_hash"]) == 16 and params["version.torch"].startswith("2.")
    assert params["git_commit"]
    m = experiment_run["store"].read_json("metrics.json")["judges"]["ta"]["dbg"]
    assert metrics["ta.dbg"] == pytest.approx(m["value"])
    assert metrics["ta.dbg.ci_low"] == pytest.approx(m["ci_low"])
    assert metrics["ta.dbg.ci_high"] == pytest.approx(m["ci_high"])
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'"
    )
    names = {r.info.run_name: r for r in children}
    assert set(names) == {"judge:ta", "judge:tb", "ablation:style_rewrite", "ablation:finetune"}
    # Per-judge runs carry the same metric names, so the UI compares judges column by column.
    assert names["judge:ta"].data.metrics["dbg"] == pytest.approx(m["value"])
    assert set(names["judge:ta"].data.metrics) == set(names["judge:tb"].data.metrics)
    style_metrics = names["ablation:style_rewrite"].data.metrics
    assert "ta.dbg.before" in style_metrics and "semantic_cosine.attractive.mean" in style_metrics
    ft_run = names["ablation:finetune"]
    assert len(client.get_metric_history(ft_run.info.run_id, "ta.train_loss")) == 2
    local = Path(
        mlflow.artifacts.download_artifacts(
            run_id=ft_run.info.run_id,
            artifact_path="adapters/ta",
            tracking_uri=experiment_run["cfg"].tracking.tracking_uri,
        )
    )
    assert (local / "adapter_config.json").exists()
    table = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run_id,
            artifact_path="table/table.parquet",
            tracking_uri=experiment_run["cfg"].tracking.tracking_uri,
        )
    )
    assert len(pd.read_parquet(table)) == 12
    arts = {a.path for a in client.list_artifacts(names["ablation:style_rewrite"].info.run_id, "plots")}
    assert {"plots/semantic_shift.png", "plots/dbg_before_after.png"} <= arts
    assert not any("OPENAI" in v or "sk-" in v for v in params.values())
    # The run's description (rendered by the UI) is the headline table, and the link goes to the run.
    note = parent.data.tags["mlflow.note.content"]
    assert "| judge | metric | estimate [95% CI] |" in note and "| ta |" in note
    page = f"/#/experiments/{parent.info.experiment_id}/runs/{run_id}"
    assert experiment_run["result"]["run_url"].endswith(page)


def test_prefect_markdown_artifact_names_the_mlflow_run(experiment_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["judgebias-tiny"]))
        )
    assert arts, "no markdown artifact"
    assert experiment_run["result"]["run_id"] in arts[0].data
    assert "| ta | DBG score" in arts[0].data


def test_killed_run_resumes_without_repeating_model_calls(experiment_run):
    from flows.experiment import experiment

    store = experiment_run["store"]
    before = pd.read_parquet(store.path("table.parquet"))
    # As if killed after the model calls of judge tb but before its stage output was written.
    for name in (
        "judgments/tb.parquet",
        "perplexity/tb.parquet",
        "table.parquet",
        "gold.parquet",
        "metrics.json",
    ):
        store.path(name).unlink()
    cwd = os.getcwd()
    os.chdir(experiment_run["base"])
    try:
        experiment(
            str(experiment_run["config_path"]),
            {"ablations": {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}},
        )
    finally:
        os.chdir(cwd)
    stages = store.manifest()["stages"]
    for stage in ("judge_pairs[tb]", "perplexity_analysis[tb]"):
        assert stages[stage]["calls"] == 0, stages[stage]
        assert stages[stage]["hits"] > 0
    after = pd.read_parquet(store.path("table.parquet"))
    cols = ["pair_id", "judge", "p_a", "p_a_ab", "p_a_ba", "ppl_a", "ppl_b"]
    pd.testing.assert_frame_equal(
        before[cols].sort_values(["judge", "pair_id"]).reset_index(drop=True),
        after[cols].sort_values(["judge", "pair_id"]).reset_index(drop=True),
    )


@pytest.mark.server
def test_metrics_read_back_from_a_real_mlflow_server(experiment_run, tmp_path):
    from mlflow.tracking import MlflowClient

    from judgebias.runstore import RunStore
    from tracking.experiment import log_experiment

    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    uri = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination", str(tmp_path / "artifacts")]
    with running(argv, health_url=f"{uri}/health", log=tmp_path / "mlflow.log", what="mlflow server", env=env,
                 grace=30):
        cfg = experiment_run["cfg"].model_copy(
            update={"tracking": experiment_run["cfg"].tracking.model_copy(update={"tracking_uri": uri})}
        )
        # A copy of the run folder: logging rewrites its mlflow.json, which other tests read.
        store = RunStore(shutil.copytree(experiment_run["store"].root, tmp_path / "run"))
        result = log_experiment(cfg, store, config_source=str(experiment_run["config_path"]))
        run = MlflowClient(tracking_uri=uri).get_run(result["run_id"])
        metrics = experiment_run["store"].read_json("metrics.json")["judges"]
        for judge in ("ta", "tb"):
            assert run.data.metrics[f"{judge}.dbg"] == pytest.approx(metrics[judge]["dbg"]["value"])
            assert run.data.metrics[f"{judge}.position_bias.ci_high"] == pytest.approx(
                metrics[judge]["position_bias"]["ci_high"]
            )
        arts = {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(result["run_id"], "table")}
        assert arts == {"table/table.parquet"}


@pytest.mark.server
def test_nightly_sync_flow_pushes_pairs_and_recomputes_metrics(
    experiment_run, labelstudio_server, monkeypatch
):
    from flows.sync import sync_annotations

    settings = labelstudio_server.settings
    monkeypatch.setenv("LABEL_STUDIO_URL", settings.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", settings.api_key)
    cwd = os.getcwd()
    os.chdir(experiment_run["base"])
    try:
        out = sync_annotations(str(experiment_run["config_path"]), {"annotation": {"budget": 3}})
    finally:
        os.chdir(cwd)
    assert out["sync"]["pushed"] == 3
    assert out["judges"] == ["ta", "tb"]
    merged = Path(out["sync"]["out"])
    assert merged.exists() and merged.parent == experiment_run["store"].root
    annotated = list(experiment_run["store"].root.glob("annotated-*/metrics.json"))
    assert len(annotated) == 1
    assert json.loads(annotated[0].read_text())["dataset"]["pairs"] == 6


def test_finetune_ablation_rerun_reuses_adapters_and_model_calls(experiment_run):
    from flows.experiment import finetune_ablation

    cfg, store = experiment_run["cfg"], experiment_run["store"]
    prefix = f"finetune-{cfg.ablation_hash('finetune')}/"
    before = {g: store.read_json(f"{prefix}adapters/{g}.json") for g in ("ta", "tb")}
    comparison = store.read_json(f"{prefix}comparison.json")
    shutil.rmtree(store.path(prefix))  # the ablation's whole folder is gone
    finetune_ablation(str(experiment_run["config_path"]))
    stages = store.manifest()["stages"]
    for g in ("ta", "tb"):
        after = store.read_json(f"{prefix}adapters/{g}.json")
        assert after["from_cache"] is True and after["adapter_sha256"] == before[g]["adapter_sha256"]
        assert stages[f"{prefix}generate_responses[{g}]"]["calls"] == 0
        assert stages[f"{prefix}judge_pairs[{g}]"]["calls"] == 0
    assert store.read_json(f"{prefix}comparison.json") == comparison


def test_sigterm_stops_after_the_running_task_and_takes_prefects_server_down(tiny_models, tmp_path):
    # As `docker stop` or a scheduler stops a run: Prefect lets the running task finish and marks
    # the runs Crashed; the process must then leave, taking its temporary Prefect server along.
    import signal
    import subprocess
    import threading
    import time

    import psutil

    data = tiny_config(tiny_models, tmp_path)
    data["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    data["analyses"] = {"perplexity": True, "attention": False}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", str(config)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "Beginning subflow run" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(240), "".join(lines)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("prefect.server" in " ".join(c.cmdline()) for c in children), "".join(lines)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 143, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    out = "".join(lines)
    assert "stopped: finished model calls and stages are kept" in out
    assert "Stopping temporary server" in out
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, [c.cmdline() for c in alive]


def test_logging_killed_half_way_is_retired_by_the_rerun(experiment_run, tmp_path):
    # SIGKILL while the runs are being logged (after the parent and per-judge runs, before the
    # ablations): the parent would stay RUNNING forever and the rerun would add a second parent.
    import subprocess

    from mlflow.tracking import MlflowClient

    from tracking.experiment import log_experiment

    cfg, config_path, base = experiment_run["cfg"], experiment_run["config_path"], experiment_run["base"]
    script = tmp_path / "die_while_logging.py"
    script.write_text(
        "import os, signal, sys\n"
        "import tracking.experiment as te\n"
        "from judgebias.config import load_config\n"
        "from judgebias.runstore import RunStore\n"
        "te._log_style = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "cfg = load_config(sys.argv[1])\n"
        "te.log_experiment(cfg, RunStore(cfg.run_path()), config_source=sys.argv[1])\n")
    died = subprocess.run([sys.executable, str(script), str(config_path)], cwd=base, capture_output=True,
                          text=True, timeout=300)
    assert died.returncode == -9, died.stderr
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment).experiment_id
    same = f"tags.`judgebias.config_hash` = '{cfg.config_hash()}'"
    (killed,) = client.search_runs([exp], filter_string=f"{same} and attributes.status = 'RUNNING'")
    children = client.search_runs([exp], filter_string=f"tags.`mlflow.parentRunId` = '{killed.info.run_id}'")
    assert {r.info.run_name for r in children} == {"judge:ta", "judge:tb"}

    cwd = os.getcwd()
    os.chdir(base)
    try:
        result = log_experiment(cfg, experiment_run["store"], config_source=str(config_path))
    finally:
        os.chdir(cwd)
    assert not client.search_runs([exp], filter_string=f"{same} and attributes.status = 'RUNNING'")
    # Ended and deleted (restorable) with its finished per-judge runs, not left beside the new one.
    assert client.get_run(killed.info.run_id).info.status == "KILLED"
    assert {client.get_run(r.info.run_id).info.lifecycle_stage for r in (killed, *children)} == {"deleted"}
    assert client.get_run(result["run_id"]).info.status == "FINISHED"


def test_sigkilled_run_takes_prefects_temporary_server_down(tiny_models, tmp_path):
    # SIGKILL runs no exit handler: Prefect's temporary server (230-260 MB) used to outlive the run.
    import signal
    import subprocess
    import threading

    import psutil

    data = tiny_config(tiny_models, tmp_path)
    data["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", str(config)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "Beginning subflow run" in line:
                started.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert started.wait(240), "".join(lines)
        servers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                   if "prefect.server" in " ".join(c.cmdline())]
        assert servers, "".join(lines)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _gone, alive = psutil.wait_procs(servers, timeout=30)
    assert not alive, [c.cmdline() for c in alive]
