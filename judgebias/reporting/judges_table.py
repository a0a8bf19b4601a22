"""Every judge seen across runs, one row per (run, judge): the AlpacaEval-style evaluator table.

Built from the runs' analyze results only (``tracking/judges_across_runs.py`` reads them from an
MLflow experiment): agreement and kappa against humans with their intervals and confusion matrix,
the main bias figures, the dataset each run judged (its digest) and when the run was made. Figures
a run could not compute are empty, never 0. Judge, run and dataset names come from MLflow: the page
escapes them.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judgebias.metrics import registry as R

# The columns beside agreement: what a reader of the evaluator table asks first.
MAIN_FIGURES = (
    "agreement_human",
    "kappa_human",
    "position_consistency",
    "position_bias",
    "verbosity_bias",
    "self_preference_eo",
    "dbg",
    "repeat_kappa",
)


PER_1K = ("seconds_per_1k", "usd_per_1k")  # the metric names a judge's run logs them under


def per_thousand(stage: Mapping[str, Any]) -> dict[str, float]:
    """Time and price per 1,000 judgments of one judge's judging stage (its manifest record:
    ``seconds``, ``calls`` the judgments the model made, and ``usage.usd`` an API judge's dollars),
    over the calls only: a cached judgment cost neither. Empty where the stage made no call; a price
    only where the stage recorded one. Raises ValueError on negative seconds or calls."""
    calls, seconds = stage.get("calls"), stage.get("seconds")
    if calls is None or seconds is None:
        return {}
    if calls < 0 or seconds < 0:
        raise ValueError(f"judging stage with negative calls ({calls}) or seconds ({seconds})")
    if calls == 0:
        return {}
    out = {"seconds_per_1k": 1000.0 * float(seconds) / calls}
    usd = (stage.get("usage") or {}).get("usd")
    if usd is not None and usd == usd:
        out["usd_per_1k"] = 1000.0 * float(usd) / calls
    return out


@dataclass(frozen=True)
class RunResult:
    """One run's analyze result with what identifies it."""

    run_id: str
    run_name: str
    started: str  # ISO time
    dataset: str  # the table's digest where the run recorded it, else its rows and pairs
    result: Mapping[str, Any]
    per_1k: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # judge -> PER_1K values


def dataset_of(params: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    digest = params.get("table.sha256") or (result.get("source") or {}).get("sha256")
    ds = result.get("dataset") or {}
    size = f"{ds.get('pairs', '?')} pairs"
    return f"sha256 {str(digest)[:12]} ({size})" if digest else f"unknown table ({size})"


def judge_rows(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per (run, judge), newest run first; each figure as value, interval and n."""
    rows = []
    for run in sorted(runs, key=lambda r: r.started, reverse=True):
        for judge, m in (run.result.get("judges") or {}).items():
            row: dict[str, Any] = {
                "judge": judge,
                "run_id": run.run_id,
                "run_name": run.run_name,
                "started": run.started,
                "dataset": run.dataset,
            }
            for key in MAIN_FIGURES:
                est = m.get(key) if isinstance(m.get(key), Mapping) else {}
                for part in ("value", "ci_low", "ci_high", "n"):
                    row[f"{key}.{part}"] = est.get(part)
            table = ((m.get("agreement_human") or {}).get("table") or {}).get("rows_judge_cols_human")
            cost = run.per_1k.get(judge) or {}
            for key in PER_1K:  # empty where the run recorded none (imported data, all cached)
                row[key] = cost.get(key)
            row["confusion_vs_humans"] = table  # rows: judge a / b / tie; columns: humans a / b / tie
            rows.append(row)
    return rows


def _cell(row: Mapping[str, Any], key: str) -> str:
    v = row.get(f"{key}.value")
    if v is None:
        return ""
    signed = R.FIGURES[key].signed
    lo, hi = row.get(f"{key}.ci_low"), row.get(f"{key}.ci_high")
    f = (lambda x: f"{x:+.3f}") if signed else (lambda x: f"{x:.3f}")
    return f"{f(v)} [{f(lo)}, {f(hi)}]" if lo is not None and hi is not None else f(v)


def render_html(rows: Sequence[Mapping[str, Any]], *, title: str, provenance: Sequence[str] = ()) -> str:
    from judgebias.reporting.run_compare_page import page_head

    e = html.escape
    head = "".join(f"<th>{e(R.FIGURES[k].label.strip(' .'))}</th>" for k in MAIN_FIGURES)
    parts = page_head(title, provenance)
    parts += [
        "<li>One row per judge and run, newest first; each figure with its 95% interval. The confusion "
        "matrix: rows the judge's a / b / tie, columns the humans'.</li>",
        "</ul>",
        f"<table class='figures'><tr><th>judge</th><th>run</th><th>started</th><th>dataset</th>{head}"
        "<th>seconds per 1k judgments</th><th>USD per 1k judgments</th><th>confusion vs humans</th></tr>",
    ]
    for r in rows:
        cells = "".join(f"<td class='num'>{e(_cell(r, k))}</td>" for k in MAIN_FIGURES)
        conf = r.get("confusion_vs_humans")
        conf_text = " / ".join(" ".join(str(x) for x in line) for line in conf) if conf else ""
        parts.append(
            f"<tr><td>{e(r['judge'])}</td><td>{e(r['run_name'])} <code>{e(r['run_id'][:8])}</code></td>"
            f"<td>{e(r['started'])}</td><td>{e(r['dataset'])}</td>{cells}"
            + "".join(f"<td class='num'>{'' if r.get(k) is None else f'{r[k]:.4g}'}</td>" for k in PER_1K)
            + f"<td class='num'>{e(conf_text)}</td></tr>"
        )
    parts += ["</table>", "</body></html>"]
    return "\n".join(parts)
