"""MLflow traces and their assessments -> a pairwise judgment table (``judgebias import mlflow``).

Reads every trace of an experiment (``mlflow.search_traces``, optionally narrowed by a filter
string) and makes one row per (trace, judge assessment):

* a judge assessment is feedback whose name is one of ``judge_assessments`` and whose source is
  not HUMAN; the judge is the source's id (the assessment's name where the source has no id). Its
  value is the verdict when it reads as a pairwise label (``A``, ``model_b``, ``tie``, ...; see
  ``judgebias.tables.labels``), P(A) when it is a number in [0, 1]; its rationale becomes ``judge_reason``
  and an assessment error (the judge gave no verdict) ``judge_error``. Any other value is left out
  and counted (``assessment_not_pairwise``);
* human labels are the feedback named ``human_assessment`` from HUMAN sources (one per source);
* a trace with human labels but no judge assessment gives one row with an empty judge.

Where the prompt, responses and generators come from is a field spec per column: ``request.KEY``
(the root span's inputs; dots go deeper), ``response.KEY`` (its outputs), ``tag.NAME`` or
``metadata.NAME``. The defaults read the layout ``judgebias.tracking.judgment_traces`` writes; for traces
written in that layout the verdict, P(A), per-order figures, raw outputs and the row's other columns
are read from the span outputs (the assessment only names the judge), so a table logged and
imported again gives the same figures.

A trace invalidated in MLflow (``valid = False``, e.g. overridden in the UI) is not read; where one
(pair, judge) has several traces the newest is kept (``superseded_trace``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from judgebias.importers._common import finish
from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import Exclusions, TableError
from judgebias.tracking.judgment_traces import ASSESSMENT, LAYOUT, LAYOUT_TAG, ORDER_COLUMNS

TEXT_FIELDS = ("pair_id", "prompt", "response_a", "response_b", "generator_a", "generator_b")
DEFAULT_FIELDS = {c: f"request.{c}" for c in TEXT_FIELDS}
SPEC_KINDS = ("request", "response", "tag", "metadata")
PAGE = 200


def check_field_spec(spec: str) -> str:
    kind, _, rest = spec.partition(".")
    if kind not in SPEC_KINDS or (kind in ("tag", "metadata") and not rest):
        raise ValueError(f"field spec {spec!r} must be request[.KEY...], response[.KEY...], tag.NAME or "
                         "metadata.NAME")
    return spec


def _dig(value: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _root(trace: Any) -> Any:
    spans = trace.data.spans if trace.data else []
    return next((s for s in spans if s.parent_id is None), None)


def field(trace: Any, spec: str) -> Any:
    """The value a field spec names in one trace (None when absent)."""
    kind, _, rest = spec.partition(".")
    if kind == "tag":
        return trace.info.tags.get(rest)
    if kind == "metadata":
        return trace.info.trace_metadata.get(rest)
    root = _root(trace)
    if root is None:
        return None
    return _dig(root.inputs if kind == "request" else root.outputs, rest)


def _value(assessment: Any) -> tuple[dict[str, Any], str | None]:
    """(verdict/p_a fields, exclusion reason) of one judge assessment."""
    error = getattr(assessment, "error", None)
    value = getattr(assessment, "value", None)
    if value is None:
        message = getattr(error, "error_message", None) or getattr(error, "error_code", None)
        return {"verdict": None, "judge_error": message or "no value"}, None
    if isinstance(value, bool):
        return {}, "assessment_not_pairwise"
    if isinstance(value, (int, float)):
        if math.isfinite(value) and 0 <= value <= 1:
            return {"p_a": float(value)}, None
        return {}, "assessment_not_pairwise"
    try:
        verdict = normalize_label(value)
    except ValueError:
        return {}, "assessment_not_pairwise"
    return {"verdict": verdict}, None


def _judgebias_outputs(trace: Any) -> dict[str, Any]:
    """The columns the pairwise-v1 layout keeps in the root span's outputs."""
    out = field(trace, "response") or {}
    row = {k: out.get(k) for k in ("verdict", "p_a", "fold_rule", "ppl_a", "ppl_b", "judge_generator")}
    for order, (verdict, p_a, raw) in ORDER_COLUMNS.items():
        got = (out.get("orders") or {}).get(order) or {}
        row.update({verdict: got.get("verdict"), p_a: got.get("p_a"), raw: got.get("raw_output")})
    row["judge_error"] = out.get("exclusion_reason")
    row.update(out.get("extra") or {})
    return {k: v for k, v in row.items() if v is not None}


def assessment_source(assessment: Any) -> tuple[str, str]:
    """An assessment's (source type, source id), empty strings where MLflow has none."""
    source = assessment.source
    return str(getattr(source, "source_type", "") or ""), str(getattr(source, "source_id", "") or "")


def trace_rows(trace: Any, fields: Mapping[str, str], judge_assessments: Sequence[str],
               human_assessment: str | None, exclusions: Exclusions) -> list[dict[str, Any]]:
    """The table rows of one trace (none when it holds nothing to import; counted by reason)."""
    base = {c: field(trace, spec) for c, spec in fields.items()}
    if base.get("pair_id") is None:
        base["pair_id"] = trace.info.trace_id
    for c in ("pair_id", "prompt", "response_a", "response_b"):
        if not isinstance(base.get(c), str) or not base[c].strip():
            exclusions.add(f"missing_{c}")
            return []
    ours = trace.info.tags.get(LAYOUT_TAG) == LAYOUT
    if ours:
        base.update(_judgebias_outputs(trace))
    live = [a for a in (trace.info.assessments or []) if getattr(a, "valid", True) is not False]
    humans = [a for a in live if a.name == human_assessment and assessment_source(a)[0] == "HUMAN"]
    labels = []
    for a in sorted(humans, key=lambda a: (a.create_time_ms or 0)):
        try:
            label = normalize_label(getattr(a, "value", None))
        except ValueError:
            label = None
        if label is None:
            exclusions.add("human_label_not_pairwise")
        else:
            labels.append(label)
    base["human"] = labels
    rows = []
    for a in live:
        kind, source_id = assessment_source(a)
        if a.name not in judge_assessments or kind == "HUMAN":
            continue
        fields_, problem = _value(a)
        if problem:
            exclusions.add(problem)
            continue
        if ours:  # the span keeps what was logged (a verdict-less P(A) stays verdict-less)
            fields_ = {k: v for k, v in fields_.items() if k == "judge_error"}
        row = {**base, **fields_, "judge": source_id if source_id and source_id != "default" else a.name}
        if getattr(a, "rationale", None):
            row["judge_reason"] = a.rationale
        rows.append(row)
    return stamped(rows, base, bool(labels), trace, exclusions)


def stamped(rows: list[dict[str, Any]], base: dict[str, Any], has_humans: bool, trace: Any,
            exclusions: Exclusions) -> list[dict[str, Any]]:
    """One trace's rows, stamped with its time (the newest trace wins on import): a trace with only
    human feedback still gives one judge-less row; a trace with neither is counted, not read."""
    if not rows and has_humans:
        rows.append({**base, "judge": None})
    if not rows:
        exclusions.add("no_assessment")
    for row in rows:
        row["_time"] = trace.info.request_time or 0
    return rows


def _traces(experiment_id: str, filter_string: str | None) -> Iterable[Any]:
    from mlflow import MlflowClient

    client = MlflowClient()
    token = None
    while True:
        page = client.search_traces(locations=[experiment_id], filter_string=filter_string,
                                    max_results=PAGE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def newest_rows(experiment: str, fields: Mapping[str, str], filter_string: str | None, key: str,
                rows_of: Callable[[Any, Mapping[str, str], Exclusions], list[dict[str, Any]]],
                ) -> tuple[list[dict[str, Any]], Exclusions, str]:
    """The rows ``rows_of`` reads from each trace of an experiment, the newest trace per (``key``,
    judge) kept (a rerun that logged again supersedes), in (key, judge) order; with the exclusions
    and the source name every error of the table names."""
    import mlflow

    source = f"mlflow experiment {experiment!r}"
    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        raise TableError(source, ["no such experiment at the tracking URI"])
    try:
        spec = {c: check_field_spec(s) for c, s in fields.items()}
    except ValueError as exc:
        raise TableError(source, [str(exc)]) from None
    exclusions = Exclusions()
    rows: dict[tuple[str, str | None], dict[str, Any]] = {}
    n_traces = 0
    for trace in _traces(found.experiment_id, filter_string):
        n_traces += 1
        for row in rows_of(trace, spec, exclusions):
            at = (str(row[key]), row.get("judge"))
            if at in rows:
                exclusions.add("superseded_trace")
                if rows[at]["_time"] > row["_time"]:
                    continue
            rows[at] = row
    if not n_traces:
        raise TableError(source, ["the experiment holds no traces" + (f" matching {filter_string!r}"
                                                                       if filter_string else "")])
    ordered = sorted(rows.values(), key=lambda r: (str(r[key]), str(r.get("judge") or "")))
    for row in ordered:
        row.pop("_time")
    return ordered, exclusions, source


def read_judgment_traces(experiment: str, *, judge_assessments: Sequence[str] = (ASSESSMENT,),
                         human_assessment: str | None = ASSESSMENT, fields: Mapping[str, str] | None = None,
                         filter_string: str | None = None) -> tuple[pd.DataFrame, Exclusions]:
    """The judgment table of an MLflow experiment's traces (the tracking URI as configured)."""

    ordered, exclusions, source = newest_rows(
        experiment, {**DEFAULT_FIELDS, **(fields or {})}, filter_string, "pair_id",
        lambda trace, spec, exclusions: trace_rows(trace, spec, list(judge_assessments), human_assessment,
                                                   exclusions))
    return finish(ordered, source, exclusions)
