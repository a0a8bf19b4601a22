"""Run the coverage benchmark: every (family, n) cell, ``reps`` replications each, and summarise.

Cells are independent and seeded from (seed, family name, n), so a run repeats exactly whatever
the number of worker processes and whichever families are selected."""

from __future__ import annotations

import math
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
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


def run(names: Sequence[str] | None = None, ns: Sequence[int] = DEFAULT_NS, reps: int = 1000, seed: int = 0,
        workers: int = 1, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every selected family (default: all) at every n; a long table, one row per (figure, n)."""
    fams = [family(x) for x in names] if names else list(FAMILIES)
    if not ns or any(int(n) < 1 for n in ns):
        raise ValueError(f"n values must be >= 1, got {list(ns)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    # The slowest cells first, so the pool's last tasks are short.
    cells = sorted(((f.name, int(n), reps, seed) for f in fams for n in ns), key=lambda c: -c[1])
    rows: list[dict] = []
    if workers == 1:
        results = map(_cell, cells)
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        results = pool.map(_cell, cells)
    try:
        for cell, got in zip(cells, results, strict=True):
            rows.extend(got)
            if progress:
                worst = min((r["coverage"] for r in got if r["coverage"] == r["coverage"]), default=math.nan)
                progress(f"{cell[0]} n={cell[1]}: lowest coverage {worst:.3f}")
    finally:
        if workers > 1:
            pool.shutdown()
    order = {f.name: i for i, f in enumerate(fams)}
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["_f"] = df["family"].map(order)
    return df.sort_values(["_f", "figure", "n"], kind="stable").drop(columns="_f").reset_index(drop=True)
