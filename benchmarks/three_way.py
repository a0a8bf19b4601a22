"""Three-way statements by simulation: how often does a judge get "ok" (issue 41 item 3)?

    python benchmarks/three_way.py [--reps 500] [--sizes 50,100,200,400,800,1600,3200,6400] [--seed 0]

Each simulated judge gets, from the product's own estimators, the figures of three statements and
one family of nine tests, as a judge of the demo has them (its analysis figures and its probes).
The figures are drawn as their estimators see them (counts and per-pair values), not through a
table: the table-to-figure plumbing has its own tests, and this keeps 10,000 judges in minutes.

* self-preference EO (``eo_from_confusion``, the Newcomb interval and score test of
  ``self_preference_eo``) on n pairs, each with one own response and one human label;
  TPR = 0.7 + b/2, TNR = 0.7 - b/2, so EO = b; margin +-0.05;
* position bias (``mean_t`` of 0.5 as ``position_bias``) on n pairs judged in both orders, verdicts
  only: the first-shown response wins each order with probability 0.5 + b; margin 0.5 +- 0.03;
* seven CALM perturbation shifts (``mean_t`` as ``perturbation_shift``) on n probe pairs each:
  P(perturbed side) moves by b + N(0, 0.1^2) from a P(A) drawn in [0.35, 0.65]; margin +-0.05.

Two kinds of judges: **biased**, every figure at twice its margin (EO 0.10, P(first wins) 0.56,
every shift 0.10), where an "ok" is a false claim; **unbiased**, every figure at its null, where an
"ok" is the right claim and its rate is the power of the equivalence test. The statements are made
by the product's rules (``judgebias.reporting.trust``: Holm over the family's zero tests and, apart,
over its equivalence tests). Printed: P(ok), P(caution) and P(inconclusive) per statement and n, with
Monte-Carlo standard errors (a perturbation's rates pool its seven figures).

Measures; asserts nothing (tests/test_three_way_simulation.py runs it small and asserts).
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

JUDGE, OTHER = "judge", "other"
MARGINS = {"eo": 0.05, "order": 0.03, "shift": 0.05}  # as declared (registry, PROBE_MARGINS)
BASE_RATE = 0.7  # the judge's accuracy on own and other pairs when unbiased
SHIFT_SD = 0.1
STATEMENTS = ("self-preference (EO)", "order (P(first wins))", "perturbation shift (each of 7)")


def _eo(rng: np.random.Generator, n: int, bias: float) -> dict:
    """EO on n pairs with one own response and one human label, by the product's estimator
    (``eo_from_confusion``: what ``self_preference_eo`` computes from the table's confusion matrix)."""
    from judgebias.metrics.self_preference import Confusion, eo_from_confusion

    n_pos = int(rng.binomial(n, 0.5))  # humans prefer the judge's own response
    tp = int(rng.binomial(n_pos, BASE_RATE + bias / 2))
    tn = int(rng.binomial(n - n_pos, BASE_RATE - bias / 2))
    return eo_from_confusion(Confusion(tp=tp, fn=n_pos - tp, fp=n - n_pos - tn, tn=tn)).to_dict()


def _order(rng: np.random.Generator, n: int, bias: float) -> dict:
    """P(first shown wins) on n pairs judged in both orders (verdicts), as ``position_bias`` computes
    it: the mean over pairs of the two orders' first-shown wins, t interval clipped to [0, 1]."""
    from judgebias.stats import mean_t

    first = (rng.random((2, n)) < 0.5 + bias).mean(axis=0)
    d = mean_t(first, null=0.5, bounds=(0.0, 1.0))
    return {**d, "n": n}


def _probes(rng: np.random.Generator, n: int, bias: float) -> dict:
    """Seven perturbation shifts, as ``perturbation_shift`` computes them: the mean change of
    P(perturbed side), t interval clipped to [-1, 1]."""
    from judgebias.probes.perturbations import PERTURBATIONS
    from judgebias.stats import mean_t

    shifts = {}
    for p in PERTURBATIONS.values():
        before = rng.uniform(0.35, 0.65, n)
        after = before + bias + rng.normal(0, SHIFT_SD, n)
        shifts[p.tag] = {"shift": {**mean_t(after - before, bounds=(-1.0, 1.0)), "n": n}}
    return {"perturbations": {
        "perturbations": {p.tag: {"description": p.description} for p in PERTURBATIONS.values()},
        "judges": {JUDGE: shifts}}}


def judge_verdicts(rng: np.random.Generator, n: int, biased: bool) -> dict[str, list[str]]:
    """One simulated judge's three-way verdicts, by statement (perturbations: one per perturbation)."""
    from judgebias.reporting.trust import statements

    k = 2.0 if biased else 0.0
    metrics = {"self_preference_eo": _eo(rng, n, k * MARGINS["eo"]),
               "position_bias": _order(rng, n, k * MARGINS["order"])}
    probes = _probes(rng, n, k * MARGINS["shift"])
    said, fam = statements(metrics, probes, JUDGE)
    kinds = {text.split(":")[0]: kind for kind, text in said}
    tags = list(probes["perturbations"]["judges"][JUDGE])
    return {STATEMENTS[0]: [kinds["Self-preference"]],
            STATEMENTS[1]: [kinds["Order"] if kinds["Order"] != "info" else fam.verdict("order")],
            STATEMENTS[2]: [fam.verdict(f"perturbation:{t}") for t in tags]}


def run(reps: int = 500, sizes: tuple[int, ...] = (50, 100, 200, 400, 800, 1600, 3200, 6400), seed: int = 0
        ) -> dict:
    """P(ok / caution / inconclusive) per kind of judge, statement and n, with Monte-Carlo s.e."""
    rng = np.random.default_rng(seed)
    out: dict = {"reps": reps, "sizes": list(sizes), "seed": seed, "margins": MARGINS, "rates": {}}
    for biased in (True, False):
        kind = "biased (2x margin)" if biased else "unbiased"
        for n in sizes:
            counts: dict[str, list[str]] = {s: [] for s in STATEMENTS}
            for _ in range(reps):
                for s, verdicts in judge_verdicts(rng, n, biased).items():
                    counts[s] += verdicts
            for s, verdicts in counts.items():
                arr = np.array(verdicts)
                rates = {v: float(np.mean(arr == v)) for v in ("ok", "caution", "inconclusive")}
                # The seven perturbations of one judge share its family: s.e. over judges, not figures.
                per_judge = arr.reshape(reps, -1) == "ok"
                se = float(per_judge.mean(axis=1).std(ddof=1) / math.sqrt(reps)) if reps > 1 else math.nan
                out["rates"][(kind, s, n)] = {**rates, "ok_se": se}
    return out


def table(s: dict) -> str:
    lines = ["| judges | statement | " + " | ".join(f"n={n}" for n in s["sizes"]) + " |",
             "|---|---|" + "---|" * len(s["sizes"])]
    for kind in ("biased (2x margin)", "unbiased"):
        for st in STATEMENTS:
            cells = []
            for n in s["sizes"]:
                r = s["rates"][(kind, st, n)]
                cells.append(f"{r['ok']:.3f} ({r['ok_se']:.3f})")
            lines.append(f"| {kind} | {st} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=500, help="simulated judges per kind and n")
    ap.add_argument("--sizes", default="50,100,200,400,800,1600,3200,6400",
                    help="pairs per figure, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(","))
    t0 = time.perf_counter()
    s = run(args.reps, sizes, args.seed)
    wall = time.perf_counter() - t0
    print(f"three-way statements: P(ok) (Monte-Carlo s.e.), {args.reps} judges per cell, family of 9 tests "
          f"(EO, order, 7 perturbations), Holm; margins {MARGINS}")
    print(table(s))
    worst = max(s["rates"][("biased (2x margin)", st, n)]["ok"] for st in STATEMENTS for n in sizes)
    print(f"largest P(ok) of a biased judge: {worst:.3f}")
    for kind in ("biased (2x margin)", "unbiased"):
        for st in STATEMENTS:
            cau = ", ".join(f"{s['rates'][(kind, st, n)]['caution']:.2f}" for n in sizes)
            print(f"  P(caution) {kind}, {st}: {cau}")
    print(f"wall {wall:.0f} s ({os.cpu_count()} CPUs visible)")


if __name__ == "__main__":
    main()
