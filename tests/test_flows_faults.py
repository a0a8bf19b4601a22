"""Faults injected into the experiment flow: SIGTERM as a scheduler sends it, SIGKILL during MLflow
logging and during a run; each must leave nothing running and nothing half-recorded."""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from conftest import tiny_config
from servers import migrated_prefect_home

pytestmark = pytest.mark.slow


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
    env["PREFECT_HOME"] = str(migrated_prefect_home(tmp_path / "prefect-home"))
    # --verbose: Prefect's own lines ("Beginning subflow run", "Stopping temporary server") are what
    # this test waits for and checks; by default they are kept off the console.
    proc = subprocess.Popen([sys.executable, "-m", "judgebias", "run", str(config), "--verbose"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
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

    from judgebias.tracking.experiment import log_experiment

    cfg, config_path, base = experiment_run["cfg"], experiment_run["config_path"], experiment_run["base"]
    script = tmp_path / "die_while_logging.py"
    script.write_text(
        "import os, signal, sys\n"
        "import judgebias.tracking.experiment as te\n"
        "from judgebias.config.experiment import load_config\n"
        "from judgebias.runs.store import RunStore\n"
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

    import psutil

    proc, lines, started, _reader = _run_in_background(tiny_models, tmp_path)
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


@pytest.mark.parametrize("target", ["guard", "server", "ctrl-c"])
def test_a_killed_prefect_server_or_a_ctrl_c_ends_the_run_and_leaves_no_process(
        tiny_models, tmp_path, target):
    # guard, server: the child SIGKILLed, not the run: the process Prefect started as its temporary
    # server (the guard) or the uvicorn server the guard runs. The run used to wait on the dead API
    # for over ten minutes (the client retries each call); it now ends at once, in one line that
    # says what happened and how to resume. ctrl-c: a Ctrl-C at the terminal goes to the whole
    # foreground process group; the server runs in a session of its own (its guard), so the run can
    # still report its stop to it, and the run's exit stops it. Nothing is left in any case.
    import signal

    import psutil

    proc, lines, started, reader = _run_in_background(tiny_models, tmp_path, own_group=target == "ctrl-c")
    try:
        assert started.wait(600), "".join(lines)
        tree = psutil.Process(proc.pid).children(recursive=True)
        guard = [c for c in tree if "judgebias.flows.runtime.server_guard" in " ".join(c.cmdline())]
        server = [c for c in tree if c not in guard and "prefect.server" in " ".join(c.cmdline())]
        assert len(guard) == 1 and len(server) == 1, [c.cmdline() for c in tree]
        if target == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            (guard if target == "guard" else server)[0].send_signal(signal.SIGKILL)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    _gone, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, [c.cmdline() for c in alive]
    reader.join(30)  # the last lines, read once the run has ended
    out = "".join(lines)
    if target == "ctrl-c":
        assert code == 130, out[-3000:]  # docs/pipeline.md: 130 for Ctrl-C
        return
    assert code == 2, out[-3000:]
    # One error line (a log line of another thread may still follow it).
    (last,) = [line for line in out.splitlines() if line.startswith("error:")]
    assert last.startswith("error: Prefect's temporary server ended (exit code "), out[-3000:]
    assert f"the stages already finished are kept in {tmp_path}" in last
    assert "Run the same command to resume: " in last and " run " in last


def _run_in_background(tiny_models, tmp_path, own_group: bool = False):
    """``judgebias run`` on the tiny config without ablations, against Prefect's temporary server,
    its output collected by a thread: the process, its lines so far, an event set once its first
    subflow has begun, and the reading thread. ``own_group``: the run leads a process group of its
    own, as a command typed at a terminal does."""
    import subprocess
    import threading

    data = tiny_config(tiny_models, tmp_path)
    data["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(migrated_prefect_home(tmp_path / "prefect-home"))
    proc = subprocess.Popen([sys.executable, "-m", "judgebias", "run", str(config), "--verbose"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=own_group)
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "Beginning subflow run" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return proc, lines, started, reader
