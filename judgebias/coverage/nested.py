"""Nested processes: every family's table with its units sharing clusters (prompts), as real tables
do (ten model pairs per question, many battles per prompt).

A nested replication draws ``clusters`` clusters of 1-20 units each (``rows``: the range of
units per cluster, uniform), then runs the family's own ``simulate`` with a ``ClusteredGenerator``
in place of numpy's: every draw the family makes of one value per unit is still exactly the law it
asks for (inverse CDF of a uniform), but the uniforms of one draw share a cluster effect,

    u_i = Phi(sqrt(rho) z_c + sqrt(1 - rho) e_i),     z_c, e_i ~ N(0, 1) independent,

a probit random effect per cluster on every choice the process makes (the judge's, the humans',
the gold panel's, the lengths). Each unit's joint law is untouched (two draws of one unit have
independent cluster effects), so every figure's closed-form truth stays exact: only the
dependence between units changes. ``icc`` is the intra-cluster correlation of the indicator of a
median split of any one draw, 1{u < 1/2}: Sheppard's (2/pi) asin(rho), so rho = sin(pi icc / 2).
Indicators of rarer events, or built from several draws, are less correlated: the table reports
the width ratio of the clustered to the independent interval, the realised nesting.

Each nested table gets a ``prompt`` column (its cluster), which ``frame.prepare`` makes the
default cluster; each replication computes every figure twice with the product's functions, as
users get it (clustered by the prompt) and with ``cluster_by="none"`` (the independent method), so
the table shows what clustering fixes. ``NOT_NESTED`` says which families stay outside and why.
"""

from __future__ import annotations

import math
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from judgebias.coverage import FAMILIES, TARGET, family
from judgebias.coverage.registry import Family
from judgebias.coverage.runner import map_cells
from judgebias.metrics import frame as F

DEFAULT_CLUSTERS: tuple[int, ...] = (10, 20, 40, 80)
DEFAULT_ICC: tuple[float, ...] = (0.0, 0.2, 0.5)
DEFAULT_ROWS: tuple[tuple[int, int], ...] = ((1, 20),)
DEFAULT_REPS = 200
# The survey families draw a sample of a fixed population by their own (Poisson) design: a nested
# version would be a cluster-sampling design, not these families with nested rows. The opt-in
# leaderboard and full-form LC families nest already: their n counts comparisons in prompts (or
# instructions) and their bootstrap resamples those.
NOT_NESTED = frozenset({"human_loop", "human_ratings", "leaderboard", "win_rate_glm"})
CLUSTER_COLUMN = "prompt"
MIN_REPORTED = 100

COLUMNS = ("family", "figure", "method", "clusters", "rows", "icc", "reps", "units", "defined", "coverage",
           "coverage_se", "width", "defined_independent", "coverage_independent", "coverage_independent_se",
           "width_independent", "width_ratio", "bias", "truth", "seconds")


def latent_correlation(icc: float) -> float:
    """The correlation rho of the latent normals that gives a median-split indicator the
    intra-cluster correlation ``icc`` (Sheppard: P(both below the median) = 1/4 + asin(rho) / (2 pi),
    so the indicator's correlation is (2 / pi) asin(rho))."""
    if not 0.0 <= icc < 1.0:
        raise ValueError(f"icc must be in [0, 1), got {icc!r}")
    return math.sin(math.pi * icc / 2)


class ClusteredGenerator:
    """numpy's Generator for a family's ``simulate`` with the units in clusters: each draw of one
    value per unit has the law asked for, and its units share a cluster effect (module docstring).
    Only per-unit draws exist here: any other size is a ValueError (the family drew something
    that is not a unit's, which this nesting does not model)."""

    def __init__(self, rng: np.random.Generator, codes: np.ndarray, icc: float):
        self._rng = rng
        self._codes = np.asarray(codes, dtype=np.int64)
        if self._codes.ndim != 1 or self._codes.size == 0 or self._codes.min() < 0:
            raise ValueError("ClusteredGenerator: cluster codes must be one non-negative integer per unit")
        self._groups = int(self._codes.max()) + 1
        rho = latent_correlation(icc)
        self._shared, self._own = math.sqrt(rho), math.sqrt(1.0 - rho)

    @property
    def units(self) -> int:
        return int(self._codes.size)

    def _check(self, size) -> None:
        if size is None or int(np.prod(size)) != self.units or np.ndim(size) > 1:
            raise ValueError(f"ClusteredGenerator draws one value per unit ({self.units}), "
                             f"asked for {size!r}")

    def latent(self, size) -> np.ndarray:
        """Standard normals, correlated rho within a cluster."""
        self._check(size)
        z = self._rng.standard_normal(self._groups)[self._codes]
        return self._shared * z + self._own * self._rng.standard_normal(self.units)

    def random(self, size=None) -> np.ndarray:
        return special.ndtr(self.latent(size))

    def uniform(self, low=0.0, high=1.0, size=None) -> np.ndarray:
        return low + (high - low) * self.random(size)

    def normal(self, loc=0.0, scale=1.0, size=None) -> np.ndarray:
        return loc + scale * self.latent(size)

    def integers(self, low, high=None, size=None) -> np.ndarray:
        low, high = (0, low) if high is None else (low, high)
        u = self.random(size)
        return np.minimum(low + np.floor(u * (high - low)).astype(np.int64), high - 1)

    def beta(self, a, b, size=None) -> np.ndarray:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        size = size if size is not None else np.broadcast(a, b).shape
        return special.betaincinv(a, b, self.random(size))


@dataclass(frozen=True)
class Design:
    """One nested process: ``clusters`` clusters of ``rows[0]``-``rows[1]`` units each (uniform) and
    an indicator ICC of ``icc``."""

    clusters: int
    rows: tuple[int, int]
    icc: float

    def __post_init__(self) -> None:
        lo, hi = self.rows
        if self.clusters < 2 or not 1 <= lo <= hi:
            raise ValueError(f"a nested design needs >= 2 clusters and 1 <= rows low <= high, got "
                             f"{self.clusters} clusters of {lo}-{hi} rows")
        latent_correlation(self.icc)

    @property
    def rows_label(self) -> str:
        return str(self.rows[0]) if self.rows[0] == self.rows[1] else f"{self.rows[0]}-{self.rows[1]}"


def parse_rows(text: str) -> tuple[int, int]:
    """'1-20' -> (1, 20); '5' -> (5, 5)."""
    parts = text.strip().split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or hi is None or not 1 <= lo <= hi:
        raise ValueError(f"rows per cluster must read 'K' or 'LOW-HIGH' with 1 <= LOW <= HIGH, got {text!r}")
    return lo, hi


def cluster_labels(sample, codes: np.ndarray) -> np.ndarray:
    """Each row's cluster label: the cluster of its unit (its pair id is the unit's index)."""
    unit = sample["pair_id"].astype(int).to_numpy()
    return np.char.add("q", codes[unit].astype(str)).astype(object)


def clustered(sample, codes: np.ndarray):
    """The sample as users have it: a ``prompt`` column, the product's default cluster."""
    out = sample.assign(**{CLUSTER_COLUMN: cluster_labels(sample, codes)})
    return F.prepare(out, cluster_by=CLUSTER_COLUMN) if F.PAIR in sample.columns else out


def independent(sample):
    """The same table read with ``cluster_by="none"``: every pair its own cluster (a probe table,
    never prepared, loses its prompt column)."""
    if F.PAIR in sample.columns:
        return F.prepare(sample, cluster_by="none")
    return sample.drop(columns=[CLUSTER_COLUMN])


def simulate(fam: Family, rng: np.random.Generator, design: Design):
    """One nested replication of ``fam``: (the clustered table, the cluster code of each unit)."""
    sizes = rng.integers(design.rows[0], design.rows[1] + 1, design.clusters)
    codes = np.repeat(np.arange(design.clusters), sizes)
    sample = fam.simulate(ClusteredGenerator(rng, codes, design.icc), int(codes.size))
    return clustered(sample, codes), codes


def nestable(fam: Family) -> bool:
    return fam.name not in NOT_NESTED


def cell_rng(seed: int, name: str, design: Design) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(
        [seed, zlib.crc32(name.encode()), design.clusters, *design.rows, round(design.icc * 1000), 29]))


def _summary(values: np.ndarray, lows: np.ndarray, highs: np.ndarray, truth: float) -> dict:
    ok = ~np.isnan(values)
    k = int(ok.sum())
    covered = (lows[ok] <= truth + 1e-12) & (truth - 1e-12 <= highs[ok])
    cov = float(covered.mean()) if k else math.nan
    return {"k": k, "coverage": cov, "se": math.sqrt(cov * (1 - cov) / k) if k else math.nan,
            "width": float(np.mean(highs[ok] - lows[ok])) if k else math.nan,
            "bias": float(np.mean(values[ok]) - truth) if k else math.nan}


def run_cell(fam: Family, design: Design, reps: int, seed: int = 0) -> list[dict]:
    """``reps`` nested replications of one family under one design; per figure one row with the
    coverage of the product's (clustered) interval and of the independent one on the same tables."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if not nestable(fam):
        raise ValueError(f"family {fam.name!r} has no nested process (see nested.NOT_NESTED)")
    rng = cell_rng(seed, fam.name, design)
    names = [f.name for f in fam.figures]
    arrays = {how: np.full((3, reps, len(names)), np.nan) for how in ("clustered", "independent")}
    units = 0
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(reps):
            sample, codes = simulate(fam, rng, design)
            units += codes.size
            for how, table in (("clustered", sample), ("independent", independent(sample))):
                got = fam.estimate(table)
                for j, name in enumerate(names):
                    iv = got.get(name)
                    if iv is not None:
                        arrays[how][:, r, j] = iv
    seconds = time.perf_counter() - start
    rows = []
    for j, fig in enumerate(fam.figures):
        c = _summary(*arrays["clustered"][:, :, j], fig.truth)
        i = _summary(*arrays["independent"][:, :, j], fig.truth)
        ratio = c["width"] / i["width"] if c["k"] and i["k"] and i["width"] > 0 else math.nan
        rows.append({"family": fam.name, "figure": fig.name, "method": fig.method,
                     "clusters": design.clusters,
                     "rows": design.rows_label, "icc": design.icc, "reps": reps, "units": units / reps,
                     "defined": c["k"] / reps, "coverage": c["coverage"], "coverage_se": c["se"],
                     "width": c["width"], "defined_independent": i["k"] / reps,
                     "coverage_independent": i["coverage"], "coverage_independent_se": i["se"],
                     "width_independent": i["width"], "width_ratio": ratio, "bias": c["bias"],
                     "truth": fig.truth, "seconds": seconds / len(fam.figures)})
    return rows


def _cell(args: tuple[str, Design, int, int]) -> list[dict]:
    name, design, reps, seed = args
    return run_cell(family(name), design, reps, seed)


def run(names: Sequence[str] | None = None, clusters: Sequence[int] = DEFAULT_CLUSTERS,
        iccs: Sequence[float] = DEFAULT_ICC, rows: Sequence[tuple[int, int]] = DEFAULT_ROWS,
        reps: int = DEFAULT_REPS, seed: int = 0, workers: int = 1,
        progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every selected family (default: every nestable one) under every design of the grid; a long
    table, one row per (figure, clusters, rows, icc)."""
    fams = [family(x) for x in names] if names else [f for f in FAMILIES if nestable(f)]
    for f in fams:
        if not nestable(f):
            raise ValueError(f"family {f.name!r} has no nested process (see nested.NOT_NESTED)")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    designs = [Design(int(g), tuple(r), float(icc)) for g in clusters for r in rows for icc in iccs]
    if not designs:
        raise ValueError("the nested grid is empty (clusters, rows and icc each need a value)")
    # The largest tables first, so the pool's last tasks are short.
    cells = sorted(((f.name, d, reps, seed) for f in fams for d in designs),
                   key=lambda c: -c[1].clusters * sum(c[1].rows))
    out: list[dict] = []
    for cell, got in zip(cells, map_cells(_cell, cells, workers, progress), strict=True):
        out.extend(got)
        if progress:
            d = cell[1]
            worst = min((r["coverage"] for r in got if r["coverage"] == r["coverage"]), default=math.nan)
            worst_i = min((r["coverage_independent"] for r in got
                           if r["coverage_independent"] == r["coverage_independent"]), default=math.nan)
            progress(f"{cell[0]} {d.clusters} clusters x {d.rows_label} rows, icc {d.icc:g}: lowest "
                     f"coverage {worst:.3f} (independent {worst_i:.3f})")
    order = {f.name: i for i, f in enumerate(fams)}
    df = pd.DataFrame(out, columns=list(COLUMNS))
    df["_f"] = df["family"].map(order)
    return df.sort_values(["_f", "figure", "rows", "icc", "clusters"], kind="stable").drop(
        columns="_f").reset_index(drop=True)


def reliable_from(summary: pd.DataFrame, target: float = TARGET, pooled_from: int = 20) -> pd.DataFrame:
    """Per figure, the smallest number of clusters of the grid from which, at every larger number,
    every ICC and every rows-per-cluster range, the clustered interval was reported in
    ``MIN_REPORTED`` replications or more and covered at least ``target`` (NA when the largest
    misses it); with the lowest coverage from there and the independent interval's lowest coverage
    at the largest ICC over the same cells, and the clustered coverage pooled over the largest ICC's
    cells from ``pooled_from`` clusters on (with its Monte-Carlo SE). ``within_noise_from_clusters``:
    the same with a cell's Monte-Carlo noise allowed (no cell more than 1.645 of its SEs below the
    target, and from there on each ICC's and rows range's cells pooled at or above it)."""
    out = []
    for (fam, fig), g in summary.groupby(["family", "figure"], sort=False):
        reported = g["defined"] * g["reps"]
        first = _first_holding(g, (reported >= MIN_REPORTED) & (g["coverage"] >= target))
        # Within Monte-Carlo noise: no cell significantly below the target (one-sided 5%: more than
        # 1.645 SE of a cell at the target), and per ICC and rows range the cells from there on pooled
        # at or above it (pooling across ICCs would let the easy cells hide the hard ones).
        noise = 1.645 * np.sqrt(target * (1 - target) / reported.clip(lower=1))
        near = (reported >= MIN_REPORTED) & (g["coverage"] >= target - noise)
        within = None
        for c in sorted(g["clusters"].unique()):
            later = g["clusters"] >= c
            strata = g[later].assign(w=reported[later]).groupby(["icc", "rows"])
            pooled_ok = all(s["w"].sum() > 0 and (s["coverage"] * s["w"]).sum() / s["w"].sum() >= target
                            for _, s in strata)
            if near[later].all() and pooled_ok:
                within = int(c)
                break
        held = g[g["clusters"] >= first] if first is not None else g.iloc[0:0]
        strong = g[g["icc"] == g["icc"].max()]
        # Monte-Carlo noise of one cell (SE 0.015 at 200 replications) is the size of the misses
        # that matter: the top-ICC cells from ``pooled_from`` clusters on, pooled, say more.
        pool = strong[strong["clusters"] >= pooled_from]
        k = (pool["defined"] * pool["reps"]).to_numpy()
        pooled = float((pool["coverage"].fillna(0).to_numpy() * k).sum() / k.sum()) if k.sum() else math.nan
        out.append({"family": fam, "figure": fig, "method": g["method"].iloc[0],
                    "reliable_from_clusters": first, "within_noise_from_clusters": within,
                    "lowest_coverage_from_there": float(held["coverage"].min()) if len(held) else math.nan,
                    "lowest_coverage": float(g["coverage"].min()),
                    "lowest_independent_at_top_icc": float(strong["coverage_independent"].min()),
                    "pooled_top_icc": pooled,
                    "pooled_top_icc_se": math.sqrt(pooled * (1 - pooled) / k.sum()) if k.sum() else math.nan})
    frame = pd.DataFrame(out)
    for col in ("reliable_from_clusters", "within_noise_from_clusters"):
        frame[col] = pd.array([r[col] for r in out], dtype="Int64")
    return frame


def _first_holding(g: pd.DataFrame, holds: pd.Series) -> int | None:
    """The smallest number of clusters from which every cell at that number and above holds."""
    by_g = holds.groupby(g["clusters"]).all().sort_index()
    ok = by_g.to_numpy()
    k = len(ok)
    while k > 0 and ok[k - 1]:
        k -= 1
    return int(by_g.index[k]) if k < len(ok) else None
