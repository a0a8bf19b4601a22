"""Benchmark: validate + analyze a synthetic judgment table (default 1,000,000 rows).

    python benchmarks/bench_analyze.py [--rows 1000000] [--judges 5] [--seed 0]

Prints wall time per stage and the process's peak resident memory. It measures, it asserts
nothing. The synthetic data has a known structure (self bonus, verbosity and perplexity effects,
position bias, one verdict-only judge) so the printed figures can also be eyeballed for sign.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd


def synthetic_table(n_rows: int = 1_000_000, n_judges: int = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (pair, judge): several judges that are also generators, 3 human labels per pair,
    perplexities, both presentation orders; the last judge gives verdicts only."""
    rng = np.random.default_rng(seed)
    judges = [f"judge-{i}" for i in range(n_judges)]
    generators = [*judges[:3], "gen-x", "gen-y", "gen-z"]
    n_pairs = max(1, n_rows // n_judges)
    ga = rng.integers(0, len(generators), n_pairs)
    gb = (ga + rng.integers(1, len(generators), n_pairs)) % len(generators)
    words_a = rng.integers(5, 120, n_pairs)
    words_b = rng.integers(5, 120, n_pairs)
    quality = rng.normal(size=n_pairs)
    base = "lorem " * 130
    resp_a = np.array([base[: 6 * k] for k in words_a], dtype=object)
    resp_b = np.array([base[: 6 * k] for k in words_b], dtype=object)
    p_human = 1 / (1 + np.exp(-(quality + 0.01 * (words_a - words_b))))
    votes = rng.random((n_pairs, 3)) < p_human[:, None]
    tie = rng.random((n_pairs, 3)) < 0.05
    lab = np.where(tie, "tie", np.where(votes, "a", "b"))
    human = pd.Series(lab.tolist(), dtype=object)
    pair_ids = np.array([f"p{i}" for i in range(n_pairs)], dtype=object)
    prompts = np.array([f"question {i}" for i in range(n_pairs)], dtype=object)
    gen_names = np.array(generators, dtype=object)

    frames = []
    for j, judge in enumerate(judges):
        wrote_a = (ga == j) & (j < 3)  # only the first three judges are also generators
        wrote_b = (gb == j) & (j < 3)
        own = wrote_a.astype(float) - wrote_b.astype(float)
        ppl_a = np.exp(rng.normal(2.0 - 0.5 * wrote_a, 0.4, n_pairs))
        ppl_b = np.exp(rng.normal(2.0 - 0.5 * wrote_b, 0.4, n_pairs))
        logit = (quality + 0.6 * own - 0.8 * (np.log(ppl_a) - np.log(ppl_b))
                 + 0.015 * (words_a - words_b))
        p_ab = 1 / (1 + np.exp(-(logit + 0.4 + rng.normal(0, 0.3, n_pairs))))
        p_ba = 1 / (1 + np.exp(-(logit - 0.4 + rng.normal(0, 0.3, n_pairs))))
        frame = {
            "pair_id": pair_ids, "prompt": prompts, "response_a": resp_a, "response_b": resp_b,
            "generator_a": gen_names[ga], "generator_b": gen_names[gb],
            "judge": np.full(n_pairs, judge, dtype=object), "human": human.to_numpy(),
            "ppl_a": ppl_a, "ppl_b": ppl_b,
        }
        if j == n_judges - 1:  # verdict-only judge, like an API model without logprobs
            frame["verdict_ab"] = np.where(p_ab > 0.5, "a", "b").astype(object)
            frame["verdict_ba"] = np.where(p_ba > 0.5, "a", "b").astype(object)
            same = frame["verdict_ab"] == frame["verdict_ba"]
            frame["verdict"] = np.where(same, frame["verdict_ab"], "tie")
        else:
            frame.update(p_a_ab=p_ab, p_a_ba=p_ba, p_a=(p_ab + p_ba) / 2)
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True).iloc[:n_rows]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (since the last ``reset_peak`` on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS; it cannot be reset.
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 1024**2
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def current_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


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
    args = parser.parse_args()

    # Imports are not the analysis: load them before timing.
    for module in ("statsmodels.api", "statsmodels.stats.proportion", "scipy.stats"):
        importlib.import_module(module)

    from judgebias.analysis import analyze
    from judgebias.table import validate

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
