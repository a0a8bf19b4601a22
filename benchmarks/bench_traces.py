"""Benchmark: log the bundled PandaLM judgments as MLflow traces, then log them again.

    python benchmarks/bench_traces.py [--rows 2000] [--uri URI] [--routes server,sqlite-bulk]

Without ``--uri`` it starts its own ``mlflow server`` (one worker, SQLite, job execution off) on a
free 127.0.0.1 port and stops it by PID at the end. Prints traces/s of the first logging (every
trace with its judge and human feedback, checked on the server afterwards) and of the rerun
(everything already there: one search, nothing logged), the time ``import mlflow`` takes to read
them back, and the machine's load. Measures, asserts
nothing. The PandaLM table has 1,878 rows; ``--rows`` above that logs all of them.

``--routes``: the same table logged by each route one after the other, into a fresh experiment (a
fresh SQLite file for the database routes), and a table of them side by side at the end: ``server``
(REST, as shipped), ``sqlite-per-trace`` (a database tracking URI written through the store's public
``start_trace``), ``sqlite-bulk`` (``judgebias.tracking.trace_bulk``: one INSERT per table and chunk, as
shipped for database URIs) and ``server-db`` (the started server's own database as the tracking URI,
bulk, then read back through the server). ``--threads``: trace-info requests in flight (default
``judgebias.tracking.judgment_traces.THREADS``; MLflow's server refuses more than its connection pool, 15).
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
SELF = {"pandalm-7b": ["llama-7b"]}  # PandaLM-7B is a LLaMA-7B fine-tune
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


ROUTES = {
    # name: (where it writes, where it reads back, bulk writes)
    "server": ("server", "server", True),  # REST: one request per trace whatever the client does
    "sqlite-per-trace": ("sqlite", "sqlite", False),  # the store's public start_trace, one trace at a time
    "sqlite-bulk": ("sqlite", "sqlite", True),  # judgebias.tracking.trace_bulk: an INSERT per table and chunk
    # The server's own database written directly (bulk), then read back through the server's REST API.
    "server-db": ("server-db", "server", True),
}


def _measure(label: str, uri: str, table, threads: int, bulk: bool, read_uri: str | None = None) -> dict:
    import mlflow

    from judgebias.tracking.judgment_traces import log_judgment_traces
    from judgebias.tracking.trace_import import read_judgment_traces

    mlflow.set_tracking_uri(uri)
    name = f"bench-traces-{uuid.uuid4().hex[:8]}"
    mlflow.set_experiment(name)
    row = {"route": label, "load": os.getloadavg()[0]}
    for step in ("first logging", "rerun"):
        start = time.perf_counter()
        counts = log_judgment_traces(table, self_map=SELF, threads=threads, bulk=bulk)
        seconds = time.perf_counter() - start
        rate = f"{counts['logged'] / seconds:.1f} traces/s" if counts["logged"] else "nothing logged"
        print(f"[{label}] {step}: {len(table)} rows in {seconds:.1f} s ({rate}); {counts}", flush=True)
        row[step] = (seconds, counts["logged"], counts["missing"])
    if read_uri:
        mlflow.set_tracking_uri(read_uri)
    start = time.perf_counter()
    back, _ = read_judgment_traces(name)
    row["read"] = (time.perf_counter() - start, len(back))
    print(f"[{label}] import mlflow: {len(back)} rows read back in {row['read'][0]:.1f} s", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--uri", default=None, help="a running tracking server (default: start one)")
    ap.add_argument("--threads", type=int, default=None, help="trace-info requests in flight")
    ap.add_argument("--routes", default=",".join(ROUTES), help=f"comma-separated, of {', '.join(ROUTES)}")
    args = ap.parse_args()
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    from judgebias.tables.files import read_table
    from judgebias.tracking.judgment_traces import THREADS

    routes = args.routes.split(",")
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise SystemExit(f"unknown route(s) {unknown}; use {', '.join(ROUTES)}")
    table, _ = read_table(ROOT / "judgebias" / "data" / "pandalm_testset.parquet")
    table = table.head(args.rows)
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, server_uri = None, args.uri
        try:
            for label in routes:
                where, read, bulk = ROUTES[label]
                if where == "server-db" and args.uri is not None:
                    raise SystemExit("server-db writes the database of the server it starts: no --uri")
                if "server" in (where, read) and server_uri is None:
                    proc, server_uri = _server(Path(tmp))
                uri = {"server": server_uri, "server-db": f"sqlite:///{Path(tmp) / 'db.sqlite'}",
                       "sqlite": f"sqlite:///{Path(tmp) / (label + '.db')}"}[where]  # a fresh file per route
                read_uri = server_uri if read == "server" and where != "server" else None
                summary.append(_measure(label, uri, table, args.threads or THREADS, bulk, read_uri))
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    print(f"load average (1, 5, 15 min): {os.getloadavg()}; CPUs: {os.cpu_count()}")
    print(f"\n| {len(table)} rows | first logging | traces/s | rerun (nothing logged) | import mlflow "
          "| load (1 min) |")
    print("|---|---|---|---|---|---|")
    for r in summary:
        (s1, n1, miss), (s2, _, _), (s3, n3) = r["first logging"], r["rerun"], r["read"]
        lost = f" ({miss} missing)" if miss else ""
        print(f"| {r['route']} | {s1:.1f} s | {n1 / s1:.1f}{lost} | {s2:.1f} s "
              f"| {s3:.1f} s ({n3} rows) | {r['load']:.1f} |")


if __name__ == "__main__":
    main()
