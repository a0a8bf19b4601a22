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
