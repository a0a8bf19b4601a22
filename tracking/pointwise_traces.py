"""Pointwise judgments (one score per item and judge, ``judgebias.tables.pointwise``) as MLflow
traces, and such traces read back into a pointwise table.

One trace per row (layout ``pointwise-v1``, docs/mlflow-genai.md), written by the same batched,
idempotent writer as the pairwise layout (``judgebias.tracking.judgment_traces.log_records``):

* inputs: item id, prompt, response, generator, judge, criterion, the scale, the reference;
* outputs: the score, the most probable score, the score distribution, where the score came from,
  the raw output, the exclusion reason and the row's other plain columns (secret-looking names left
  out);
* assessments: the judge's score as feedback ``score`` from an LLM_JUDGE source named after the
  judge (an error instead of a value where the judge gave none), each human score as feedback
  ``score`` from a HUMAN source whose id is a hash of the rater (``human_raters`` where the table
  has it, else the rater's position on the item);
* tags: ``judgebias.item_id``, ``judgebias.judge``, ``judgebias.layout``, ``judgebias.key``.

Reading: the score, distribution and other outputs of a ``pointwise-v1`` trace come from its span
(the feedback names the judge), the human scores from its HUMAN feedback (sorted: the raters' order
is not kept, the figures do not depend on it). Traces of other layouts are read through field specs
as the pairwise reader does, their numeric feedback being the score.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from judgebias.redaction import secret_name
from judgebias.tables.pairwise import Exclusions
from judgebias.tables.pointwise import validate_pointwise
from judgebias.tracking.judgment_traces import (
    KEY_TAG,
    LAYOUT_TAG,
    MAX_TAG_CHARS,
    TAG,
    _plain,
    hash_annotator,
    log_records,
)
from judgebias.tracking.trace_import import assessment_source, field, newest_rows, stamped

LAYOUT = "pointwise-v1"
ASSESSMENT = "score"
INPUT_COLUMNS = ("item_id", "prompt", "response", "generator", "judge", "criterion", "scale_min",
                 "scale_max", "reference")
OUTPUT_COLUMNS = ("score", "score_argmax", "score_dist", "score_source", "raw_output", "judge_error")
HUMAN_COLUMNS = ("human_scores", "human_raters")
DEFAULT_FIELDS = {c: f"request.{c}" for c in ("item_id", "prompt", "response", "generator", "criterion",
                                               "scale_min", "scale_max", "reference")}


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def pointwise_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """What one trace records (inputs, outputs, tags, feedback) and its key."""
    get = {k: _plain(v) for k, v in row.items()}
    inputs = {c: get.get(c) for c in INPUT_COLUMNS}
    outputs = {c: get.get(c) for c in OUTPUT_COLUMNS}
    known = {*INPUT_COLUMNS, *OUTPUT_COLUMNS, *HUMAN_COLUMNS}
    outputs["extra"] = {k: v for k, v in get.items() if k not in known and not secret_name(k)
                        and (v is None or isinstance(v, (str, int, float, bool)))}
    humans = [float(h) for h in (get.get("human_scores") or []) if _number(h) is not None]
    raters = get.get("human_raters") or []
    if len(raters) != len(humans):
        raters = [f"{get['item_id']}#{i}" for i in range(len(humans))]
    judge = get.get("judge") or ""
    feedback = []
    if judge:
        score = _number(get.get("score"))
        error = None if score is not None else str(get.get("judge_error") or "no score")
        feedback.append((ASSESSMENT, score, "LLM_JUDGE", str(judge), error))
    feedback += [(ASSESSMENT, h, "HUMAN", hash_annotator(r), None)
                 for h, r in zip(humans, raters, strict=True)]
    tags = {LAYOUT_TAG: LAYOUT, TAG + "item_id": str(get["item_id"])[:MAX_TAG_CHARS],
            TAG + "judge": str(judge)[:MAX_TAG_CHARS]}
    record = {"inputs": inputs, "outputs": outputs, "tags": tags, "feedback": feedback}
    key = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]
    record["tags"][KEY_TAG] = key
    return record


def log_pointwise_traces(table: pd.DataFrame) -> dict[str, int]:
    """Log each row of a validated pointwise table as a trace in the active experiment (linked to
    the active run, if any). Counts: rows, logged, skipped (already there), missing."""
    return log_records([pointwise_record(r) for r in table.to_dict("records")], LAYOUT)


def log_pointwise_traces_or_warn(table: pd.DataFrame) -> tuple[dict[str, int] | None, str | None]:
    """``log_pointwise_traces``, with a server that refuses them turned into a warning: the run's
    figures are already logged and it stays a success. (counts or None, the warning or None)."""
    from mlflow.exceptions import MlflowException

    try:
        return log_pointwise_traces(table), None
    except MlflowException as exc:
        return None, f"MLflow refused the traces, none or only some logged: {exc}"


def _score(assessment: Any) -> tuple[float | None, str | None, str | None]:
    """(score, judge_error, problem) of one judge feedback."""
    value = getattr(assessment, "value", None)
    if value is None:
        error = getattr(assessment, "error", None)
        message = getattr(error, "error_message", None) or getattr(error, "error_code", None)
        return None, message or "no value", None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, None, "assessment_not_a_score"
    return float(value), None, None


def pointwise_trace_rows(trace: Any, fields: Mapping[str, str], judge_assessments: Sequence[str],
                         human_assessment: str | None, exclusions: Exclusions) -> list[dict[str, Any]]:
    """The pointwise rows of one trace: one per judge feedback (or one judge-less row for human
    scores alone); none when it holds nothing to import, counted by reason."""
    base = {c: field(trace, spec) for c, spec in fields.items()}
    if base.get("item_id") is None:
        base["item_id"] = trace.info.trace_id
    ours = trace.info.tags.get(LAYOUT_TAG) == LAYOUT
    if ours:
        out = field(trace, "response") or {}
        base.update({k: out.get(k) for k in OUTPUT_COLUMNS if out.get(k) is not None})
        base.update(out.get("extra") or {})
    live = [a for a in (trace.info.assessments or []) if getattr(a, "valid", True) is not False]
    humans = []
    for a in live:
        if a.name == human_assessment and assessment_source(a)[0] == "HUMAN":
            score, _, problem = _score(a)
            if score is None:
                exclusions.add(problem or "human_score_missing")
            else:
                humans.append(score)
    base["human_scores"] = sorted(humans)
    rows = []
    for a in live:
        kind, source_id = assessment_source(a)
        if a.name not in judge_assessments or kind == "HUMAN":
            continue
        score, error, problem = _score(a)
        if problem:
            exclusions.add(problem)
            continue
        row = {**base, "judge": source_id if source_id and source_id != "default" else a.name}
        if not ours:  # our span keeps the score as logged; a foreign trace has only the feedback
            row.update(score=score, judge_error=error)
        rows.append(row)
    return stamped(rows, base, bool(humans), trace, exclusions)


def read_pointwise_traces(experiment: str, *, judge_assessments: Sequence[str] = (ASSESSMENT,),
                          human_assessment: str | None = ASSESSMENT, fields: Mapping[str, str] | None = None,
                          filter_string: str | None = None) -> tuple[pd.DataFrame, Exclusions]:
    """The pointwise table of an MLflow experiment's traces; the newest trace per (item, judge)."""
    ordered, exclusions, source = newest_rows(
        experiment, {**DEFAULT_FIELDS, **(fields or {})}, filter_string, "item_id",
        lambda trace, spec, exclusions: pointwise_trace_rows(trace, spec, list(judge_assessments),
                                                             human_assessment, exclusions))
    table, more = validate_pointwise(pd.DataFrame(ordered), source=source, skip_invalid=True)
    return table, exclusions.merge(more)


def experiment_layouts(experiment: str) -> set[str]:
    """Which judgebias layouts (pairwise-v1, pointwise-v1) the experiment's traces carry."""
    import mlflow
    from mlflow import MlflowClient

    found = mlflow.get_experiment_by_name(experiment)
    if found is None:
        return set()
    client = MlflowClient()
    out = set()
    for layout in ("pairwise-v1", LAYOUT):
        page = client.search_traces(locations=[found.experiment_id], include_spans=False, max_results=1,
                                    filter_string=f"tag.`{LAYOUT_TAG}` = '{layout}'")
        if len(page):
            out.add(layout)
    return out
