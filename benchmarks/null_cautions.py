"""Null simulation: how often does a judge with NO bias at all get at least one "caution"?

    python benchmarks/null_cautions.py [--tables 200] [--pairs 200] [--probe-pairs 40] [--seed 0]

Each simulated table has three judges that also wrote responses, a family member of each judge,
one outside generator, three human labels per pair and both presentation orders, in the
product's own table format (``judgebias.tables.pairwise.validate``), analysed by the product's ``analyze``;
each judge also gets perturbation-probe and self-recognition figures from the product's probe
metrics. Nothing in the generating process is biased:

* quality ``q`` of response A over B ~ N(0, 1), independent of who wrote either response, of
  their lengths and of their markdown;
* each human label and each judge see ``q + noise`` with the SAME noise law N(0, 0.8^2), so a
  judge is one more annotator (its gap to the human ceiling is 0) with no preference for its
  own or its family's responses, for length or for style;
* the two presentation orders shift the judge's logit by +d and -d with d ~ N(0, 0.5^2)
  symmetric: no position bias, yet order-inconsistent verdicts on close pairs;
* a perturbation moves the judge's logit by symmetric noise (P(perturbed side) unchanged on
  average); recognition confidence is symmetric around 0.5 (chance).

Every judge's statements are then made by the product's rules (``judgebias.reporting.trust.statements``)
with the family adjusted by Holm (the default), by Benjamini-Hochberg, and not at all (each test at
5% on its own: the behaviour before the adjustment). Printed: the share of judges with at least one
caution under each, with Monte-Carlo standard errors (three judges of a table share its humans and
pairs, so the standard error is computed over tables: the sd of the per-table shares / sqrt(tables)).
It measures; it asserts nothing (tests/test_null_cautions.py runs it small and asserts).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

JUDGES = ("j1", "j2", "j3")
FAMILY = {"j1": "f1", "j2": "f2", "j3": "f3"}
GENERATORS = (*JUDGES, *FAMILY.values(), "other")
NOISE_SD = 0.8  # the same for every annotator and every judge: the judge is one more annotator
ORDER_SD = 0.5
PERTURB_SD = 0.3
N_LABELS = 3


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _text(rng: np.random.Generator) -> str:
    """A response whose length and markdown are drawn independently of everything else."""
    lines = []
    if rng.random() < 0.3:
        lines.append("# Heading")
    lines.append(" ".join(["word"] * int(rng.integers(5, 120))))
    lines += ["- item"] * int(rng.integers(0, 4) if rng.random() < 0.4 else 0)
    if rng.random() < 0.3:
        lines.append("**bold** word")
    return "\n".join(lines)


def null_table(rng: np.random.Generator, n_pairs: int) -> pd.DataFrame:
    """One judgment table with no bias of any kind (module docstring)."""
    from judgebias.tables.pairwise import validate

    ga = rng.integers(0, len(GENERATORS), n_pairs)
    gb = (ga + rng.integers(1, len(GENERATORS), n_pairs)) % len(GENERATORS)
    q = rng.normal(size=n_pairs)
    texts = [(_text(rng), _text(rng)) for _ in range(n_pairs)]
    human = [["a" if q[i] + rng.normal(0, NOISE_SD) > 0 else "b" for _ in range(N_LABELS)]
             for i in range(n_pairs)]
    rows = []
    for judge in JUDGES:
        x = q + rng.normal(0, NOISE_SD, n_pairs)
        d = rng.normal(0, ORDER_SD, n_pairs)
        # Antithetic order shifts: the folded P(A) = (s(x+d) + s(x-d)) / 2 is > 0.5 exactly when
        # x > 0, so the folded verdict is the annotator-like one; E[P(first wins)] = 0.5 by d -> -d.
        p_ab, p_ba = _sigmoid(x + d), _sigmoid(x - d)
        for i in range(n_pairs):
            rows.append({"pair_id": f"p{i}", "prompt": f"q{i}", "response_a": texts[i][0],
                         "response_b": texts[i][1], "generator_a": GENERATORS[ga[i]],
                         "generator_b": GENERATORS[gb[i]], "judge": judge, "p_a_ab": float(p_ab[i]),
                         "p_a_ba": float(p_ba[i]), "p_a": float((p_ab[i] + p_ba[i]) / 2),
                         "human": human[i]})
    return validate(pd.DataFrame(rows))[0]


def null_probes(rng: np.random.Generator, n_pairs: int) -> dict:
    """Perturbation and self-recognition figures of every judge, in the probe stages' layout,
    computed by the product's probe metrics on probe tables with no effect."""
    from judgebias.metrics.recognition import self_recognition
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate
    from judgebias.probes.perturbations import PERTURBATIONS

    pert: dict = {"perturbations": {p.tag: {"description": p.description} for p in PERTURBATIONS.values()},
                  "judges": {}}
    rec: dict = {"judges": {}}
    for judge in JUDGES:
        frames = []
        for p in PERTURBATIONS.values():
            x = rng.normal(0, math.hypot(1.0, NOISE_SD), n_pairs)
            before, after = _sigmoid(x), _sigmoid(x + rng.normal(0, PERTURB_SD, n_pairs))
            frames.append(pd.DataFrame({
                "judge": judge, "pair_id": [f"p{i}" for i in range(n_pairs)], "perturbation": p.tag,
                "perturbed_side": np.where(rng.random(n_pairs) < 0.5, "a", "b"),
                "verdict_before": np.where(before > 0.5, "a", "b"),
                "verdict_after": np.where(after > 0.5, "a", "b"), "p_a_before": before, "p_a_after": after}))
        df = pd.concat(frames, ignore_index=True)
        pert["judges"][judge] = {p.tag: {"robustness_rate": robustness_rate(df, judge, p.tag).to_dict(),
                                         "shift": perturbation_shift(df, judge, p.tag).to_dict()}
                                 for p in PERTURBATIONS.values()}
        own_first = rng.random(n_pairs) < 0.5
        conf = _sigmoid(rng.normal(0, 1.0, n_pairs))  # P(own is mine): chance on average
        rec_df = pd.DataFrame({"pair_id": [f"r{i}" for i in range(n_pairs)], "judge": judge,
                               "generator_a": np.where(own_first, judge, "other"),
                               "generator_b": np.where(own_first, "other", judge),
                               "p_a": np.where(own_first, conf, 1 - conf)})
        rec["judges"][judge] = {"self_recognition": self_recognition(rec_df, judge).to_dict()}
    return {"perturbations": pert, "self_recognition": rec}


@dataclass(frozen=True)
class JudgeOutcome:
    tests: int
    cautions: dict[str, int]  # method -> number of caution statements


def judge_outcomes(result: dict, probes: dict) -> list[JudgeOutcome]:
    """The product's statements for every judge, with the family adjusted by Holm, by BH and not at
    all (the unadjusted family's "adjusted" p-values are its raw ones: each test alone at 5%)."""
    from judgebias.reporting.trust import Family, family, mutual_gold, probe_statements, trust_summary

    mutual = mutual_gold(result)
    out = []
    for judge, m in result["judges"].items():
        fams = {method: family(m, probes, judge, mutual_gold=mutual, method=method)
                for method in ("holm", "bh")}
        holm = fams["holm"]
        fams["none"] = Family("holm", holm.tests, tuple(t.p_value for t in holm.tests))
        counts = {}
        for method, fam in fams.items():
            said = trust_summary(m, mutual_gold=mutual, fam=fam) + probe_statements(probes, judge, fam=fam)
            counts[method] = sum(kind == "caution" for kind, _ in said)
        out.append(JudgeOutcome(holm.size, counts))
    return out


def run(tables: int, pairs: int = 200, probe_pairs: int = 40, seed: int = 0, reps: int = 200) -> dict:
    """Simulate ``tables`` null tables (three judges each) and summarise the caution shares."""
    from judgebias.reporting.analysis import analyze

    rng = np.random.default_rng(seed)
    per_table: list[list[JudgeOutcome]] = []
    for _ in range(tables):
        table = null_table(rng, pairs)
        result = analyze(table, family_map={j: [f] for j, f in FAMILY.items()}, reps=reps,
                         seed=int(rng.integers(1 << 31)))
        per_table.append(judge_outcomes(result, null_probes(rng, probe_pairs)))
    summary: dict = {"tables": tables, "judges": sum(len(t) for t in per_table), "pairs": pairs,
                     "probe_pairs": probe_pairs, "seed": seed,
                     "family_size": sorted({o.tests for t in per_table for o in t})}
    for method in ("holm", "bh", "none"):
        shares = np.array([np.mean([o.cautions[method] > 0 for o in t]) for t in per_table])
        se = float(shares.std(ddof=1) / math.sqrt(tables)) if tables > 1 else math.nan
        hits = int(sum(o.cautions[method] > 0 for t in per_table for o in t))
        summary[method] = {"share": float(shares.mean()), "se": se, "judges_with_caution": hits}
    return summary


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=200, help="simulated tables (three judges each)")
    ap.add_argument("--pairs", type=int, default=200, help="pairs per table")
    ap.add_argument("--probe-pairs", type=int, default=40, help="pairs per perturbation and for recognition")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    s = run(args.tables, args.pairs, args.probe_pairs, args.seed)
    wall = time.perf_counter() - t0
    print(f"null simulation: {s['judges']} judges without bias ({s['tables']} tables x 3 judges, "
          f"{s['pairs']} pairs, {s['probe_pairs']} probe pairs), family size {s['family_size']}")
    for method, label in (("holm", "Holm (default)"), ("bh", "Benjamini-Hochberg"),
                          ("none", "unadjusted (each test at 5%)")):
        r = s[method]
        print(f"  {label:<30} share of judges with >= 1 caution {r['share']:.3f} (MC s.e. {r['se']:.3f}; "
              f"{r['judges_with_caution']} of {s['judges']})")
    print(f"wall {wall:.0f} s on {_cpu()} ({os.cpu_count()} CPUs visible)")


if __name__ == "__main__":
    main()
