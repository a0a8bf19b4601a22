"""Commands started together on a fresh MLflow SQLite file (two ``judgebias run`` at once): MLflow
creates the tables and runs its migrations on first use, and the second process failed there.
Each process here opens the store the way every command does (``TrackingSettings.apply``, which
``mlflow_run`` calls), all released at the same moment."""

from __future__ import annotations

import subprocess
import sys
import time

OPEN_AND_LOG = r'''
import sys, time
from pathlib import Path
from judgebias.tracking.mlflow_run import mlflow_run
from judgebias.tracking.settings import TrackingSettings
import mlflow
go = Path(sys.argv[1])
Path(sys.argv[3]).touch()  # imported: only the store's opening is left to race
while not go.exists():
    time.sleep(0.005)
with mlflow_run("race", settings=TrackingSettings(tracking_uri=sys.argv[2], experiment_name="race")):
    mlflow.log_metric("x", 1.0)
'''


def test_commands_started_together_on_a_fresh_sqlite_store_all_log(tmp_path):
    from mlflow import MlflowClient

    for trial in range(3):  # unserialised, 2 of 2 trials of 3 processes had a failure
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        ready = [tmp_path / f"ready-{trial}-{i}" for i in range(3)]
        procs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_LOG, str(folder / "go"), uri, str(flag)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for flag in ready]
        deadline = time.monotonic() + 300
        while not all(flag.exists() for flag in ready):  # every process has imported what it needs
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll()]
            assert time.monotonic() < deadline, "the racing processes did not import in 300 s"
            time.sleep(0.05)
        (folder / "go").touch()
        outs = [p.communicate(timeout=300) for p in procs]
        failed = [err.strip().splitlines()[-1:] for (_, err), p in zip(outs, procs, strict=True)
                  if p.returncode]
        assert not failed, (trial, failed)
        client = MlflowClient(tracking_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
        assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
        # No lock file is left beside the database.
        assert sorted(p.name for p in folder.iterdir()) == ["go", "mlflow.db"]
