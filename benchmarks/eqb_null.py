"""How often the evaluator-quality-baseline test rejects, and its interval covers 0, for a judge with
no preference for its own answers.

    python benchmarks/eqb_null.py [--tables 400] [--questions 10,20,40,100] [--seed 0]

Each simulated table: one judge ``j`` that is also one of five generators (``j``, ``g1`` ... ``g4``,
exchangeable: every answer's quality ~ N(0, 1) whoever wrote it), every pair of the five answers to
each question judged once (ten pairs a question, random sides), three human labels per pair from
the quality difference plus N(0, 0.7^2) noise, and the judge's P(A) from the quality difference
plus noise plus a per-question error shared by half of the question's pairs (the judge misreads
some questions: votes within a question are correlated). Authorship plays no part, so the true
EQB is 0. Computed by the product's ``self_preference_eqb``; printed per number of questions: the
share of tables whose test rejects at 5% and whose 95% interval covers 0 (tables without a
comparable pair or with one question are skipped and counted). It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
from itertools import combinations

import numpy as np
import pandas as pd

from judgebias.metrics.evaluator_quality import self_preference_eqb
from judgebias.stats import InsufficientData
from judgebias.tables.pairwise import validate

GENERATORS = ("j", "g1", "g2", "g3", "g4")


def table(rng: np.random.Generator, questions: int) -> pd.DataFrame:
    rows = []
    for q in range(questions):
        quality = rng.normal(size=len(GENERATORS))
        misread = rng.normal(0, 1.0)  # this question's error of the judge, shared by its pairs
        for a, b in combinations(range(len(GENERATORS)), 2):
            if rng.random() < 0.5:
                a, b = b, a
            d = quality[a] - quality[b]
            labels = ["a" if d + rng.normal(0, 0.7) > 0 else "b" for _ in range(3)]
            logit = 1.5 * d + misread * np.sign(d) * (rng.random() < 0.5) + rng.normal(0, 1.0)
            rows.append({"pair_id": f"{q}-{a}-{b}", "prompt": f"q{q}", "response_a": "x", "response_b": "y",
                         "generator_a": GENERATORS[a], "generator_b": GENERATORS[b], "judge": "j",
                         "p_a": float(1 / (1 + np.exp(-logit))), "human": labels})
    return validate(pd.DataFrame(rows))[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=400)
    ap.add_argument("--questions", default="10,20,40,100")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    for n in (int(x) for x in a.questions.split(",")):
        rejected = covered = done = skipped = 0
        for _ in range(a.tables):
            try:
                est = self_preference_eqb(table(rng, n), "j")
            except InsufficientData:
                skipped += 1
                continue
            if est.p_value is None or math.isnan(est.p_value):
                skipped += 1
                continue
            done += 1
            rejected += est.p_value < 0.05
            covered += est.ci_low <= 0 <= est.ci_high
        se = math.sqrt(0.05 * 0.95 / done) if done else math.nan
        print(f"{n:>4} questions: {done} tables ({skipped} skipped), rejected {rejected / done:.3f}, "
              f"covered 0 {covered / done:.3f} (Monte-Carlo SE {se:.3f})")


if __name__ == "__main__":
    main()
