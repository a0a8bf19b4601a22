"""The pointwise branches of ``judgebias judge --mode pointwise`` and ``judgebias analyze`` (a
pointwise table, told by its columns), kept out of the pairwise commands' code."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.options import TRACES_AUTO_ROWS, echo_mlflow_run, input_errors


def judge_pointwise_table(
    df,
    backend,
    template_name: str,
    *,
    judge_name: str,
    chat: bool | None,
    max_new_tokens: int,
    chunk_size: int,
    progress=None,
    criteria: list[str] | None = None,
):
    """The pointwise table of ``judge_name`` over every response of ``df`` (a pointwise or a
    pairwise table): one row per response."""
    from judgebias.backends.protocol import GenerationParams
    from judgebias.engine.pointwise import items_from_frame, judge_responses, with_criteria
    from judgebias.prompts.pointwise import pointwise_template

    template = pointwise_template(template_name)
    items = items_from_frame(df)
    if criteria:
        items = with_criteria(items, criteria)
    result = judge_responses(
        items,
        backend,
        template,
        judge=judge_name,
        chat=chat,
        params=GenerationParams(max_new_tokens=max_new_tokens),
        chunk_size=chunk_size,
        progress=progress,
    )
    return result.table(), result.exclusions


def analyze_pointwise_file(
    file: Path,
    out: Path,
    *,
    self_map,
    family_map,
    gold,
    pairwise: Path | None,
    skip_invalid: bool,
    reps: int,
    seed: int,
    plots_dir: Path | None = None,
    mlflow: bool = False,
    run_name: str | None = None,
    traces: bool | None = None,
    report: bool = True,
    multiplicity: str | None = None,
    cluster_by: str | None = None,
    margins: dict[str, float] | None = None,
) -> None:
    """Validate, compute, print and write the pointwise figures; draw one score-distribution plot
    per judge (``plots_dir``, default ``<out stem>_plots`` beside ``out``) and, with ``mlflow``, log
    params, metrics, the JSON, the table and the plots (``judgebias.tracking.log_pointwise``) and, with
    ``traces`` (None: up to ``TRACES_AUTO_ROWS`` rows), every row as a trace
    (``judgebias.tracking.pointwise_traces``); with ``report``, the report card beside ``out``
    (statements from each judge's family of tests, ``multiplicity``), logged to the run as well.
    ``cluster_by``: the column whose rows share a cluster (default the item); ``margins``: pointwise
    margin values (shares of the scale) overriding the declared ones, recorded under
    ``settings.margins``."""
    from judgebias.display import terminal_safe
    from judgebias.reporting.pointwise_analysis import analyze_pointwise, format_pointwise
    from judgebias.runs.store import atomic_write_text
    from judgebias.tables.files import read_raw, read_table
    from judgebias.tables.pointwise import validate_pointwise

    with input_errors(file):
        table, exclusions = validate_pointwise(read_raw(file), source=str(file), skip_invalid=skip_invalid)
        pairs = read_table(pairwise)[0] if pairwise is not None else None
        result = analyze_pointwise(
            table, self_map=self_map, family_map=family_map, gold=gold, pairwise=pairs, reps=reps, seed=seed,
            cluster_by=cluster_by,
        )
    result["exclusions"] = dict(exclusions.counts)
    from judgebias.metrics.margins import POINTWISE_MARGINS, resolve

    result["settings"]["margins"] = resolve(POINTWISE_MARGINS, margins)
    atomic_write_text(out, json.dumps(result, indent=2, allow_nan=False) + "\n")
    typer.echo(terminal_safe(format_pointwise(result), keep="\n"))
    typer.echo(f"\nwrote {out}")
    from judgebias.reporting.plots import save_figures
    from judgebias.reporting.plots_pointwise import pointwise_figures
    from judgebias.reporting.report_card import analyze_outputs

    figures = pointwise_figures(table, result["settings"]["judges"])
    plots_dir = plots_dir if plots_dir is not None else analyze_outputs(out)[0]
    paths = save_figures(figures, plots_dir)
    figures = dict(zip(figures, paths, strict=True))  # MLflow logs these files: no second drawing
    typer.echo(f"wrote {len(paths)} plot(s) to {plots_dir}")
    pages: list[Path] = []
    if report:
        from judgebias.reporting.report_card import write_report

        pages = list(write_report(analyze_outputs(out)[1], result,
                                  title=f"Judge report card (pointwise): {file.name}", plot_dir=plots_dir,
                                  provenance=[f"judgebias analyze {file}", f"metrics: {out}"],
                                  multiplicity=multiplicity, margins=margins or None))
        typer.echo(f"wrote {pages[0]} (and {pages[1].name}); open it in a browser or: judgebias report {out}")
    if mlflow:
        from judgebias.tracking.log_pointwise import log_pointwise_analysis
        from judgebias.tracking.mlflow_run import mlflow_run
        from judgebias.tracking.settings import TrackingSettings

        settings = TrackingSettings()
        with mlflow_run(run_name or f"analyze {file.name}", settings=settings,
                        tags={"judgebias.command": "analyze", "judgebias.table_kind": "pointwise"}) as run:
            counts = log_pointwise_analysis(result, table_path=file, figures=figures,
                                            judge_runs={"judgebias.command": "analyze",
                                                        "judgebias.template_digest":
                                                            "not recorded (judgment table)"})
            logged = _log_traces(table, traces)
            if pages:
                from judgebias.tracking.log_analysis import log_reports

                log_reports(pages)
        echo_mlflow_run(run.info.run_id, settings.resolved_uri(), counts, logged,
                        "the experiment's Traces tab; judgebias import mlflow reads them back")


def _log_traces(table, traces: bool | None) -> dict | None:
    """Each row as a trace in the active run (``traces`` None: only small tables, as for pairwise)."""
    if not (traces if traces is not None else len(table) <= TRACES_AUTO_ROWS):
        return None
    from judgebias.display import terminal_safe
    from judgebias.tracking.pointwise_traces import log_pointwise_traces_or_warn

    logged, warning = log_pointwise_traces_or_warn(table)
    if warning:  # the figures are logged; the run stays a success
        typer.echo(f"warning: {terminal_safe(warning)[:500]}", err=True)
    return logged
