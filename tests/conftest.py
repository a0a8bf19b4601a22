"""Session-wide defaults for the test suite: offline, quiet, and caches kept out of $HOME."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

# Nothing in the tests may reach a hub or phone home.
for key, value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "TOKENIZERS_PARALLELISM": "false",
    # A stopped MLflow server should fail a test in seconds, not after minutes of client retries.
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}.items():
    os.environ.setdefault(key, value)

# Each xdist worker (README's `-n 2`) gets its share of the cores for torch's and OpenMP's threads,
# and so do the commands it starts: two workers each spinning two OpenMP threads on 2 cores spent
# most of their time waiting on each other (the model-heavy files: 143 s at the default, 54 s at one
# thread each, 2026-11-29). Set before torch loads: OpenMP reads it once.
# A thread count set in the environment beforehand is kept (THREAD_SHARE stays None). The cores are
# counted here rather than by judgebias.coverage.runner.usable_cores: importing it loads numpy,
# whose BLAS reads OMP_NUM_THREADS once, before it is set.
THREAD_SHARE: int | None = None
if os.environ.get("PYTEST_XDIST_WORKER_COUNT") and "OMP_NUM_THREADS" not in os.environ:
    THREAD_SHARE = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(THREAD_SHARE)
    os.environ.setdefault("MKL_NUM_THREADS", str(THREAD_SHARE))
    if "torch" in sys.modules:  # loaded already by a plugin: tell it too
        sys.modules["torch"].set_num_threads(THREAD_SHARE)

# The dequantized packaged models are reused across test runs (first load 15-45 s, then ~1 s).
os.environ.setdefault("JUDGEBIAS_MODEL_CACHE", str(ROOT / ".judgebias" / "models"))


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The suite runs on pytest-xdist workers (`-n`, README's test command). Each worker builds its own
# session fixtures, so the tests that share a costly one are sent to one worker (`--dist loadgroup`):
# the tiny experiment's run folders are built once, and the annotation tests meet one Label Studio.
# Cheap session fixtures (an MLflow server, Prefect's harness) are started by each worker instead.
# One group holds both: the nightly sync needs the tiny experiment and Label Studio, and two groups
# started a second Label Studio for it (31 s). The tests of a module sharing a module-scoped fixture
# (a probe run, a vLLM server, a loaded model) go to one worker too, as the module's group.
WORKER_GROUPS = (("experiment-and-labelstudio", {"experiment_run", "probes_run", "labelstudio_server"}),)


def worker_group(item) -> str | None:
    """The xdist group a test belongs to, or None where any worker may take it."""
    needs = set(getattr(item, "fixturenames", ()))
    group = next((name for name, fixtures in WORKER_GROUPS if fixtures & needs), None)
    if group:
        return group
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    if any(d.scope in ("module", "class") for chain in defs for d in chain):
        return item.nodeid.split("::")[0]
    return None


# The longest tests first, so that both workers end together on short ones. xdist sends the groups
# first, the largest first; the tests outside any group followed in file order, which put the slowest
# tests near the end of the alphabet (vLLM's, the work pool's) last: one worker then ran them alone,
# the other idle (the last 60 s of a 567 s suite at 25-50 % of the two cores). Outside the groups the
# order is free: a test there has no module- or class-scoped fixture (worker_group) whose setup a move
# could repeat. tests/durations.json holds the seconds of each test that took 1 s or more, rewritten by
# `pytest -n 2 --dist loadgroup --record-durations tests/durations.json` when the suite changes much; a
# test not in it counts as short.
DURATIONS = Path(__file__).resolve().parent / "durations.json"
RECORDED_FROM = 1.0  # seconds: shorter tests are left out of the file


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup, call and teardown) to PATH as JSON, for the "
                          "order the suite runs in (tests/durations.json)")


def pytest_configure(config):
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(DurationRecorder(Path(path)), "record-durations")


# tryfirst: xdist's worker reads the groups in its own hook (appending them to the test ids); a marker
# added after it would be ignored without a word (tests/test_suite_workers.py).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    grouped = set()
    for item in items:
        group = worker_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            grouped.add(item.nodeid)
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    items[:] = longest_first(items, grouped, recorded)


def longest_first(items: list, grouped: set[str], recorded: dict[str, float]) -> list:
    """The grouped tests in their file order (a module's tests stay together), then the others, the
    longest recorded first; ties and unrecorded tests keep their file order."""
    return sorted(items, key=lambda item: (0, 0.0) if item.nodeid in grouped
                  else (1, -recorded.get(item.nodeid, 0.0)))


class DurationRecorder:
    """Registered only with --record-durations: sums each test's phases, writes them at the end."""

    def __init__(self, path: Path) -> None:
        self.path, self.seconds = path, {}

    def pytest_runtest_logreport(self, report):
        # xdist names a grouped test `<nodeid>@<group>` in its reports; the file keeps the test's own id
        nodeid, _, group = report.nodeid.rpartition("@")
        if not nodeid or not (group.endswith(".py") or group in dict(WORKER_GROUPS)):
            nodeid = report.nodeid
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self):
        kept = {nodeid: round(seconds, 1) for nodeid, seconds in sorted(self.seconds.items())
                if seconds >= RECORDED_FROM}
        self.path.write_text(json.dumps(kept, indent=1) + "\n")


@pytest.fixture(autouse=True)
def _isolated_call_cache(tmp_path, monkeypatch):
    # Each test starts with an empty model-call cache unless it sets its own.
    monkeypatch.setenv("JUDGEBIAS_CACHE_DIR", str(tmp_path / "call-cache"))


@pytest.fixture(scope="session")
def labelstudio_server():
    """One real Label Studio server per test session (first start migrates a database: 25-90 s).

    Free port, temp data dir, random admin credentials with a legacy API token (``.settings`` gives
    url + api_key). A test may stop it; ``.start()`` brings it back on the same port and data.
    Skips when label-studio is not installed (scripts/labelstudio_install.sh)."""
    import shutil

    from judgebias.annotation.server import find_label_studio, start_temporary

    if find_label_studio() is None:
        reason = "label-studio not installed (scripts/labelstudio_install.sh or LABEL_STUDIO_VENV)"
        if os.environ.get("CI"):  # CI installs it: a missing server there is a failure, not a skip
            pytest.fail(reason)
        pytest.skip(reason)
    server = start_temporary()
    yield server
    server.stop()
    shutil.rmtree(server.data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """One real `mlflow server` (SQLite, 1 worker) per test session: its URI. Tests share it by
    experiment name, so each names its own; a test that stops or breaks the server starts its own
    (test_mlflow_faults.py)."""
    from servers import mlflow_server as server

    with server(tmp_path_factory.mktemp("mlflow_server")) as uri:
        yield uri


# --- the experiment flow on two tiny random-weights models (test_flows*.py) -----------------------
@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    # A fresh database migrates at first start: past 120 s on a loaded 2-core machine (seen once).
    with prefect_test_harness(server_startup_timeout=300):
        yield


# A real `transformers serve` over SmolLM2-135M-Instruct, shared by the tests of API judges.
@pytest.fixture(scope="session")
def smollm2_folder() -> str:
    from judgebias.backends import loading as models
    try:
        _, folder = models.local_folder("smollm2-135m-instruct")
    except models.ModelNotFound as exc:
        if os.environ.get("CI"):  # CI installs the packaged model: missing there is a broken install
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return folder


@pytest.fixture(scope="session")
def smollm2_fp32():
    """The in-process engine on packaged SmolLM2-135M-Instruct in fp32, the exact reference that the
    vLLM tests (in-process and server) compare with: loaded once per session."""
    from judgebias.backends.local import LocalBackend

    return LocalBackend("smollm2-135m-instruct", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def transformers_server(smollm2_folder, tmp_path_factory):
    from servers import running

    exe = shutil.which("transformers") or str(Path(sys.executable).with_name("transformers"))
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    argv = [exe, "serve", smollm2_folder, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with running(argv, health_url=f"http://127.0.0.1:{port}/health", log=log_path, what="transformers serve",
                 env=env) as proc:
        yield {"base_url": f"http://127.0.0.1:{port}/v1", "model": smollm2_folder, "pid": proc.pid}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    from judgebias.backends import loading as models
    from judgebias.backends.random_weights import random_model

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
        import judgebias.engine.attention  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def experiment_run(prefect_harness, tiny_models, tmp_path_factory):
    """One experiment of the tiny config, shared by the flow tests (about a minute on 2 cores).

    Its call cache (``cache_dir``) starts empty, so its stages measure real model calls; the other
    runs of the tiny models (the console's, the full disk's, the probes') ask it for their calls
    afterwards and compute only what this run did not."""
    import yaml

    from judgebias.backends.builder import freeze_before_first_model
    from judgebias.config.experiment import load_config
    from judgebias.flows.experiment import experiment
    from judgebias.runs.store import RunStore

    base = tmp_path_factory.mktemp("experiment")
    config_path = base / "tiny.yaml"
    config_path.write_text(yaml.safe_dump(tiny_config(tiny_models, base)))
    cfg = load_config(config_path)
    cwd = os.getcwd()
    os.chdir(base)  # MLflow's sqlite store puts artifacts in ./mlruns
    # As `judgebias run` calls it: the config parsed once, before Prefect starts, and handed down; what
    # the worker holds frozen at the first model load (the session's models stay loaded anyway), so
    # the stages' garbage collections here and in this worker's later flows walk only what they make.
    freeze_before_first_model()
    with mock.patch("judgebias.config.experiment.load_config", wraps=load_config) as parses:
        try:
            result = experiment(str(config_path), cfg=cfg)
        finally:
            os.chdir(cwd)
    return {
        "result": result,
        "cfg": cfg,
        "config_parses": parses.call_count,
        "store": RunStore(cfg.run_path()),
        "config_path": config_path,
        "base": base,
        "cache_dir": cfg.cache_dir,
    }


POINTWISE_PROBES = ["rubric_reversed", "score_ids_letters", "reference_score", "rubric_permuted",
                    "scale_1_10"]


@pytest.fixture(scope="session")
def probes_run(prefect_harness, tiny_models, experiment_run, tmp_path_factory):
    """One run folder for the probe tests (test_flows_probes.py) and the pointwise tests
    (test_flows_pointwise.py): the main stages once on 3 instructions, then the CALM perturbations,
    self-recognition, a pointwise judge and the pointwise probes on them, each as its own flow."""
    import yaml

    from judgebias.config.experiment import load_config
    from judgebias.flows.experiment import (
        perturbation_probe,
        pointwise_judging,
        pointwise_probe,
        self_recognition_probe,
    )
    from judgebias.runs.store import RunStore

    base = tmp_path_factory.mktemp("probes")
    doc = tiny_config(tiny_models, base)
    doc["dataset"]["sample"] = 3
    doc["analyses"] = {"perplexity": False, "attention": False}
    doc["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    # The pointwise judge runs the model of pairwise judge "ta": pointwise_pairwise_consistency.
    doc["judges"].append({"name": "pa", "mode": "pointwise", "model": tiny_models["tiny-a"],
                          "template": "rubric-5-direct", "scale": [1, 5], "batch_size": 4})
    doc["self_map"]["pa"] = "ta"
    doc["cache_dir"] = experiment_run["cache_dir"]  # the main stages' calls are mostly made already
    doc["probes"] = {"perturbations": {"names": ["authority", "sentiment_hostile"], "sample": 2},
                     "self_recognition": {"sample": 2},
                     "pointwise": {"names": POINTWISE_PROBES, "sample": 3}}
    path = base / "probes.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    cwd = os.getcwd()
    os.chdir(base)
    try:
        perturbed = perturbation_probe(cfg)
        recognised = self_recognition_probe(cfg)
        figures = pointwise_judging(cfg)
        probed = pointwise_probe(cfg)
    finally:
        os.chdir(cwd)
    return {"cfg": cfg, "store": RunStore(cfg.run_path()), "perturbed": perturbed, "recognised": recognised,
            "figures": figures, "probed": probed, "base": base}


# --- a Label Studio world for the annotation tests against the real server ------------------------
def annotator(sdk, username: str) -> int:
    """The id of the Label Studio user ``username``, created on first use (modules share the server)."""
    for user in sdk.users.list():
        if user.username == username:
            return int(user.id)
    return int(sdk.users.create(username=username, email=f"{username}@judgebias.local", password="x" * 16).id)


@pytest.fixture(scope="module")
def ls_server(labelstudio_server):
    return labelstudio_server.start()  # a no-op when it is already running


@pytest.fixture(scope="module")
def world(ls_server, tmp_path_factory):
    """Experiment folder with the scenario table, the client, and the two annotators' user ids."""
    from test_annotation_selection import scenario_table

    from judgebias.annotation.labelstudio import LabelStudioClient
    from judgebias.tables.files import write_table

    root = tmp_path_factory.mktemp("experiment")
    table_path = write_table(scenario_table(), root / "judgments.jsonl")
    client = LabelStudioClient(ls_server.settings)
    sdk = client._ls
    return {
        "root": root,
        "table": table_path,
        "client": client,
        "sdk": sdk,
        "users": {"u1": sdk.users.whoami().id, "u2": annotator(sdk, "annotator2")},
    }
