"""Prefect's temporary server is put under the guard (flows/runtime/server_guard.py) only where
Prefect would start one: with ``PREFECT_API_URL`` set (in the environment or the active profile) the
run reports to that server, nothing is guarded and Prefect's server code is not imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CODE = ("import json, sys\n"
        "from judgebias.flows.runtime.server_guard import guard_temporary_server\n"
        "guarded = guard_temporary_server()\n"
        "print(json.dumps([guarded, 'prefect.server.api.server' in sys.modules]))\n")
API = "http://127.0.0.1:9/api"  # never asked: nothing is started or called


# Without an API URL the guard is installed: test_flows_faults.py finds it between a run and its
# temporary server (a case here would import Prefect's server code again: some 19 s on 2 loaded cores).
@pytest.mark.parametrize("where", ["environment", "profile"])
def test_no_guard_and_no_server_code_with_an_api_url(where, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL" and k != "PREFECT_PROFILES_PATH"}
    env["PREFECT_HOME"] = str(tmp_path)  # its profiles.toml: the one below or none
    if where == "environment":  # else the profile
        env["PREFECT_API_URL"] = API
    else:
        (tmp_path / "profiles.toml").write_text(f'active = "t"\n\n[profiles.t]\nPREFECT_API_URL = "{API}"\n')
    done = subprocess.run([sys.executable, "-c", CODE], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False]


def test_run_logs_are_flushed_once_as_prefect_stops_a_live_server(monkeypatch):
    # Prefect's own flush runs from logging's exit handler, after the server is stopped, and waited
    # out its 5 s timeout there: the guard flushes as Prefect asks the server to stop, once, and
    # not for a server that is gone already (that flush would wait the same 5 s).
    from judgebias.flows.runtime import server_guard

    flushed = []
    monkeypatch.setattr(server_guard, "flush_run_log_worker", lambda: flushed.append(True))
    live = server_guard._Guard([sys.executable, "-c", "import time; time.sleep(60)"])
    live.terminate()
    live.kill()  # Prefect's stop after its wait timed out: no second flush
    live.wait(30)
    assert flushed == [True] and live.stop_requested
    gone = server_guard._Guard([sys.executable, "-c", "pass"])
    gone.wait(30)
    gone.terminate()
    assert flushed == [True] and gone.stop_requested


def test_the_flush_waits_only_outside_an_event_loop(monkeypatch):
    # Inside a loop Prefect's drain returns a coroutine instead of waiting: it is not asked there.
    import asyncio

    from prefect.logging.handlers import APILogWorker

    from judgebias.flows.runtime.server_guard import flush_run_log_worker

    asked = []
    monkeypatch.setattr(APILogWorker, "drain_all",
                        classmethod(lambda cls, timeout=None: asked.append(timeout)))

    async def inside() -> None:
        flush_run_log_worker()

    asyncio.run(inside())
    assert asked == []
    flush_run_log_worker()
    assert asked == [5.0]  # Prefect's own bound on its flush at exit
