"""Benchmark: how often ``judgebias compare`` flags a change when nothing changed, and its power
against a stated shift.

    python benchmarks/compare_null.py [--sims 1000] [--pairs 100] [--reps 1000] [--shift 0.15] [--seed 0]

Each simulated pair of runs is one sampling judge run twice on the same ``--pairs`` pairs (one
prompt each), with human labels. Per pair the judge has its own chance of siding with the human
label (drawn once per pair from Beta(6, 3): pairs differ in difficulty, which the paired comparison
must not mistake for a change), a chance of picking the response shown first (0.2) and of a tie
(0.1); each order's verdict is drawn afresh in each run (run-to-run sampling noise). Under the null
both runs use the same judge; under the shift the later run picks the first-shown response with
probability 0.2 + ``--shift``. Each pair of runs goes through ``judgebias.reporting.run_compare.compare``
(paired cluster bootstrap, Holm across the figures) on every figure the tables allow (agreement
and kappa against humans, ties, verbosity, position consistency, flips and bias), and a run pair
counts as flagged when any figure changed. It prints the share flagged under the null (with a 95%
Agresti-Coull interval; the target is at most 5%) and under the shift (the power), and per figure
how often it was flagged. It measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judgebias.metrics import registry as R
from judgebias.reporting.run_compare import Side, compare
from judgebias.stats import InsufficientData, proportion_interval

FIRST, TIE = 0.2, 0.1


def pairs(n: int, rng: np.random.Generator) -> pd.DataFrame:
    words = rng.integers(20, 200, size=(n, 2))
    return pd.DataFrame(
        {
            "pair_id": [f"p{i}" for i in range(n)],
            "prompt": [f"question {i}" for i in range(n)],
            "response_a": [" ".join(["w"] * int(k)) for k in words[:, 0]],
            "response_b": [" ".join(["w"] * int(k)) for k in words[:, 1]],
            "human": [[x] for x in rng.choice(["a", "b"], size=n)],
            "skill": rng.beta(6, 3, size=n),
        }
    )


def judged(base: pd.DataFrame, first: float, rng: np.random.Generator) -> pd.DataFrame:
    """One run of the judge: a verdict per order, in original terms (A-first, then B-first)."""
    n = len(base)
    human = np.array([h[0] for h in base["human"]])
    other = np.where(human == "a", "b", "a")
    verdicts = []
    for shown_first in ("a", "b"):
        u = rng.random(n)
        right = rng.random(n) < base["skill"].to_numpy()
        v = np.where(u < TIE, "tie", np.where(u < TIE + first, shown_first, np.where(right, human, other)))
        verdicts.append(v)
    out = base.drop(columns="skill").copy()
    out["judge"] = "judge"
    out["verdict_ab"], out["verdict_ba"] = verdicts
    from judgebias.tables.pairwise import validate

    return validate(out)[0]


def figures(table: pd.DataFrame) -> dict:
    """The judge's figures as analyze writes them (only what compare reads: value and interval)."""
    from judgebias.metrics import frame as F
    from judgebias.reporting.analysis import lean_table

    lean = lean_table(F.prepare(table))
    inputs = R.Inputs(lean, lean, "judge", {}, {}, None, False, 100, 0)
    out = {}
    for key in (
        "agreement_human",
        "kappa_human",
        "tie_rate",
        "verbosity_bias",
        "position_consistency",
        "position_flip_rate",
        "position_bias",
    ):
        with contextlib.suppress(InsufficientData):  # a figure these runs cannot support is not compared
            out[key] = R.FIGURES[key].compute(inputs).to_dict()
    return out


def flagged(before: pd.DataFrame, after: pd.DataFrame, reps: int, seed: int) -> list[str]:
    sides = [
        (
            Side("before", "judge", figures(before), {}, before),
            Side("after", "judge", figures(after), {}, after),
        )
    ]
    return [c.split(".", 1)[1] for c in compare(sides, reps=reps, seed=seed)["changed"]]


def simulation_parser(doc: str, *, sims: int, power_sims: int | None, reps: int,
                      shift: float) -> argparse.ArgumentParser:
    """The options every benchmark of this simulated judge takes (here and watch_null.py), with the
    benchmark's defaults: simulations under the null (--sims) and under the shift (--power-sims),
    pairs per run, bootstrap resamples, the shift of the pull toward the first-shown response and the
    seed. ``doc``'s first paragraph describes the benchmark; it adds its own options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=sims)
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--shift", type=float, default=shift)
    ap.add_argument("--power-sims", type=int, default=power_sims,
                    help="default: --sims" if power_sims is None else None)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main() -> None:
    args = simulation_parser(__doc__, sims=1000, power_sims=None, reps=1000, shift=0.15).parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    results = {}
    for label, shift, sims in (
        ("null (no change)", 0.0, args.sims),
        (f"shift (first-shown +{args.shift:g})", args.shift, args.power_sims or args.sims),
    ):
        hits, per = 0, {}
        for i in range(sims):
            base = pairs(args.pairs, rng)
            got = flagged(
                judged(base, FIRST, rng), judged(base, FIRST + shift, rng), args.reps, args.seed + i
            )
            hits += bool(got)
            for k in got:
                per[k] = per.get(k, 0) + 1
        share, lo, hi = proportion_interval(hits, sims)
        results[label] = (hits, sims, share, lo, hi, per)
        print(
            f"{label}: {hits} of {sims} pairs of runs flagged = {share:.3f} [{lo:.3f}, {hi:.3f}]; "
            f"per figure: {dict(sorted(per.items()))}",
            flush=True,
        )
    print(
        f"({args.pairs} pairs per run, {args.reps} bootstrap resamples, seed {args.seed}; "
        f"{time.perf_counter() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
