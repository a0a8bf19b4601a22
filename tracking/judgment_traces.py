"""Every judgment of a table as an MLflow trace, browsable and filterable in MLflow's own UI.

One trace per (pair, judge) row, a single root span ``judgment`` (layout ``pairwise-v1``, written
out in docs/mlflow-genai.md):

* inputs: pair id, prompt, both responses, generators, judge, and which response each
  presentation order showed first (by name: the texts are not stored twice);
* outputs: the verdict, P(A), per order the verdict, P(A) and raw output, the exclusion reason,
  perplexities and the row's other columns (secret-looking names left out);
* assessments: the judge's verdict as feedback ``preference`` from an LLM_JUDGE source named after
  the judge (an error instead of a value when the judge gave none), each human label as feedback
  ``preference`` from a HUMAN source whose id is a hash of the annotator id (never the raw id);
* tags for the UI's filter box: ``judgebias.own_response`` (a/b/both/none), ``judgebias.position_flip``
  (true/false where both orders give a choice), ``judgebias.judge_human_disagree`` (true/false where
  the judge chose and the humans have a majority), ``judgebias.perturbation`` where the table says.

Batched. Into a database tracking URI, 200 traces per transaction with one INSERT per MLflow table
(``judgebias.tracking.trace_bulk``). Through a tracking server, with MLflow's tracing client the
way its own exporter sends them, minus the live OpenTelemetry span per row: one request per trace
for its info, feedback and tags (several in flight: MLflow's REST API has no batch call for trace
infos or assessments, and its OTLP endpoint, which takes many traces a request, carries no
assessments, client request id or trace metadata), one OTLP request per 200 traces for the spans.
MLflow's asynchronous exporter would send two requests per trace, in the order that makes its
store merge row by row, and drop what overflows its queue with a warning.

Idempotent: each trace carries ``judgebias.key``, a hash of everything it records, and its trace id
is derived from that key and the experiment; keys already in the experiment are fetched once
before logging and their rows skipped. A row whose content changed (a new human label) is logged
again under a new key; the reader keeps the newest trace per (pair, judge). After logging the
experiment is searched again, so a trace that did not arrive is reported, not assumed.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from judgebias.metrics.origin import SelfMap, own_sides
from judgebias.redaction import secret_name
from judgebias.tables.labels import majority, normalize_label

LAYOUT = "pairwise-v1"
ASSESSMENT = "preference"
SPAN_NAME = "judgment"
TAG = "judgebias."
KEY_TAG, LAYOUT_TAG = TAG + "key", TAG + "layout"
CHUNK = 200  # traces per span request
THREADS = 8  # trace-info requests in flight
PREVIEW_CHARS = 1000
MAX_TAG_CHARS = 250
INPUT_COLUMNS = ("pair_id", "prompt", "response_a", "response_b", "generator_a", "generator_b", "judge")
OUTPUT_COLUMNS = ("verdict", "p_a", "fold_rule", "ppl_a", "ppl_b", "judge_generator")
ORDER_COLUMNS = {"ab": ("verdict_ab", "p_a_ab", "raw_ab"), "ba": ("verdict_ba", "p_a_ba", "raw_ba")}
EXCLUSION_COLUMNS = ("judge_error",)
HUMAN_COLUMNS = ("human", "annotators", "human_annotators")
_SHOWN = {"ab": {"first": "response_a", "second": "response_b"},
          "ba": {"first": "response_b", "second": "response_a"}}


def _plain(value: Any) -> Any:
    """A JSON-able value: NaN/NA -> None, numpy scalars and arrays -> Python."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


def hash_annotator(annotator: object) -> str:
    """The id a HUMAN feedback carries: a hash, so a label can be told apart from another
    annotator's without the raw id (an e-mail, a Label Studio user) reaching MLflow."""
    return "annotator-" + hashlib.sha256(str(annotator).encode()).hexdigest()[:16]


def _choice(verdict: Any, p: Any) -> str | None:
    if verdict is not None:
        return verdict
    if p is None:
        return None
    return "a" if p > 0.5 else "b" if p < 0.5 else "tie"


def _own(table: pd.DataFrame, self_map: SelfMap | None) -> np.ndarray:
    """Per row: 'a', 'b', 'both' or 'none': which response the row's judge wrote (its name, the
    caller's self map, the table's judge_generator), read through judgebias.metrics.origin."""
    out = np.full(len(table), "none", dtype=object)
    if "judge" not in table.columns:
        return out
    judges = table["judge"].to_numpy(dtype=object)
    for judge in pd.unique(judges[pd.notna(judges)]):
        mask = judges == judge
        rows = table.loc[mask]
        own_a, own_b = own_sides(rows, str(judge), self_map)
        out[mask] = np.where(own_a & own_b, "both", np.where(own_a, "a", np.where(own_b, "b", "none")))
    return out


def _humans(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, hashed annotator) per human label of the row; annotators from the table's
    ``annotators``/``human_annotators`` list where it lines up, else by position in the pair."""
    labels = [normalize_label(x) for x in (_plain(row.get("human")) or [])]
    who = _plain(row.get("annotators")) or _plain(row.get("human_annotators")) or []
    if len(who) != len(labels):
        who = [f"{row['pair_id']}#{i}" for i in range(len(labels))]
    return [(lab, hash_annotator(w)) for lab, w in zip(labels, who, strict=True) if lab is not None]


def judgment_record(row: Mapping[str, Any], own: str) -> dict[str, Any]:
    """What one trace records, as plain data (inputs, outputs, tags, assessments) and its key."""
    get = {k: _plain(v) for k, v in row.items()}
    inputs = {c: get.get(c) for c in INPUT_COLUMNS}
    orders = {o: dict(zip(("verdict", "p_a", "raw_output"), (get.get(c) for c in cols), strict=True))
              for o, cols in ORDER_COLUMNS.items()}
    orders = {o: v for o, v in orders.items() if any(x is not None for x in v.values())}
    inputs["shown"] = {o: _SHOWN[o] for o in (orders or {"ab": None})}
    known = {*INPUT_COLUMNS, *OUTPUT_COLUMNS, *EXCLUSION_COLUMNS, *HUMAN_COLUMNS,
             *(c for cols in ORDER_COLUMNS.values() for c in cols)}
    extra = {k: v for k, v in get.items() if k not in known and not secret_name(k)
             and (v is None or isinstance(v, (str, int, float, bool)))}
    outputs = {c: get.get(c) for c in OUTPUT_COLUMNS}
    outputs["orders"] = orders
    outputs["exclusion_reason"] = get.get("judge_error")
    outputs["extra"] = extra
    humans = _humans(get)
    choice = _choice(get.get("verdict"), get.get("p_a"))
    per_order = [_choice(v["verdict"], v["p_a"]) for v in orders.values()]
    tags = {LAYOUT_TAG: LAYOUT, TAG + "pair_id": str(get["pair_id"])[:MAX_TAG_CHARS],
            TAG + "judge": str(get.get("judge") or "")[:MAX_TAG_CHARS], TAG + "own_response": own}
    if len(per_order) == 2 and None not in per_order:
        tags[TAG + "position_flip"] = str(per_order[0] != per_order[1]).lower()
    human_majority = majority([lab for lab, _ in humans])
    if choice is not None and human_majority is not None and get.get("judge"):
        tags[TAG + "judge_human_disagree"] = str(choice != human_majority).lower()
    if get.get("perturbation") is not None:
        tags[TAG + "perturbation"] = str(get["perturbation"])[:MAX_TAG_CHARS]
    record = {"inputs": inputs, "outputs": outputs, "tags": tags, "humans": humans, "choice": choice}
    key = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:32]
    record["tags"][KEY_TAG] = key
    return record


def judgment_records(table: pd.DataFrame, self_map: SelfMap | None = None) -> list[dict[str, Any]]:
    own = _own(table, self_map)
    return [judgment_record(row, own[i]) for i, row in enumerate(table.to_dict("records"))]


def existing_keys(experiment_id: str, client: Any = None, layout: str = LAYOUT) -> set[str]:
    """Keys of the judgebias traces of ``layout`` already in the experiment (trace infos only)."""
    from mlflow import MlflowClient

    client = client or MlflowClient()
    keys: set[str] = set()
    token = None
    while True:
        page = client.search_traces(locations=[experiment_id], include_spans=False, max_results=500,
                                    filter_string=f"tag.`{LAYOUT_TAG}` = '{layout}'", page_token=token)
        keys.update(t.info.tags[KEY_TAG] for t in page if KEY_TAG in t.info.tags)
        token = page.token
        if not token:
            return keys


def _short(value: Any, chars: int) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"


def request_text(record: Mapping[str, Any]) -> str:
    """The trace list's request column in words (it showed the inputs' raw JSON): who judged which
    pair, the prompt and both responses, each cut short."""
    i = record["inputs"]
    who = f"{i.get('judge')} judges pair {i.get('pair_id')}" if i.get("judge") else f"pair {i.get('pair_id')}"
    side = {}
    for s in ("a", "b"):
        by = i.get(f"generator_{s}")
        side[s] = f"{s.upper()}{f' ({by})' if by else ''}: {_short(i.get(f'response_{s}'), 200)}"
    return f"{who}. Prompt: {_short(i.get('prompt'), 300)} | {side['a']} | {side['b']}"


def _p(value: Any) -> str:
    return f"{value:.5g}" if isinstance(value, (int, float)) and value == value else ""


def verdict_text(record: Mapping[str, Any]) -> str:
    """The verdict in words with the P(A) it was read from and each order's: "b (P(A) 0.49999; A
    first: a at 0.6, B first: b at 0.4)"; a bare "b" at P(A) 0.49999 read as a firm choice."""
    out, choice = record["outputs"], record["choice"]
    orders = {"ab": "A first", "ba": "B first"}
    parts = []
    for o, v in (out.get("orders") or {}).items():
        p = _p(v.get("p_a"))
        parts.append(f"{orders[o]}: {v.get('verdict') or _choice(None, v.get('p_a')) or '-'}"
                     + (f" at P(A) {p}" if p else ""))
    if not record["inputs"].get("judge"):
        head = "no judge: human labels only"
    elif choice is None:
        head = f"no verdict ({out.get('exclusion_reason') or 'none given'})"
    else:
        head = choice + (f" at P(A) {_p(out.get('p_a'))}" if _p(out.get("p_a")) else "")
    return head + (f" ({'; '.join(parts)})" if parts else "")


def _trace_id(key: str, experiment_id: str) -> str:
    """Deterministic: the same judgment in the same experiment is the same trace (a second write
    updates it, never duplicates it); another experiment gets its own (MLflow would otherwise move
    the trace over)."""
    return "tr-" + hashlib.sha256(f"{experiment_id}\x1f{key}".encode()).hexdigest()[:32]


def _feedback(record: Mapping[str, Any], trace_id: str) -> list[Any]:
    from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Feedback

    # another layout's (judgebias.tracking.pointwise_traces): (name, value, kind, id, error)
    if "feedback" in record:
        return [Feedback(name=name, value=value, trace_id=trace_id,
                         error=AssessmentError(error_code="NO_VERDICT", error_message=error)
                         if error else None,
                         source=AssessmentSource(getattr(AssessmentSourceType, kind), source_id))
                for name, value, kind, source_id, error in record["feedback"]]
    out = []
    judge = record["inputs"].get("judge")
    if judge:
        error = None
        if record["choice"] is None:
            reason = record["outputs"]["exclusion_reason"] or "no verdict"
            error = AssessmentError(error_code="NO_VERDICT", error_message=str(reason))
        # The value stays the choice (what the import reads back); the rationale says how firm it was.
        out.append(Feedback(name=ASSESSMENT, value=record["choice"], error=error, trace_id=trace_id,
                            rationale=verdict_text(record) if error is None else None,
                            source=AssessmentSource(AssessmentSourceType.LLM_JUDGE, str(judge))))
    for label, annotator in record["humans"]:
        out.append(Feedback(name=ASSESSMENT, value=label, trace_id=trace_id,
                            source=AssessmentSource(AssessmentSourceType.HUMAN, annotator)))
    return out


def _trace(record: Mapping[str, Any], experiment_id: str, run_id: str | None, now_ns: int) -> tuple[Any, Any]:
    """(TraceInfo with its feedback and tags, root Span), built as MLflow's own exporter would send
    them, so both can go to the store without a live OpenTelemetry span per row."""
    from mlflow.entities import SpanType, TraceInfo, TraceLocation, TraceState
    from mlflow.entities.span import Span
    from mlflow.tracing.constant import (
        TRACE_SCHEMA_VERSION,
        TRACE_SCHEMA_VERSION_KEY,
        SpanAttributeKey,
        TraceMetadataKey,
        TraceTagKey,
    )

    key = record["tags"][KEY_TAG]
    trace_id = _trace_id(key, experiment_id)
    inputs = json.dumps(record["inputs"], default=str)
    outputs = json.dumps(record["outputs"], default=str)
    span = Span.from_dict({
        "trace_id": trace_id, "span_id": trace_id[3:19], "parent_span_id": None, "name": SPAN_NAME,
        "start_time_unix_nano": now_ns, "end_time_unix_nano": now_ns, "events": [], "links": [],
        "status": {"code": "STATUS_CODE_OK", "message": ""},
        "attributes": {SpanAttributeKey.REQUEST_ID: json.dumps(trace_id),
                       SpanAttributeKey.SPAN_TYPE: json.dumps(SpanType.EVALUATOR),
                       SpanAttributeKey.INPUTS: inputs, SpanAttributeKey.OUTPUTS: outputs},
    })
    # A pairwise judgment's previews in words; another layout's (pointwise) keep its JSON.
    pairwise = "feedback" not in record
    request = request_text(record) if pairwise else inputs
    response = verdict_text(record) if pairwise else outputs
    metadata = {TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION)}
    if run_id:
        metadata[TraceMetadataKey.SOURCE_RUN] = run_id  # the run page's Traces tab lists it
    info = TraceInfo(trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment_id),
                     request_time=now_ns // 1_000_000, execution_duration=0, state=TraceState.OK,
                     client_request_id=key, request_preview=request[:PREVIEW_CHARS],
                     response_preview=response[:PREVIEW_CHARS], trace_metadata=metadata,
                     tags={**record["tags"], TraceTagKey.TRACE_NAME: SPAN_NAME},
                     assessments=_feedback(record, trace_id))
    return info, span


def _write(todo: list[Mapping[str, Any]], experiment_id: str, run_id: str | None,
           threads: int = THREADS, bulk: bool = True) -> None:
    """Each trace's info (with its feedback and tags) in one request, ``threads`` at a time, then the
    spans CHUNK traces per request. The info goes first: the store then inserts it in one flush,
    where spans first would make it merge row by row. A failing request raises. With a database
    tracking URI (and ``bulk``) each chunk is one transaction of one INSERT per table instead
    (``judgebias.tracking.trace_bulk``), the public path taking over where it refuses."""
    from mlflow.tracing.client import TracingClient

    from judgebias.tracking.trace_bulk import sql_store, write_chunk

    client = TracingClient()
    store = sql_store() if bulk else None
    now_ns = time.time_ns()
    pool = ThreadPoolExecutor(threads)
    try:
        for start in range(0, len(todo), CHUNK):
            built = [_trace(r, experiment_id, run_id, now_ns) for r in todo[start: start + CHUNK]]
            if store is not None and write_chunk(store, experiment_id, built):
                continue
            store = None  # refused once: the rest goes the public way too
            list(pool.map(client.start_trace, [info for info, _ in built]))
            client.log_spans(experiment_id, [span for _, span in built])
    finally:
        # A request that failed (its retries spent) ends the logging: the queued ones are dropped,
        # not each retried against a store that just failed (a dead server held analyze 12 minutes).
        pool.shutdown(wait=True, cancel_futures=True)


def log_judgment_traces(table: pd.DataFrame, *, self_map: SelfMap | None = None,
                        threads: int = THREADS, bulk: bool = True) -> dict[str, int]:
    """Log each row of ``table`` as a trace in the active experiment; inside an active run the
    traces are linked to it. Returns counts: rows, logged, skipped (already there), missing
    (written but not found by the search afterwards)."""
    records = judgment_records(table, self_map)
    return {**log_records(records, LAYOUT, threads=threads, bulk=bulk), **flag_counts(records)}


DISAGREEMENT_SAMPLE = 200  # a table too large for a trace per row logs at most this many disagreements


def disagreement_records(table: pd.DataFrame, self_map: SelfMap | None = None,
                         cap: int = DISAGREEMENT_SAMPLE) -> tuple[list[dict[str, Any]], int]:
    """(at most ``cap`` records of rows where the judge disagrees with the humans' majority, how many
    such rows there are): for a table too large for a trace per row, the traces that answer the
    question a user asks of human labels first. The sample is the records with the smallest trace
    keys (a hash of the row), so a rerun picks the same rows."""
    if cap < 1:
        raise ValueError(f"cap must be at least 1, not {cap}")
    found = [r for r in judgment_records(table, self_map)
             if r["tags"].get(TAG + "judge_human_disagree") == "true"]
    found.sort(key=lambda r: r["tags"][KEY_TAG])
    return found[:cap], len(found)


def disagreements_note(logged: int, total: int, rows: int, experiment_id: str) -> str:
    """Markdown for a run's description: the sample of disagreements logged as traces, named as a
    sample, with the link to the experiment's Traces page filtered on them."""
    page = filtered_page(traces_page(None, experiment_id), TAG + "judge_human_disagree", "true")
    sample = ("all" if logged == total
              else f"a sample of {logged} (capped at {DISAGREEMENT_SAMPLE}, by trace key)")
    return (f"**Traces: {sample} of the {total} judgments where the judge disagrees with the humans' "
            f"majority** ([open them]({page})); the table's other {rows - logged} of {rows} judgments "
            "are not logged as traces (too many for a trace each).\n\n"
            f"      {filter_strings()['judge disagrees with the humans']}\n")


def log_records(records: list[Mapping[str, Any]], layout: str, *, threads: int = THREADS,
                bulk: bool = True) -> dict[str, int]:
    """Log trace records (``judgment_record``'s shape) of ``layout`` in the active experiment,
    skipping the keys already there; counts as ``log_judgment_traces`` returns them."""
    import mlflow
    from mlflow.tracking.fluent import _get_experiment_id

    # The experiment mlflow.start_span would resolve (the active run's, else the active one).
    experiment_id = _get_experiment_id()
    before = existing_keys(experiment_id, layout=layout)
    todo = list({r["tags"][KEY_TAG]: r for r in records if r["tags"][KEY_TAG] not in before}.values())
    run = mlflow.active_run()
    _write(todo, experiment_id, run.info.run_id if run else None, threads, bulk)
    after = existing_keys(experiment_id, layout=layout) if todo else before
    missing = sum(r["tags"][KEY_TAG] not in after for r in todo)
    return {"rows": len(records), "logged": len(todo) - missing, "skipped": len(records) - len(todo),
            "missing": missing}


def flag_counts(records: list[Mapping[str, Any]]) -> dict[str, int]:
    """How many traces each filter of ``filter_strings`` finds."""
    tags = [r["tags"] for r in records]

    def count(name: str, test) -> int:
        return sum(bool(test(t.get(TAG + name))) for t in tags)

    return {"position flips": count("position_flip", lambda v: v == "true"),
            "judge disagrees with the humans": count("judge_human_disagree", lambda v: v == "true"),
            # Where the question can be asked at all: the judge chose and the humans have a majority.
            HUMAN_MAJORITY: count("judge_human_disagree", lambda v: v is not None),
            "the judge's own response is A or B": count("own_response", lambda v: v not in (None, "none"))}


HUMAN_MAJORITY = "rows with a judge's choice and a human majority"
NO_HUMAN_MAJORITY = ("no judgment has human labels with a majority to compare the judge with, so none can "
                     "disagree with the humans")
# The usual questions: (what a user asks, the tag, the operator, the value); the filters are built
# from these.
QUESTIONS = {
    "position flips": ("the judge flips with the order", "position_flip", "=", "true"),
    "judge disagrees with the humans": ("the judge disagrees with the humans' majority",
                                        "judge_human_disagree", "=", "true"),
    "the judge's own response is A or B": ("the judge's own response is A or B",
                                           "own_response", "!=", "none"),
}


def ui_base(tracking_uri: str) -> str:
    """Where the MLflow UI is: the tracking server, or ``mlflow ui``'s default address for a
    local store (a file or database URI has no UI of its own)."""
    from judgebias.redaction import uri_without_credentials

    uri = str(tracking_uri)
    # A link never holds the credentials a URI may carry: the browser asks for them itself.
    return uri_without_credentials(uri).rstrip("/") if uri.startswith(("http://", "https://")) \
        else "http://127.0.0.1:5000"


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page: on the tracking server, or on ``mlflow ui``'s default address for a local
    store. A direct link: a fresh UI otherwise opens an experiment on its traces view."""
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}"


ALL_TIME = "startTimeLabel=ALL"  # MLflow's Traces page shows the last 7 days unless told otherwise


def traces_page(tracking_uri: str | None, experiment_id: str) -> str:
    """The experiment's Traces page in MLflow's UI, unfiltered and over all time (``filtered_page``
    narrows it). ``tracking_uri`` None: the link relative to the UI showing it (``#/experiments/...``),
    what a run's description holds, so it works on whichever host and port serve that UI."""
    from urllib.parse import quote

    route = f"#/experiments/{quote(str(experiment_id), safe='')}/traces?{ALL_TIME}"
    return route if tracking_uri is None else f"{ui_base(tracking_uri)}/{route}"


def filtered_page(page: str, tag: str, value: str) -> str:
    """``page`` (an experiment's Traces page) listing only the traces whose tag ``tag`` is ``value``.
    MLflow 3.17's page reads ``tag=KEY=VALUE`` parameters after its route (each half URI-encoded)
    into ``tags.`KEY` = 'VALUE'`` clauses; it has no other operator there, and the filters chosen
    under its Filter button stay out of the URL. ``startTimeLabel=ALL``: by default the page shows
    the last 7 days only."""
    from urllib.parse import quote, urlencode

    pair = f"{quote(tag, safe='')}={quote(value, safe='')}"
    if page.endswith("?" + ALL_TIME):
        return page + "&" + urlencode({"tag": pair})
    return page + "?" + urlencode({"startTimeLabel": "ALL", "tag": pair})


def trace_questions(counts: Mapping[str, int], page: str | None) -> list[dict[str, str]]:
    """Per usual question: what it asks with how many traces answer it, the filter that finds them,
    and a link to the page listing just those (empty where the page cannot filter by it)."""
    out = []
    for what, filter_string in filter_strings().items():
        _, tag, op, value = QUESTIONS[what]
        if what == "judge disagrees with the humans" and counts.get(HUMAN_MAJORITY) == 0:
            # "0 judgments" would read as perfect agreement: say why the question has no answer
            out.append({"text": NO_HUMAN_MAJORITY, "url": "", "filter": ""})
            continue
        out.append({"text": f"{counts.get(what, 0)} judgments where {QUESTIONS[what][0]}",
                    "url": filtered_page(page, TAG + tag, value) if page and op == "=" else "",
                    "filter": filter_string})
    return out


def traces_note(counts: Mapping[str, int], page: str | None = None) -> str:
    """Markdown for a run's description: a link to the experiment's Traces page (``page``; by
    default the active run's experiment, relative to the UI showing the description), then per
    question how many traces it finds, a link to the page showing just those where the page can
    filter by it (an equal tag), and its filter."""
    if page is None:
        import mlflow

        run = mlflow.active_run()
        page = traces_page(None, run.info.experiment_id) if run else None
    where = f"[the experiment's Traces page]({page})" if page else "the experiment's Traces tab"
    lines = [f"**{counts['rows']} judgments are logged as traces** (this run's Traces tab, and {where}; "
             "each filter below finds them with `mlflow.search_traces` or `judgebias import mlflow "
             "--filter`, and on the page is a tag filter under its Filter button):", ""]
    for q in trace_questions(counts, page):
        link = f" ([open them]({q['url']}))" if q["url"] else ""
        lines += [f"- {q['text']}{link}", ""] + ([f"      {q['filter']}", ""] if q["filter"] else [])
    return "\n".join(lines)


def filter_strings() -> dict[str, str]:
    """The MLflow search filters for the usual questions (the UI's traces search box takes them)."""
    return {what: f"tag.`{TAG}{tag}` {op} '{value}'" for what, (_, tag, op, value) in QUESTIONS.items()}


__all__ = ["ASSESSMENT", "DISAGREEMENT_SAMPLE", "LAYOUT", "disagreement_records", "disagreements_note",
           "existing_keys", "filter_strings", "filtered_page", "flag_counts",
           "hash_annotator", "judgment_records", "log_judgment_traces", "log_records", "request_text",
           "run_url",
           "trace_questions", "traces_note",
           "traces_page", "ui_base", "verdict_text"]
