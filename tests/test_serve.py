"""`judgebias serve` against a real Prefect server: deployments registered with their cron schedules,
and the server's scheduler creates scheduled runs for them (SQLAlchemy 2.1 silently breaks that)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from servers import running, stop

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.server]


def _wait(
    predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None
):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise AssertionError(f"{what}: process exited with {proc.returncode}\n{tail}")
        try:
            value = predicate()
            if value:
                return value
        except (httpx.HTTPError, KeyError, IndexError) as exc:
            last_error = exc
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what} ({last_error})\n{tail}")


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        "PREFECT_UI_ENABLED": "false",
    }
    env.pop("PREFECT_API_URL", None)
    api = f"http://127.0.0.1:{port}/api"
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with running(argv, health_url=f"{api}/health", log=home / "server.log", what="Prefect server", env=env,
                 grace=30):
        yield {"api": api, "home": home}


def test_serve_registers_cron_deployments_and_server_schedules_runs(prefect_server, tmp_path):
    api = prefect_server["api"]
    env = {
        **os.environ,
        "PREFECT_API_URL": api,
        "PREFECT_HOME": str(prefect_server["home"]),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    log = tmp_path / "serve.log"
    config = ROOT / "configs" / "demo.yaml"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "judgebias",
                "serve",
                str(config),
                "--sync-cron",
                "0 2 * * *",
                "--experiment-cron",
                "0 3 * * 0",
            ],
            cwd=tmp_path,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def deployments():
            r = httpx.post(f"{api}/deployments/filter", json={}, timeout=5)
            r.raise_for_status()
            found = {d["name"]: d for d in r.json()}
            return found if {"judgebias-nightly-sync", "judgebias-weekly-experiment"} <= set(found) else None

        found = _wait(deployments, 90, "deployments registered by judgebias serve", proc, log)
        crons = {
            name: [s["schedule"]["cron"] for s in d["schedules"] if s.get("active", True)]
            for name, d in found.items()
        }
        assert crons["judgebias-nightly-sync"] == ["0 2 * * *"]
        assert crons["judgebias-weekly-experiment"] == ["0 3 * * 0"]
        assert found["judgebias-weekly-experiment"]["parameters"] == {"config_path": str(config)}

        def scheduled_runs():
            r = httpx.post(
                f"{api}/flow_runs/filter",
                timeout=5,
                json={
                    "deployments": {"id": {"any_": [d["id"] for d in found.values()]}},
                    "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
                },
            )
            r.raise_for_status()
            runs = r.json()
            per = {
                d_id: [x for x in runs if x["deployment_id"] == d_id]
                for d_id in (d["id"] for d in found.values())
            }
            return per if all(per.values()) else None

        per = _wait(scheduled_runs, 60, "scheduled flow runs created by the server's scheduler", proc, log)
        nightly = per[found["judgebias-nightly-sync"]["id"]]
        times = sorted(r["expected_start_time"] for r in nightly)
        # Cron "0 2 * * *" in UTC: every scheduled run starts at 02:00.
        assert all("T02:00:00" in t for t in times), times
    finally:
        stop(proc, 30)


def test_build_deployments_rejects_a_bad_cron():
    from judgebias.flows.serve import Schedule, build_deployments

    with pytest.raises(ValueError, match="sync_cron: '61 \\* \\* \\* \\*' is not a valid cron schedule"):
        build_deployments(str(ROOT / "configs" / "demo.yaml"), Schedule(sync_cron="61 * * * *"))
