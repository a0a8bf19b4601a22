"""Benchmark: an API judge at a provider's rate limit, at fixed and adaptive concurrency.

    python benchmarks/bench_api.py [--latency 0.5] [--rpm 1200] [--seconds 45]
                                   [--modes 1,4,16,64,adaptive,adaptive+headers] [--out FILE]

Each mode gets a fresh local OpenAI-compatible endpoint (``judgebias.bench.openai_stub``, its own
process, so the server does not share this process's interpreter): every answer after ``--latency``
seconds, a 429 with Retry-After past ``--rpm`` requests a minute (a token bucket, one second of
burst; refused requests do not count against it), and with ``adaptive+headers`` OpenAI's
``x-ratelimit-*`` headers on every answer. The client is the project's own
(``OpenAICompatBackend`` behind the call cache, one batch of all items) after one warm-up call.
Each mode judges about ``--seconds`` worth of distinct prompts at the rate it can reach (the
limit, or concurrency / latency below it), then checks that every item has one answer, that the
server answered no prompt twice, and that a rerun reads every item from the cache with no request.
Prints and writes calls/s beside the server's limit, 429s and the most requests in flight, with
the date, the machine and its load. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _start(latency: float, rpm: float, headers: bool, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    argv = [sys.executable, "-m", "judgebias.bench.openai_stub", "--port", str(port),
            "--latency", str(latency), "--rpm", str(rpm), *(["--rate-headers"] if headers else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            _get(f"{root}/health")
            return proc, root
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the stub endpoint exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("the stub endpoint did not start in 60 s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def run_mode(mode: str, *, latency: float, rpm: float, seconds: float, tmp: Path) -> dict:
    from judgebias.backends.call_cache import CachedBackend, ResponseCache
    from judgebias.backends.openai_compat import OpenAICompatBackend
    from judgebias.backends.protocol import Prompt

    headers = mode.endswith("+headers")
    concurrency = mode.removesuffix("+headers")
    limit = rpm / 60.0
    reach = limit if concurrency == "adaptive" else min(limit, int(concurrency) / latency)
    n = max(20, round(reach * seconds))
    proc, root = _start(latency, rpm, headers, tmp / f"stub-{mode}.log")
    try:
        backend = OpenAICompatBackend("stub", f"{root}/v1", concurrency=concurrency, max_tries=8,
                                      timeout_s=60)
        options = ["A", "B"]
        backend.score_options([Prompt.chat(("user", "warm-up"))], options)
        time.sleep(1.0)  # the warm-up's token back in the bucket
        before = _get(f"{root}/stats")
        prompts = [Prompt.chat(("user", f"{mode} item {i}: which response is better, A or B?"))
                   for i in range(n)]
        cache = ResponseCache(tmp / f"cache-{mode}")
        runner = CachedBackend(backend, cache)
        start = time.perf_counter()
        out = runner.score_options(prompts, options)
        wall = time.perf_counter() - start
        after = _get(f"{root}/stats")
        rerun = CachedBackend(OpenAICompatBackend("stub", f"{root}/v1", concurrency=1), ResponseCache(
            tmp / f"cache-{mode}"))
        again = rerun.score_options(prompts, options)
        after_rerun = _get(f"{root}/stats")
    finally:
        _stop(proc)
    answered = sum(1 for s in out if s.error is None)
    summary = backend.request_summary()
    return {
        "mode": mode, "items": n, "seconds": round(wall, 2), "calls_per_s": round(n / wall, 2),
        "server_limit_per_s": round(limit, 2), "share_of_limit": round(n / wall / limit, 3),
        "lost": n - answered,
        "answered_twice": after["answered_twice"],
        "server_accepted": after["accepted"] - before["accepted"],
        "refused_429": after["refused_429"] - before["refused_429"],
        "peak_in_flight_client": summary["peak_in_flight"],
        "final_adaptive_limit": summary.get("final_limit"),
        "rerun_from_cache": rerun.hits, "rerun_requests": after_rerun["accepted"] - after["accepted"],
        "rerun_equal": again == out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--rpm", type=float, default=1200)
    ap.add_argument("--seconds", type=float, default=45)
    ap.add_argument("--modes", default="1,4,16,64,adaptive,adaptive+headers")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "api_concurrency.json")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_api_") as tmp:
        for mode in args.modes.split(","):
            row = run_mode(mode.strip(), latency=args.latency, rpm=args.rpm, seconds=args.seconds,
                           tmp=Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}",
              "load_avg_1m_before_after": [round(load_before[0], 1), round(os.getloadavg()[0], 1)],
              "server": {"latency_s": args.latency, "rpm": args.rpm, "burst_s": 1.0},
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'mode':<18} {'items':>6} {'calls/s':>8} {'of limit':>9} {'429s':>6} {'in flight':>9} "
          f"{'lost':>5} {'twice':>6}")
    for r in rows:
        print(f"{r['mode']:<18} {r['items']:>6} {r['calls_per_s']:>8.2f} {r['share_of_limit']:>9.1%} "
              f"{r['refused_429']:>6} {r['peak_in_flight_client']:>9} {r['lost']:>5} "
              f"{r['answered_twice']:>6}")
    print(f"wrote {args.out}; load {result['load_avg_1m_before_after']}")


if __name__ == "__main__":
    main()
