"""Commands started together on a fresh MLflow SQLite file (two ``judgebias run`` at once): MLflow
creates the tables and runs its migrations on first use, and the second process failed there.
Each process here opens the store the way every command does (``TrackingSettings.apply``, which
``mlflow_run`` calls), all released at the same moment."""

from __future__ import annotations

import json
import subprocess
import sys

# One interpreter imports MLflow and judgebias once, then forks the racing processes: each trial's
# three are processes of their own that meet the fresh file together, as three commands do, without
# nine imports of MLflow (about 2 s of CPU each on 2 cores, most of this test's time when each was
# started anew).
RACE = r'''
import json, os, sys, time, traceback
from pathlib import Path
from judgebias.tracking.mlflow_run import mlflow_run
from judgebias.tracking.settings import TrackingSettings
import mlflow

def open_and_log(folder):
    while not (folder / "go").exists():
        time.sleep(0.005)
    settings = TrackingSettings(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}", experiment_name="race")
    with mlflow_run("race", settings=settings):
        mlflow.log_metric("x", 1.0)

codes = []
for folder in map(Path, sys.argv[1:]):
    pids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                open_and_log(folder)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        pids.append(pid)
    (folder / "go").touch()
    codes.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
print(json.dumps(codes))
'''


def test_commands_started_together_on_a_fresh_sqlite_store_all_log(tmp_path):
    from mlflow import MlflowClient

    folders = [tmp_path / f"t{trial}" for trial in range(3)]  # unserialised, 2 of 2 trials had a failure
    for folder in folders:
        folder.mkdir()
    proc = subprocess.run([sys.executable, "-c", RACE, *map(str, folders)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.splitlines()[-1])
    assert codes == [[0, 0, 0]] * 3, proc.stderr[-3000:]
    for folder in folders:
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        client = MlflowClient(tracking_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
        assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
        # No lock file is left beside the database.
        assert sorted(p.name for p in folder.iterdir()) == ["go", "mlflow.db"]
