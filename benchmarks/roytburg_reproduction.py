"""Reproduce a published evaluator-quality-baseline figure of Roytburg et al. 2026 with the product's
``self_preference_eqb``, from the authors' released judge-swap results.

    python benchmarks/roytburg_reproduction.py --repo PATH/sanity_checks_for_self_preference \\
        [--results judge_swap_null_verif_smoke2] [--dataset math500] \\
        [--judge llama-3.2-3b] [--reference phi-3.5-mini]

``--repo`` is a checkout of github.com/djroytburg/sanity_checks_for_self_preference (not bundled: the
repository carries no licence). Its ``<results>/<dataset>/cache/<judge>/<reference>/`` holds the
judge's P(target) in both presentation orders for its own answer against the reference model's
(``J_vs_R_game1/2.jsonl``) and for each proxy model's answer against the same reference
(``K_vs_R_game1/2.jsonl``), each example labelled ``ilsp`` (both lost to the reference: verifiably
wrong) or ``lsp`` (both beat it). The script turns them into a judgment table (question = example,
``correct_a`` / ``correct_b`` from the label, ``p_a`` = the mean of the two orders' P(target), as
the authors average them), computes ``self_preference_eqb`` and prints it beside the authors'
figure for the same judge and reference in ``analysis/aggregated_by_judge_reference_downsampled.json``
(aggregation ``mean_k_over_proxies_by_j_example_id``: the mean P(K) over proxies per example, then a
paired t-test over examples, which is the product's estimator with one stratum per question).
It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from judgebias.metrics.evaluator_quality import self_preference_eqb
from judgebias.tables.pairwise import validate

CORRECT = {"ilsp": (False, True), "lsp": (True, False)}  # (target correct, reference correct)


def _games(folder: Path, stem: str) -> pd.DataFrame:
    """One row per (example, proxy) with the target's P in both orders and the example's label."""
    parts = []
    for game, column in ((1, "prob_response1"), (2, "prob_response2")):  # the target is A, then B
        path = folder / f"{stem}_game{game}.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        frame = pd.DataFrame(records)
        if "proxy" not in frame.columns:
            frame["proxy"] = None
        parts.append(frame[["example_id", "proxy", "category", column]].rename(columns={column: f"p{game}"}))
    both = parts[0].merge(parts[1].drop(columns="category"), on=["example_id", "proxy"], how="inner")
    return both[both["category"].isin(list(CORRECT))]


def judgment_table(folder: Path, judge: str, reference: str) -> pd.DataFrame:
    own, proxies = _games(folder, "J_vs_R"), _games(folder, "K_vs_R")
    own["proxy"] = judge
    rows = []
    for frame in (own, proxies):
        for ex, proxy, category, p1, p2 in frame[["example_id", "proxy", "category", "p1", "p2"]].itertuples(
                index=False):
            ca, cb = CORRECT[category]
            rows.append({"pair_id": f"{int(ex)}|{proxy}", "prompt": f"example {int(ex)}",
                         "response_a": str(proxy), "response_b": reference, "generator_a": proxy,
                         "generator_b": reference, "judge": judge, "p_a_ab": p1, "p_a_ba": p2,
                         "p_a": (p1 + p2) / 2, "correct_a": ca, "correct_b": cb})
    return validate(pd.DataFrame(rows))[0]


def published(analysis: Path, judge: str, reference: str) -> dict:
    entries = json.loads(analysis.read_text().replace("NaN", "null"))
    return next(e for e in entries if e["judge"] == judge and e["reference"] == reference)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--results", default="judge_swap_null_verif_smoke2")
    ap.add_argument("--dataset", default="math500")
    ap.add_argument("--judge", default="llama-3.2-3b")
    ap.add_argument("--reference", default="phi-3.5-mini")
    a = ap.parse_args()
    base = a.repo / a.results / a.dataset
    table = judgment_table(base / "cache" / a.judge / a.reference, a.judge, a.reference)
    est = self_preference_eqb(table, a.judge)
    theirs = published(base / "analysis" / "aggregated_by_judge_reference_downsampled.json", a.judge,
                       a.reference)
    ilsp = theirs["tests"]["ilsp"]
    print(f"{a.dataset}, judge {a.judge}, reference {a.reference}: harmful side (both lost to the reference)")
    print(f"{'':28} {'ours':>12} {'published':>12}")
    for label, ours, pub in (
            ("P(own) | own wrong", est.details["own_wrong_vote"]["value"], ilsp["mean_j_vs_r"]),
            ("P(proxy) | proxy wrong", est.details["other_wrong_vote"]["value"], ilsp["mean_k_vs_r"]),
            ("difference (EQB)", est.value, ilsp["mean_diff"]),
            ("t", est.statistic, ilsp["ttest_two_sided_t"]),
            ("p (two-sided)", est.p_value, ilsp["ttest_two_sided_p"]),
            ("examples", est.n, theirs["n_ilsp"])):
        print(f"{label:28} {ours:>12.6g} {pub:>12.6g}")
    print(f"95% interval (ours): [{est.ci_low:+.4f}, {est.ci_high:+.4f}]")
    side = est.details.get("when_own_better")
    if side and theirs["tests"].get("lsp"):
        lsp = theirs["tests"]["lsp"]
        print(f"legitimate side (both beat it): ours {side['value']:+.6g} (p {side['p_value']:.6g}, "
              f"n {side['n']}), published {lsp['mean_diff']:+.6g} (p {lsp['ttest_two_sided_p']:.6g}, "
              f"n {theirs['n_lsp']})")


if __name__ == "__main__":
    main()
