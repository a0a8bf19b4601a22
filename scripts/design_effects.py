"""Per figure, how much wider its interval gets when the table's pairs are clustered (default: by
prompt) than when every pair is taken as independent (``--cluster-by none``): the design effect
each figure reports and the ratio of the two intervals' widths (docs/benchmarks.md, "Clustered
inference on real tables").

    python scripts/design_effects.py TABLE [--cluster-by COLUMN] [--family|--self JUDGE=GENERATOR]
"""

from __future__ import annotations

import argparse
import math

from judgebias.reporting.analysis import analyze
from judgebias.tables.files import read_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("--cluster-by", default=None)
    ap.add_argument("--family", action="append", default=[])
    ap.add_argument("--self", dest="self_", action="append", default=[])
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()
    family, self_map = {}, {}
    for specs, into in ((args.family, family), (args.self_, self_map)):
        for spec in specs:
            judge, _, gens = spec.partition("=")
            into[judge] = set(gens.split(","))
    table, excl = read_table(args.table)
    kw = dict(family_map=family or None, self_map=self_map or None, exclusions=excl, reps=args.reps)
    nested = analyze(table, cluster_by=args.cluster_by, **kw)
    flat = analyze(table, cluster_by="none", **kw)
    print(f"{args.table}: clustered by {nested['settings']['cluster_by']} "
          f"({nested['dataset']['clusters']} clusters, {nested['dataset']['pairs']} pairs)")
    print(f"{'judge':<16} {'figure':<26} {'n':>5} {'clusters':>8} {'deff':>6} {'width ratio':>11}")
    for judge, figs in nested["judges"].items():
        for key, est in figs.items():
            if not isinstance(est, dict) or "clusters" not in est or key == "skipped":
                continue
            old = flat["judges"][judge].get(key) or {}
            ratio = math.nan
            if None not in (est.get("ci_low"), est.get("ci_high"), old.get("ci_low"), old.get("ci_high")):
                w_old = old["ci_high"] - old["ci_low"]
                ratio = (est["ci_high"] - est["ci_low"]) / w_old if w_old > 0 else math.nan
            deff = est.get("design_effect")
            print(f"{judge:<16} {key:<26} {est['n']:>5} {est['clusters']:>8} "
                  f"{deff if deff is not None else math.nan:>6.2f} {ratio:>11.2f}")


if __name__ == "__main__":
    main()
