"""What agreement with humans is reachable at all: the human ceiling (leave one label out).

Humans disagree with each other, so no judge can agree with "the" human label on every pair. With
two or more labels per pair, each label is held out in turn and compared with the strict majority
of the others (AlpacaEval's leave-one-annotator-out human agreement); a held-out label whose others
have no strict majority gives no reference. The judge is compared with exactly the same references,
so the two figures are read side by side: a judge at the ceiling agrees with humans as well as a
human does. Labels are not tied to annotator identities here (tables hold a list per pair), so
"one annotator" is one label of the pair.

Per pair: human score = share of its referenced labels that equal their reference, judge score =
share of the same references the judge's choice equals; both are averaged over pairs (each pair
weighs the same) with t intervals, and their paired difference is the judge's gap to the ceiling.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F
from judgebias.stats import (
    Estimate,
    InsufficientData,
    cluster_fields,
    clustered_mean_figure,
    clustered_mean_t,
    count_reasons,
    mean_how,
)


def _leave_one_out(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(references, weights): for each row and each held-out class k (a, b, tie), the strict
    majority of the other labels (code, or -1 when none) and how many labels of class k there are."""
    n = counts.sum(axis=1)
    refs = np.full(counts.shape, F.MISSING, dtype=np.int8)
    for k in (F.A, F.B, F.TIE):
        others = counts.copy()
        others[:, k] -= 1
        top = others.argmax(axis=1)
        strict = others.max(axis=1) * 2 > n - 1
        refs[:, k] = np.where((counts[:, k] > 0) & strict, top, F.MISSING)
    return refs, np.where(refs != F.MISSING, counts, 0)


def human_ceiling(df: pd.DataFrame, judge: str) -> Estimate:
    """Leave-one-label-out human agreement on the judge's pairs (``value``, t interval over pairs),
    with the judge's agreement on the same references (``details.judge``) and the judge's gap to
    the ceiling (``details.gap``: judge - human, paired t interval)."""
    F.require(df, ["judge"], "human_ceiling")
    rows = F.judge_rows(F.prepare(df), judge, "human_ceiling")
    counts = F.human_counts(rows)
    choice = rows[F.CHOICE].to_numpy()
    # A row's figures depend only on its label counts and the judge's choice: computed once per
    # distinct (counts, choice), a handful, then read per row (ten million rows: 3 s less).
    code, distinct = F.distinct_rows([counts[:, 0], counts[:, 1], counts[:, 2],
                                      choice.astype(np.int64) - F.MISSING])
    d_counts, d_choice = distinct[:, :3], distinct[:, 3] + F.MISSING
    refs, weights = _leave_one_out(d_counts)
    total = weights.sum(axis=1)
    keep, excl = count_reasons([("fewer_than_two_labels", (d_counts.sum(axis=1) < 2)[code]),
                                ("judge_missing", choice == F.MISSING),
                                ("no_leave_one_out_majority", (total == 0)[code])], len(rows))
    if not keep.any():
        raise InsufficientData(f"no pair with two or more human labels that a held-out label can be "
                               f"compared with; excluded: {excl}")
    held_out = np.arange(3)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):  # distinct rows with no reference are not kept
        d_human = (weights * (refs == held_out)).sum(axis=1) / total
        d_agent = (weights * (refs == d_choice[:, None])).sum(axis=1) / total
    kept = code[keep]
    human, agent, t = d_human[kept], d_agent[kept], total[kept]
    clusters = F.clusters(rows, keep)
    h = clustered_mean_t(human, clusters, bounds=(0.0, 1.0))
    method = ("leave-one-label-out agreement of humans with the majority of the other labels, mean over "
              "pairs; " + mean_how(clusters, "t interval clipped to [0, 1]"))
    return Estimate(value=h["value"], ci_low=h["ci_low"], ci_high=h["ci_high"], n=int(keep.sum()),
                    exclusions=excl, method=method,
                    details={"judge": clustered_mean_figure(agent, clusters, null=None, bounds=(0.0, 1.0)),
                             "gap": clustered_mean_figure(agent - human, clusters, bounds=(-1.0, 1.0)),
                             "labels_compared": int(t.sum())},
                    **cluster_fields(h, clusters))
