"""Benchmark: log the bundled PandaLM judgments as MLflow traces, then log them again.

    python benchmarks/bench_traces.py [--rows 2000] [--uri http://127.0.0.1:5000]

Without ``--uri`` it starts its own ``mlflow server`` (one worker, SQLite, job execution off) on a
free 127.0.0.1 port and stops it by PID at the end. Prints traces/s of the first logging (every
trace with its judge and human feedback, checked on the server afterwards) and of the rerun
(everything already there: one search, nothing logged), the time ``import mlflow`` takes to read
them back, and the machine's load. Measures, asserts
nothing. The PandaLM table has 1,878 rows; ``--rows`` above that logs all of them.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(tmp: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = (tmp / "mlflow.log").open("w")
    argv = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp / 'db.sqlite'}",
            "--artifacts-destination", str(tmp / "artifacts")]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2).close()
            return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    raise SystemExit("mlflow server did not start: " + (tmp / "mlflow.log").read_text()[-2000:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--uri", default=None)
    args = ap.parse_args()
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    import mlflow
    from judgebias.tracking.judgment_traces import log_judgment_traces
    from judgebias.tracking.trace_import import read_judgment_traces

    from judgebias.io import read_table

    table, _ = read_table(ROOT / "judgebias" / "data" / "pandalm_testset.parquet")
    table = table.head(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        proc, uri = (None, args.uri) if args.uri else _server(Path(tmp))
        try:
            mlflow.set_tracking_uri(uri)
            name = f"bench-traces-{uuid.uuid4().hex[:8]}"
            mlflow.set_experiment(name)
            for label in ("first logging", "rerun"):
                start = time.perf_counter()
                counts = log_judgment_traces(table, self_map={"pandalm-7b": ["llama-7b"]})
                seconds = time.perf_counter() - start
                rate = f"{counts['logged'] / seconds:.1f} traces/s" if counts["logged"] else "nothing logged"
                print(f"{label}: {len(table)} rows in {seconds:.1f} s ({rate}); {counts}")
            start = time.perf_counter()
            back, _ = read_judgment_traces(name)
            seconds = time.perf_counter() - start
            print(f"import mlflow: {len(back)} rows read back in {seconds:.1f} s "
                  f"({len(back) / seconds:.1f} rows/s)")
            print(f"load average (1, 5, 15 min): {os.getloadavg()}; CPUs: {os.cpu_count()}")
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


if __name__ == "__main__":
    main()
