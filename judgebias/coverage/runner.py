"""Run the coverage benchmark: every (family, n) cell, ``reps`` replications each, and summarise.

Cells are independent and seeded from (seed, family name, n), so a run repeats exactly whatever
the number of worker processes and whichever families are selected."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd

from judgebias.coverage import DEFAULT_NS, FAMILIES, family
from judgebias.coverage.registry import Family

COLUMNS = ("family", "figure", "method", "n", "reps", "defined", "coverage", "coverage_se", "width",
           "bias", "truth", "seconds")


def cell_rng(seed: int, family_name: str, n: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(family_name.encode()), n]))


def run_cell(fam: Family, n: int, reps: int, seed: int = 0) -> list[dict]:
    """``reps`` replications of one family at one n; one summary row per figure."""
    if reps < 1 or n < 1:
        raise ValueError(f"reps and n must be >= 1, got reps={reps}, n={n}")
    rng = cell_rng(seed, fam.name, n)
    names = [f.name for f in fam.figures]
    values = np.full((reps, len(names)), np.nan)
    lows, highs = values.copy(), values.copy()
    start = time.perf_counter()
    with warnings.catch_warnings():
        # Small samples make statsmodels warn (separation, zero variance); the product handles
        # them, and a warning per replication would drown the output.
        warnings.simplefilter("ignore")
        for r in range(reps):
            got = fam.estimate(fam.simulate(rng, n))
            for j, name in enumerate(names):
                iv = got.get(name)
                if iv is not None:
                    values[r, j], lows[r, j], highs[r, j] = iv
    seconds = time.perf_counter() - start
    rows = []
    for j, fig in enumerate(fam.figures):
        ok = ~np.isnan(values[:, j])
        k = int(ok.sum())
        # A truth sitting on the interval's end is covered: intervals are closed (e.g. clipped ones).
        covered = (lows[ok, j] <= fig.truth + 1e-12) & (fig.truth - 1e-12 <= highs[ok, j])
        cov = float(covered.mean()) if k else math.nan
        rows.append({"family": fam.name, "figure": fig.name, "method": fig.method, "n": n, "reps": reps,
                     "defined": k / reps, "coverage": cov,
                     "coverage_se": math.sqrt(cov * (1 - cov) / k) if k else math.nan,
                     "width": float(np.mean(highs[ok, j] - lows[ok, j])) if k else math.nan,
                     "bias": float(np.mean(values[ok, j]) - fig.truth) if k else math.nan,
                     "truth": fig.truth, "seconds": seconds / len(fam.figures)})
    return rows


def _cell(args: tuple[str, int, int, int]) -> list[dict]:
    name, n, reps, seed = args
    return run_cell(family(name), n, reps, seed)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(asked: int, cells: int) -> int:
    """Worker processes for ``cells`` independent cells: ``asked``, at most one per usable core
    (a cell is pure CPU work: more processes only share the same cores) and per cell."""
    if asked < 1:
        raise ValueError(f"workers must be >= 1, got {asked}")
    return max(1, min(asked, usable_cores(), cells))


def _ignore_interrupt() -> None:
    """In each worker: Ctrl-C reaches the whole process group; the parent alone stops the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's processes and drop its queue (a plain shutdown waits for every queued cell).
    ``_processes`` is the executor's own table of them (Python 3.14 has ``kill_workers`` for this)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def map_cells(func: Callable, cells: Sequence, workers: int,
              progress: Callable[[str], None] | None = None) -> Iterator:
    """``func`` over ``cells`` in order, in ``workers`` processes capped at the usable cores and the
    number of cells (``worker_count``, said through ``progress``); a SIGTERM or Ctrl-C kills the
    worker processes at once, then stops as it would have."""
    used = worker_count(workers, len(cells))
    if used < workers and progress:
        progress(f"--workers {workers} capped at {used}: {usable_cores()} usable core(s), "
                 f"{len(cells)} cell(s)")
    if used == 1:
        yield from map(func, cells)
        return
    pool = ProcessPoolExecutor(max_workers=used, initializer=_ignore_interrupt)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame) -> None:
            _stop_workers(pool)
            if callable(previous):
                previous(signum, frame)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)
    try:
        yield from pool.map(func, cells)
    except BaseException:
        _stop_workers(pool)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        pool.shutdown()


def run(names: Sequence[str] | None = None, ns: Sequence[int] = DEFAULT_NS, reps: int = 1000, seed: int = 0,
        workers: int = 1, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every selected family (default: all) at every n; a long table, one row per (figure, n).
    ``workers`` is capped at the usable cores and the number of cells (``worker_count``); a SIGTERM
    or Ctrl-C kills the worker processes at once, then stops as it would have."""
    fams = [family(x) for x in names] if names else list(FAMILIES)
    if not ns or any(int(n) < 1 for n in ns):
        raise ValueError(f"n values must be >= 1, got {list(ns)}")
    # The slowest cells first, so the pool's last tasks are short.
    cells = sorted(((f.name, int(n), reps, seed) for f in fams for n in ns), key=lambda c: -c[1])
    rows: list[dict] = []
    for cell, got in zip(cells, map_cells(_cell, cells, workers, progress), strict=True):
        rows.extend(got)
        if progress:
            worst = min((r["coverage"] for r in got if r["coverage"] == r["coverage"]), default=math.nan)
            progress(f"{cell[0]} n={cell[1]}: lowest coverage {worst:.3f}")
    order = {f.name: i for i, f in enumerate(fams)}
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["_f"] = df["family"].map(order)
    return df.sort_values(["_f", "figure", "n"], kind="stable").drop(columns="_f").reset_index(drop=True)
