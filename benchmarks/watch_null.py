"""Benchmark: how often a watched judge raises a false alarm over a declared series of looks when
nothing changed, and how often it detects a stated shift (docs/watch.md).

    python benchmarks/watch_null.py [--sims 500] [--power-sims 200] [--looks 4] [--pairs 100]
                                    [--reps 200] [--spending obrien-fleming] [--shift 0.25] [--seed 0]

The judge is ``compare_null.py``'s simulated sampling judge (per-pair difficulty from Beta(6, 3), a
0.2 pull toward the first-shown response, 0.1 ties, every run drawing its verdicts afresh) on one
fixed audit set of ``--pairs`` pairs with human labels. A series is the reference run and
``--looks`` later runs; each look goes through what a watch look runs (``run_compare.compare_judge``
on the same pairs, paired cluster bootstrap; ``watch_drift.decide``: Holm across the seven figures at
the level the look may spend). A series counts as a false alarm when any look flags any figure.
Under the shift every look's run picks the first-shown response with probability 0.2 + ``--shift``
(the judge changed right after the reference); the power is the share of series flagged by the
last look, printed with the look of first detection. For contrast it also counts the series a fresh
5% test at every look (Holm within a look, no spending) would have flagged. It measures, it asserts
nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compare_null import FIRST, figures, judged, pairs, simulation_parser

from judgebias.reporting.run_compare import Side, compare_judge
from judgebias.reporting.watch_drift import decide
from judgebias.stats import proportion_interval


def series(args, shift: float, rng: np.random.Generator, seed: int) -> tuple[int | None, bool]:
    """(the first look that flagged, or None; whether a fresh 5% test at some look would have)."""
    base = pairs(args.pairs, rng)
    ref = judged(base, FIRST, rng)
    before = Side("reference", "judge", figures(ref), {}, ref)
    first, naive = None, False
    for k in range(1, args.looks + 1):
        run = judged(base, FIRST + shift, rng)
        comparison = compare_judge(before, Side(f"look {k}", "judge", figures(run), {}, run),
                                   reps=args.reps, seed=seed * 100 + k)
        if first is None and decide(comparison, look=k, looks=args.looks, alpha=0.05,
                                    spending=args.spending)["changed"]:
            first = k
        fresh = decide(comparison, look=1, looks=1, alpha=0.05, spending=args.spending)
        naive = naive or bool(fresh["changed"])
    return first, naive


def main() -> None:
    ap = simulation_parser(__doc__, sims=500, power_sims=200, reps=200, shift=0.25)
    ap.add_argument("--looks", type=int, default=4)
    ap.add_argument("--spending", default="obrien-fleming", choices=("obrien-fleming", "pocock"))
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    shifted = f"shift (first-shown +{args.shift:g} from look 1)"
    for label, shift, sims in (("null (no change)", 0.0, args.sims), (shifted, args.shift, args.power_sims)):
        if sims == 0:
            continue
        at: dict[int, int] = {}
        naive = 0
        for i in range(sims):
            first, fresh = series(args, shift, rng, args.seed + i)
            naive += fresh
            if first is not None:
                at[first] = at.get(first, 0) + 1
            if (i + 1) % 50 == 0 and i + 1 < sims:
                print(f"  {label}: {sum(at.values())} of {i + 1} flagged so far", flush=True)
        hits = sum(at.values())
        share, lo, hi = proportion_interval(hits, sims)
        nshare, nlo, nhi = proportion_interval(naive, sims)
        print(f"{label}: {hits} of {sims} series of {args.looks} looks flagged = "
              f"{share:.3f} [{lo:.3f}, {hi:.3f}] "
              f"({args.spending} spending); first flagged at look {dict(sorted(at.items()))}; a fresh 5% "
              f"test at every look: {naive} = {nshare:.3f} [{nlo:.3f}, {nhi:.3f}]", flush=True)
    print(f"({args.pairs} pairs, {args.looks} looks, {args.reps} bootstrap resamples, seed {args.seed}; "
          f"{time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
