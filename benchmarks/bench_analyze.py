"""Benchmark: validate + analyze a synthetic judgment table (default 1,000,000 rows).

    python benchmarks/bench_analyze.py [--rows 1000000] [--judges 5] [--seed 0]
    python benchmarks/bench_analyze.py --file-rows 1000000,5000000 [--compare REV] [--workdir DIR]
                                       [--format parquet|jsonl]

The first form builds the table in memory and times ``validate`` + ``analyze`` on it. The second
is what a user runs: the synthetic table is written once as a Parquet file (in ``--workdir``, reused
when it is already there; with ``--format jsonl`` also as JSONL, one ``json.dumps`` line per row as
``judgebias judge --out x.jsonl`` writes it), then a fresh Python process per measurement reads it with
``judgebias.tables.files.read_table`` (reading + validation), runs ``analyze`` and serialises the JSON, as
``judgebias analyze FILE`` does before its plots (the plots are drawn from the JSON: their cost does
not grow with the table). Each row gives the wall and CPU seconds of that process's work and its
peak resident memory (``VmHWM``: interpreter and imports included). ``--compare REV`` runs the
code of git revision REV (exported with ``git archive`` into a temporary folder) on the same file
right before this tree's code, and prints both rows and whether their JSON is identical (where
not, whether only numbers differ and by how much at most).

It measures, it asserts nothing. The synthetic data has a known structure (self bonus, verbosity
and perplexity effects, position bias, one verdict-only judge) so the printed figures can also be
eyeballed for sign.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from synthetic_judgments import synthetic_table, write_synthetic_jsonl, write_synthetic_parquet


def _run_file(path: str, json_out: str | None = None) -> dict:
    """The child's work: read + validate the file, analyze, serialise (what ``judgebias analyze``
    does before its plots). Runs in a fresh process so the peak memory is this work's alone."""
    for module in ("statsmodels.api", "statsmodels.stats.proportion", "scipy.stats"):
        importlib.import_module(module)
    from judgebias.reporting.analysis import analyze

    # What `judgebias analyze` reads with in the version of the code being measured: from 2026-11-27
    # judgebias.tables.for_analysis; on 2026-11-26 the flat table_for_analysis module (a table of more
    # than a few dozen rows without its response texts, their counts instead; no traces); before that
    # the flat io module's read_table. The old names stay: this runs against older checkouts.
    old = ("judgebias.table_for_analysis", "judgebias.io")  # rooms-rewrite: keep
    for name in ("judgebias.tables.for_analysis", *old):
        try:
            module = importlib.import_module(name)
            break
        except ImportError:
            continue
    read = getattr(module, "read_for_analysis", None) or module.read_table
    kwargs = {}
    if "response_features" in inspect.signature(read).parameters:
        from judgebias.metrics.frame import response_features

        kwargs["response_features"] = response_features
    t0, c0 = time.perf_counter(), time.process_time()
    table, excl = read(path, **kwargs)
    t1 = time.perf_counter()
    text = json.dumps(analyze(table, exclusions=excl), indent=2, allow_nan=False)
    t2, c2 = time.perf_counter(), time.process_time()
    digest = hashlib.sha256(text.encode()).hexdigest()
    if json_out:
        Path(json_out).write_text(text)
    return {"rows": len(table), "read_validate_s": t1 - t0, "analyze_s": t2 - t1, "wall_s": t2 - t0,
            "cpu_s": c2 - c0, "peak_mb": peak_rss_mb(), "json_sha256": digest}


def _export(rev: str, dest: Path) -> Path:
    """The project's code at git revision ``rev`` (judgebias only: the benchmark itself is this one)."""
    root = Path(__file__).resolve().parents[1]
    archive = dest / "code.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(root), "archive", rev, "judgebias"], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "code", filter="data")
    return dest / "code"


def _measure(path: Path, code: Path, json_out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, __file__, "--child", str(path), "--child-json", str(json_out)],
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(proc.stdout.splitlines()[-1])


def file_benchmark(rows: list[int], judges: int, seed: int, workdir: Path, compare: str | None,
                   fmt: str = "parquet") -> None:
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        versions = [(f"{compare} (before)", _export(compare, Path(tmp)))] if compare else []
        versions.append(("this tree", here))
        print(f"{'rows':>11} {'code':<22} {'wall s':>7} {'CPU s':>7} {'read+validate s':>16} "
              f"{'analyze s':>10} {'peak MB':>8}  JSON")
        for n in rows:
            path = workdir / f"synthetic_{n}_j{judges}_s{seed}.parquet"
            if not path.exists():
                workdir.mkdir(parents=True, exist_ok=True)
                write_synthetic_parquet(path, n, judges, seed)
            if fmt == "jsonl":
                parquet, path = path, path.with_suffix(".jsonl")
                if not path.exists():
                    write_synthetic_jsonl(parquet, path)
            digests, first = set(), None
            for i, (name, code) in enumerate(versions):
                out = Path(tmp) / f"analysis_{i}.json"
                m = _measure(path, code, out)
                if "error" in m:
                    print(f"{n:>11,} {name:<22} failed: {m['error'].strip().splitlines()[-1]}")
                    continue
                digests.add(m["json_sha256"])
                same = ""
                if len(digests) > 1:  # how far apart: the structure, and the largest relative gap
                    gap = json_gap(json.loads(first.read_text()), json.loads(out.read_text()))
                    same = " DIFFERS" + ("" if gap is None else f" (numbers only; largest relative gap "
                                                                f"{gap:.1e})")
                first = first or out
                print(f"{m['rows']:>11,} {name:<22} {m['wall_s']:7.1f} {m['cpu_s']:7.1f} "
                      f"{m['read_validate_s']:16.1f} {m['analyze_s']:10.1f} {m['peak_mb']:8.0f}  "
                      f"{m['json_sha256'][:12]}{same}", flush=True)
        print(f"file: {workdir}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def json_gap(a, b) -> float | None:
    """The largest relative difference between the numbers of two JSON documents of the same shape
    (same keys, lengths, texts and booleans); None where the shapes differ."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return 0.0 if a == b and type(a) is type(b) else None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return None
        gaps = [json_gap(a[k], b[k]) for k in a]
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        gaps = [json_gap(x, y) for x, y in zip(a, b, strict=True)]
    else:
        return None
    return None if None in gaps else max(gaps, default=0.0)


def _proc_status_mb(field: str) -> float | None:
    """``field`` (VmHWM, VmRSS) of /proc/self/status in MiB; None where there is none (not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (since the last ``reset_peak`` on Linux)."""
    peak = _proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    # ru_maxrss is KiB on Linux, bytes on macOS; it cannot be reset.
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 1024**2
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def current_rss_mb() -> float:
    current = _proc_status_mb("VmRSS")
    return float("nan") if current is None else current


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0), so the peak of one stage can be read."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--judges", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--file-rows", metavar="N1,N2,...",
                        help="Time `analyze` on table files of these sizes, each in a fresh process.")
    parser.add_argument("--compare", metavar="REV",
                        help="With --file-rows: also run git revision REV's code on the same file.")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "judgebias-bench",
                        help="Where the table files are written (and reused).")
    parser.add_argument("--format", choices=("parquet", "jsonl"), default="parquet",
                        help="With --file-rows: the file read (JSONL: written from the Parquet file).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run_file(args.child, args.child_json)))
        return
    if args.file_rows:
        file_benchmark([int(x) for x in args.file_rows.split(",")], args.judges, args.seed, args.workdir,
                       args.compare, args.format)
        return

    # Imports are not the analysis: load them before timing.
    for module in ("statsmodels.api", "statsmodels.stats.proportion", "scipy.stats"):
        importlib.import_module(module)

    from judgebias.reporting.analysis import analyze
    from judgebias.tables.pairwise import validate

    t0 = time.perf_counter()
    df = synthetic_table(args.rows, args.judges, args.seed)
    t1, c1 = time.perf_counter(), time.process_time()
    rss_data = current_rss_mb()
    peak_gen = peak_rss_mb()
    resettable = reset_peak()
    table, excl = validate(df, source="synthetic")
    t2, c2 = time.perf_counter(), time.process_time()
    result = analyze(table, exclusions=excl)
    t3, c3 = time.perf_counter(), time.process_time()
    peak = peak_rss_mb()

    print(f"rows={len(df):,} pairs={result['dataset']['pairs']:,} judges={len(result['dataset']['judges'])}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times stretch with load; "
          "CPU seconds much less)")
    print(f"generate  {t1 - t0:7.2f} s wall  (not part of the budget)")
    print(f"validate  {t2 - t1:7.2f} s wall  {c2 - c1:7.2f} s CPU")
    print(f"analyze   {t3 - t2:7.2f} s wall  {c3 - c2:7.2f} s CPU")
    print(f"total     {t3 - t1:7.2f} s wall  {c3 - c1:7.2f} s CPU   validate + analyze")
    print(f"memory    {rss_data:7.0f} MB resident with the input table loaded")
    if resettable:
        print(f"          {peak:7.0f} MB peak during validate + analyze "
              f"(+{peak - rss_data:.0f} MB over the loaded table; generating it peaked at {peak_gen:.0f} MB)")
    else:
        print(f"          {peak:7.0f} MB peak of the whole process (peak reset unavailable here)")
    first = result["judges"][result["dataset"]["judges"][0]]
    for key in ("self_preference_eo", "self_preference_dp", "dbg", "verbosity_bias", "position_flip_rate",
                "perplexity_preference"):
        m = first.get(key)
        if m:
            print(f"  {result['dataset']['judges'][0]}.{key:24s} {m['value']:+.3f} "
                  f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}] n={m['n']:,}")


if __name__ == "__main__":
    main()
