"""Logging an ``analyze`` result to MLflow, and the general helpers other runs reuse.

Metric names: ``<judge>.<metric>`` for the value, plus ``.ci_low``, ``.ci_high``, ``.n``,
``.p_value`` and, for a test of the judge's statement family, ``.p_adjusted``; except where the
metric's key alone would not say what the number is (the figure registry's ``mlflow_value``,
``judgebias.metrics.registry``: the regression's value is its McFadden pseudo-R2); the sub-estimates
the registry names (``mlflow_parts``: EO's TPR and TNR, DBG's two win rates) as
``<judge>.<metric>.<part>``; regression terms as ``<judge>.regression.<term>.coef`` (and interval, p-values);
the humans' verbosity as ``humans.share_preferring_longer``; dataset figures as ``dataset.<name>``.
Names are sanitized to MLflow's alphabet; a judge or model name that MLflow would refuse in a key
(``.``, ``..``, ``../x``, a leading ``/``, 300 characters) or that sanitizing would change stands
in a key as ``name_key``'s form (the plot files' stem: characters kept, a short hash). NaN/None
are left out (MLflow would store NaN as a number; a missing metric is the honest record).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from judgebias.metrics import registry
from judgebias.redaction import redact_uris, secret_name

_NAME_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")
MAX_PARAM_CHARS = 6000
MAX_KEY_CHARS = 250  # MLflow's longest metric or param name
NAME_KEY_CHARS = 100  # a name kept as it is in a key leaves room for the figure's part
BATCH = 500
ESTIMATE_PARTS = ("value", "ci_low", "ci_high", "n", "p_value", "p_adjusted")
HUMANS_VERBOSITY = "humans.share_preferring_longer"
JUDGE_TAG = "judgebias.judge"  # on each judge's nested run: the judge's name as it is in the data
# The parent run's description says, in one sentence, where judges line up across runs.
COMPARE_JUDGES = ("To compare a judge across runs, search the experiment's runs for "
                  "`tags.judgebias.judge = 'JUDGE'` (or open this run's nested `judge:` runs): their "
                  "metrics carry no judge in the name, so MLflow's compare view lines them up.")


def sanitize(name: str) -> str:
    """An MLflow-acceptable metric/param name (letters, digits, ``_ - . / space``)."""
    clean = _NAME_BAD.sub("_", str(name)).strip()
    return clean or "_"


def mlflow_key_ok(key: str) -> bool:
    """Whether MLflow takes ``key`` as a metric or param name: its alphabet, at most
    ``MAX_KEY_CHARS``, and a path that normalizes to itself without climbing (MLflow refuses
    ``..x``, ``a/./b``, ``a//b`` and a leading ``/``)."""
    return (bool(key) and len(key) <= MAX_KEY_CHARS and not _NAME_BAD.search(key)
            and posixpath.normpath(key) == key and not key.startswith(("..", "/")) and key != ".")


def name_key(name: object) -> str:
    """A judge's or model's name as one part of an MLflow key: the name itself where MLflow takes it
    unchanged in a key (``org/model`` keeps its folder), else the name's file stem (the plot files'
    form: ``[A-Za-z0-9._-]``, at most 80 characters, a short hash so two names never share a key),
    led by ``_`` where it would begin with a dot."""
    from judgebias.display import file_stem

    text = str(name)
    if len(text) <= NAME_KEY_CHARS and sanitize(text) == text and mlflow_key_ok(text + ".x") \
            and not text.startswith("."):
        return text
    stem = file_stem(text)
    return "_" + stem if stem.startswith(".") else stem


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def estimate_metrics(prefix: str, est: Mapping[str, Any]) -> dict[str, float]:
    """``prefix`` = value, ``prefix.ci_low`` ... of one estimate dict (finite numbers only)."""
    out = {}
    for part in ESTIMATE_PARTS:
        v = est.get(part)
        if finite(v):
            out[prefix if part == "value" else f"{prefix}.{part}"] = float(v)
    return out


def finite_fields(record: Mapping[str, Any] | None, keys: Iterable[str], prefix: str) -> dict[str, float]:
    """``prefix.key`` = the record's number, for each of ``keys`` whose value is finite."""
    record = record or {}
    return {f"{prefix}.{k}": float(record[k]) for k in keys if finite(record.get(k))}


def judge_records(result: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(judge, figure key, record) for every figure record of an ``analyze`` result, pairwise or
    pointwise (the judge's ``skipped`` list and non-record values left out)."""
    for judge, figures in (result.get("judges") or {}).items():
        for key, rec in figures.items():
            if key != "skipped" and isinstance(rec, Mapping):
                yield judge, key, rec


def judge_figure_metrics(result: Mapping[str, Any], judge: str) -> dict[str, float]:
    """One judge's figures of an ``analyze`` result under names without the judge (``verbosity_bias``,
    ``verbosity_bias.ci_low``, ``lc_win_rate.<model>``, ...): the names of its nested run, the same
    for every judge, so MLflow's compare view lines judges of different runs up column by column.
    The parent run's names are these behind ``<name_key(judge)>.`` (``flatten_metrics``)."""
    out: dict[str, float] = {}
    for name, est in ((key, rec) for j, key, rec in judge_records(result) if j == judge):
        fig = registry.FIGURES.get(name)
        out.update(estimate_metrics(fig.mlflow_name if fig else name, est))
        for term, t in (est.get("terms") or {}).items():
            out.update(finite_fields(t, ("coef", "ci_low", "ci_high", "p_value", "p_adjusted"),
                                     f"{name}.{term}"))
        for sub in fig.mlflow_parts if fig else ():
            if isinstance(est.get(sub), Mapping):
                out.update(estimate_metrics(f"{name}.{sub}", est[sub]))
    for r in (result.get("length_controlled") or {}).get("rates") or []:
        if r["judge"] == judge:
            prefix = f"lc_win_rate.{name_key(r['model'])}"
            out.update(estimate_metrics(prefix, r))
            out.update(estimate_metrics(f"{prefix}.raw", r["raw_win_rate"]))
    return {sanitize(k): v for k, v in out.items()}


def result_judges(result: Mapping[str, Any]) -> list[str]:
    """The judges of an ``analyze`` result, in its order (those only in the length-controlled rates
    after)."""
    rates = (result.get("length_controlled") or {}).get("rates") or []
    return list(dict.fromkeys([*(result.get("judges") or {}), *(r["judge"] for r in rates)]))


def metrics_by_judge(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each judge's figures under names without the judge (``judge_figure_metrics``)."""
    return {judge: judge_figure_metrics(result, judge) for judge in result_judges(result)}


def behind_judges(per_judge: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The parent run's names: each judge's names behind ``<name_key(judge)>.``."""
    return {f"{name_key(judge)}.{k}": v for judge, metrics in per_judge.items() for k, v in metrics.items()}


def flatten_metrics(result: Mapping[str, Any],
                    per_judge: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """Every figure of an ``analyze`` result as flat, sanitized MLflow metric names (``per_judge``:
    ``metrics_by_judge(result)`` when the caller has it already)."""
    out = behind_judges(metrics_by_judge(result) if per_judge is None else per_judge)
    humans = (result.get("humans") or {}).get("verbosity")
    if isinstance(humans, Mapping):
        out.update(estimate_metrics(HUMANS_VERBOSITY, humans))
    out.update(finite_fields(result.get("dataset"), ("rows", "pairs", "human_labelled_pairs"), "dataset"))
    return {sanitize(k): v for k, v in out.items()}


def log_metrics_dict(metrics: Mapping[str, float], *, step: int | None = None) -> int:
    """Log finite metrics in batches; returns how many were logged."""
    import mlflow

    items = [(sanitize(k), float(v)) for k, v in metrics.items() if finite(v)]
    for i in range(0, len(items), BATCH):
        mlflow.log_metrics(dict(items[i: i + BATCH]), step=step)
    return len(items)


def safe_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Params as strings, secret-looking keys dropped, values cut to MLflow's length limit."""
    out = {}
    for k, v in params.items():
        if secret_name(k):
            continue
        text = v if isinstance(v, str) else str(v) if isinstance(v, (int, float, bool)) else repr(v)
        out[sanitize(k)] = redact_uris(text)[:MAX_PARAM_CHARS]
    return out


def log_params_dict(params: Mapping[str, Any]) -> dict[str, str]:
    import mlflow

    clean = safe_params(params)
    if clean:
        mlflow.log_params(clean)
    return clean


def log_figures(figures: Mapping[str, Any], artifact_dir: str = "plots") -> list[str]:
    """Log figures as PNG artifacts ``<artifact_dir>/<name>.png``; returns the paths. A value is a
    matplotlib figure, or the path of the PNG already written from it (``save_figures``): that file
    is logged as it is, not drawn a second time (20 plots: 4 s less)."""
    import shutil
    import tempfile

    import mlflow

    paths = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fig in figures.items():
            stem = artifact_stem(name)
            path = f"{artifact_dir}/{stem}.png"
            parts = PurePosixPath(f"{stem}.png").parts  # a judge's "org/model" is a folder in MLflow
            if isinstance(fig, (str, Path)):
                # The artifact keeps its MLflow name: the file is copied under it, then logged.
                local = Path(tmp, str(len(paths)), parts[-1])
                local.parent.mkdir()
                shutil.copyfile(fig, local)
                mlflow.log_artifact(str(local), "/".join([artifact_dir, *parts[:-1]]))
            else:
                mlflow.log_figure(fig, path)
            paths.append(path)
    return paths


def artifact_stem(name: str) -> str:
    """A figure's artifact name without ``.png``: its sanitized name where every folder and file part
    is a plain name of at most ``NAME_KEY_CHARS`` (a judge's ``org/model`` stays a folder), else the
    plot file's stem (no ``..`` climbing out of ``plots/``, no name too long for a file)."""
    from judgebias.display import file_stem

    stem = sanitize(name).replace(" ", "_")
    parts = stem.split("/")
    if posixpath.normpath(stem) == stem and all(p and not p.startswith(".") and len(p) <= NAME_KEY_CHARS
                                                for p in parts):
        return stem
    stem = file_stem(name)
    return "_" + stem if stem.startswith(".") else stem


def log_files(paths: Iterable[str | Path], artifact_dir: str | None = None) -> None:
    import mlflow

    for p in paths:
        mlflow.log_artifact(str(p), artifact_dir)


def analysis_params(result: Mapping[str, Any], source: str | None = None) -> dict[str, Any]:
    settings = result.get("settings") or {}
    ds = result.get("dataset") or {}
    params: dict[str, Any] = {
        "self_map": ";".join(f"{j}={','.join(g)}" for j, g in (settings.get("self_map") or {}).items())
        or "-",
        "family_map": ";".join(f"{j}={','.join(g)}" for j, g in (settings.get("family_map") or {}).items())
        or "-",
        "gold": ",".join(settings.get("gold") or []) or "all other judges",
        "human_as_gold": settings.get("human_as_gold", False),
        "bootstrap_reps": settings.get("bootstrap_reps"), "seed": settings.get("seed"),
        "judges": ",".join(ds.get("judges") or []), "schema": result.get("schema"),
    }
    if settings.get("cluster_by"):  # the unit the intervals treat as independent (default the prompt)
        params["cluster_by"] = settings["cluster_by"]
    for key, rec in (settings.get("margins") or {}).items():  # the bands "ok" was read against
        params[f"margin.{key}"] = rec.get("value") if isinstance(rec, Mapping) else rec
    if source:
        params["table"] = str(source)
    return params


def log_analysis(result: Mapping[str, Any], *, table_path: str | Path | None = None,
                 figures: Mapping[str, Any] | None = None, extra_params: Mapping[str, Any] | None = None,
                 reports: Iterable[str | Path] = (),
                 judge_runs: Mapping[str, str] | None = None) -> dict[str, int]:
    """Log one ``analyze`` result into the ACTIVE run: params, every metric, the JSON, the table
    file (or, above ``JUDGEBIAS_MLFLOW_TABLE_MAX_MB``, its reference and a sample:
    ``judgebias.tracking.table_ref``), the plots and the report card pages (at the artifact root, where the
    UI lists them first). With ``judge_runs`` (their tags), also one nested run per judge
    (``log_judge_runs``), tagged with the table's SHA-256 as ``judgebias.dataset_digest`` unless the
    tags name one. Returns counts of what was logged."""
    import mlflow

    if mlflow.active_run() is None:
        raise RuntimeError("log_analysis needs an active MLflow run "
                           "(use judgebias.tracking.mlflow_run.mlflow_run)")
    params = analysis_params(result, str(table_path) if table_path else None)
    params.update(extra_params or {})
    log_params_dict(params)
    per_judge = metrics_by_judge(result)
    n = log_metrics_dict(flatten_metrics(result, per_judge))
    mlflow.log_dict(dict(result), "metrics.json")
    digest = {}
    if table_path is not None:  # a copy when small, else a reference (digest, path, rows) and a sample
        from judgebias.tracking.table_ref import log_table

        digest = {"judgebias.dataset_digest": log_table(table_path)["sha256"]}
    figs = log_figures(figures) if figures else []
    log_reports(reports)
    counts = {"metrics": n, "params": len(params), "figures": len(figs)}
    if judge_runs is not None:
        counts["judge_runs"] = len(log_judge_runs(per_judge, {**digest, **judge_runs}, result))
    return counts


def judge_run_name(judge: str) -> str:
    """A judge's nested run's name: ``judge:`` and the judge's key (``name_key``: the name itself
    where it is plain, else its file stem: no ``..``, no 300 characters, distinct per judge)."""
    return f"judge:{name_key(judge)}"


def log_judge_runs(per_judge: Mapping[str, Mapping[str, float]], tags: Mapping[str, str],
                   result: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Inside the active run: one nested run per judge (``judge_run_name``) holding its metrics
    under names without the judge (``judge_figure_metrics``), so runs of different judges and
    tables line up column by column in MLflow's compare view; tagged ``judgebias.kind=judge`` and
    ``judgebias.judge=<the name as it is>`` (a tag is text: any name goes). With a pairwise
    ``result``, each run's description leads with its judge's headline figures. Returns judge ->
    run id."""
    import mlflow

    from judgebias.tracking.mlflow_run import mlflow_run

    rows = []
    if result is not None:
        from judgebias.reporting.experiment_summary import headline_rows, headline_table

        rows = headline_rows(result)
    ids = {}
    for judge, metrics in per_judge.items():
        with mlflow_run(judge_run_name(judge), tags={**tags, "judgebias.kind": "judge",
                                                     JUDGE_TAG: str(judge)}) as run:
            log_metrics_dict(metrics)
            mine = [row for row in rows if row[0] == judge]
            if mine:
                mlflow.set_tag("mlflow.note.content", "\n".join(headline_table(mine)) + "\n")
        ids[judge] = run.info.run_id
    return ids


def log_reports(reports: Iterable[str | Path]) -> None:
    """The report card pages at the active run's artifact root (a page logged again replaces it)."""
    import mlflow

    for page in reports:
        mlflow.log_artifact(str(page))


def linked_files(page: str | Path, root: str | Path) -> list[Path]:
    """The files under ``root`` that ``page`` (an HTML page inside it) links by a relative href, and
    those that they link in turn (each once): what a logged copy of the page needs beside it for no
    link of it to be dead. An address (``http:``, ``#...``, ``mailto:``) or a path leaving ``root``
    is not followed."""
    from html.parser import HTMLParser
    from urllib.parse import unquote, urlsplit

    class _Hrefs(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.hrefs: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.hrefs += [v for k, v in attrs if k == "href" and v]

    root = Path(root).resolve()
    seen: set[Path] = set()
    todo, found = [Path(page).resolve()], []
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.suffix.lower() not in (".html", ".htm"):
            continue
        parser = _Hrefs()
        parser.feed(current.read_text(encoding="utf-8", errors="replace"))
        for href in parser.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = (current.parent / unquote(parts.path)).resolve()
            if target.is_file() and target.is_relative_to(root) and target not in seen:
                found.append(target)
                todo.append(target)
    return sorted(set(found) - {Path(page).resolve()})


def log_linked_pages(pages: Iterable[str | Path], root: str | Path) -> list[str]:
    """Log what ``pages`` (logged at the artifact root, ``log_reports``) link inside ``root`` at the
    same relative paths, so the logged pages' links open files the run holds (the experiment's page
    links its ablations' and the imported data's pages). Returns the artifact paths logged."""
    import mlflow

    root, logged = Path(root).resolve(), []
    for page in pages:
        for target in linked_files(page, root):
            rel = target.relative_to(root).as_posix()
            if rel in logged or ("/" not in rel and any(Path(p).name == rel for p in pages)):
                continue
            mlflow.log_artifact(str(target), artifact_path=posixpath.dirname(rel) or None)
            logged.append(rel)
    return logged


def run_links(logged: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """(text, URL, note) for a report card written inside the active run: the run's page in the
    MLflow UI and, with its rows logged as traces (``logged``: ``log_judgment_traces``'s counts), the
    experiment's Traces page and the usual questions, each linked where the page can filter by it."""
    import mlflow

    from judgebias.redaction import redact_uri
    from judgebias.tracking.judgment_traces import run_url, trace_questions, traces_page

    run, uri = mlflow.active_run(), mlflow.get_tracking_uri()
    if run is None:
        return []
    exp = run.info.experiment_id
    links = [(f"MLflow run {run.info.run_id}", run_url(uri, exp, run.info.run_id),
              f"tracking URI {redact_uri(uri)}; the MLflow UI must be running")]
    if logged and logged.get("rows"):
        page = traces_page(uri, exp)
        links.append((f"{int(logged['rows'])} judgments as MLflow traces", page,
                      "the experiment's Traces page"))
        links += [(q["text"], q["url"], f"filter: {q['filter']}" if q["filter"] else "")
                  for q in trace_questions(logged, page)]
    return links


def download_analysis(run_id: str, dest: str | Path) -> tuple[Path, Path | None]:
    """Fetch a run's ``metrics.json`` and its plots into ``dest``; returns (metrics, plots folder or
    None). Raises ``ValueError`` naming the run when it has no metrics.json."""
    import mlflow

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
    if "metrics.json" not in names:
        raise ValueError(f"MLflow run {run_id} has no metrics.json artifact (artifacts: {sorted(names)})")
    def fetch(name: str) -> Path:
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name,
                                                        dst_path=str(dest)))

    return fetch("metrics.json"), fetch("plots") if "plots" in names else None


def lead_with_headline(result: Mapping[str, Any], table: Any = None, *, self_map: Any = None,
                       traces: bool = False) -> tuple[int | None, str | None]:
    """In the active run: the description leads with each judge's headline figures (MLflow folds a long
    description after its first lines); with ``traces``, every row of ``table`` is also logged as an
    MLflow trace and the description links them. Returns (traces logged or None, a warning or None):
    a server that refuses the traces leaves the figures logged and the run a success."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from judgebias.reporting.experiment_summary import headline_rows, headline_table

    note = "\n".join(headline_table(headline_rows(result))) + "\n\n" + COMPARE_JUDGES + "\n"
    mlflow.set_tag("mlflow.note.content", note)
    if not traces or table is None:
        return None, None
    from judgebias.tracking.judgment_traces import log_judgment_traces, traces_note

    try:
        logged = log_judgment_traces(table, self_map=self_map)
    except MlflowException as exc:
        return None, f"MLflow refused the traces, none or only some logged: {exc}"
    mlflow.set_tag("mlflow.note.content", note + "\n" + traces_note(logged))
    return logged, None
