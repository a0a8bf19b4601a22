"""``judgebias analyze FILE --out metrics.json``: every bias figure the table allows, per judge."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.options import (
    TRACES_AUTO_ROWS,
    BootstrapSeed,
    SkipInvalid,
    cluster_by_option,
    echo_mlflow_run,
    margin_option,
    multiplicity_option,
    origin_option,
)

# Through a tracking server MLflow writes traces slowly (13-21 traces/s on a loaded 2-core machine;
# a database URI takes about 350/s, docs/benchmarks.md): the default keeps an analyze of a large
# table from waiting minutes on them.


# Deliberate parallel: typer spells each option in full, so this signature and import_cmd's
# (cli/importers.py) look alike line by line (multi-line options with a metavar and a help text);
# they share no option (both --fold: here a refold of the table, there how an import folds).
def analyze_cmd(
    file: Path = typer.Argument(..., metavar="FILE", help="Judgment table: .jsonl, .parquet or .csv."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the metrics JSON."),
    self_: list[str] = origin_option(
        "--self",
        help="GENERATOR is JUDGE itself under another name (e.g. gpt4-judge=gpt-4). Repeatable; "
             "GENERATOR may be a comma list. A judge's own name always counts, and so does the "
             "table's judge_generator column."),
    family: list[str] = origin_option(
        "--family",
        help="GENERATOR is of JUDGE's family (e.g. pandalm-7b=llama-7b: PandaLM is fine-tuned from "
             "LLaMA): family figures (family_preference_eo/dp, family_dbg, the regression's "
             "family_origin term) beside the exact-self ones. Repeatable; comma lists allowed."),
    gold: str = typer.Option(None, "--gold", metavar="J1,J2,...",
                             help="Gold panel for DBG and agreement_gold (default: all other judges; "
                                  "the measured judge is never part of its own gold)."),
    baseline: str = typer.Option(None, "--baseline", metavar="GENERATOR",
                                 help="Reference model of the length-controlled win rates (default: the "
                                      "one generator in every pair a judge judged, as in AlpacaEval)."),
    human_as_gold: bool = typer.Option(False, "--human-as-gold",
                                       help="DBG against the human labels instead of a judge panel."),
    fold: str = typer.Option(None, "--fold", metavar="RULE",
                             help="Refold every row with both presentation orders under RULE "
                                  "(auto, agree-else-tie, mean-probability) before the figures; default: "
                                  "each row's fold_rule as written."),
    skip_invalid: SkipInvalid = False,
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow",
                                help="Log params, metrics, the JSON, the table and the plots to MLflow "
                                     "(MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here). A table "
                                     "over JUDGEBIAS_MLFLOW_TABLE_MAX_MB (default 50) is logged as "
                                     "its path, size, rows and SHA-256 plus a sample of its first rows."),
    traces: bool = typer.Option(None, "--traces/--no-traces",
                                help="With --mlflow, also log every row as an MLflow trace with the "
                                     f"judge's and the humans' feedback (docs/mlflow-genai.md). Default: "
                                     f"on for tables of up to {TRACES_AUTO_ROWS} rows."),
    plots_dir: Path = typer.Option(None, "--plots-dir",
                                   help="Folder for the PNG plots (default: <out stem>_plots beside --out)."),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="Write the report card <out stem>_report.html (+ .md) beside --out."),
    reps: int = typer.Option(2000, help="Bootstrap resamples for DBG and the paired perplexity test."),
    seed: BootstrapSeed = 0,
    cluster_by: str = cluster_by_option(
        help="Rows sharing a value of COLUMN are not independent (many pairs per prompt): every "
             "interval and test allow for it, and each figure says on how many clusters it rests "
             "and its design effect. Default: the prompt (the item for a pointwise table); 'none' treats "
             "every pair (or row) as independent."),
    multiplicity: str = multiplicity_option(
        "holm",
        help="How each judge's statement tests are adjusted together: holm (default; the chance of "
             "any false caution about a judge is at most 5%) or bh (Benjamini-Hochberg; at most 5% "
             "of the cautions false on average). Intervals stay per-figure 95%."),
    margin: list[str] = margin_option(
        help="Override a figure's margin of practical irrelevance (repeatable), e.g. "
             "self_preference_eo=0.03: an ok needs the figure's 95% interval inside it, else the "
             "statement is inconclusive. A pointwise table takes its figures' keys (score_bias_human=0.05: "
             "a share of the scale). Recorded in the JSON (settings.margins) and MLflow params. "
             "Declared margins: docs/metrics.md \"Statements and multiplicity\"."),
    run_name: str = typer.Option(None, help="MLflow run name (default: analyze <file name>)."),
    pairwise: Path = typer.Option(None, "--pairwise", metavar="TABLE",
                                  help="Pointwise FILE only: a pairwise judgment table over the same "
                                       "responses, for pointwise_pairwise_consistency."),
) -> None:
    """Bias figures of every judge in a judgment table, with 95% intervals.

    Self-preference (EO, DP), DBG, verbosity, perplexity, position and agreement with humans/gold.
    Written as JSON (layout: docs/metrics.md), printed as a table, logged to MLflow.
    A figure the columns cannot support is listed under "not computed" with its reason, never as 0.
    """
    from judgebias.cli.options import input_errors, margin_overrides, origin_map, require_tracking
    from judgebias.display import terminal_safe
    from judgebias.metrics.frame import response_features
    from judgebias.reporting.analysis import analyze
    from judgebias.reporting.console_table import format_report
    from judgebias.runs.store import atomic_write_text
    from judgebias.tables.folding import refold
    from judgebias.tables.for_analysis import read_for_analysis, table_rows, with_response_texts

    require_tracking(mlflow)
    self_map, family_map = origin_map(self_, "--self"), origin_map(family, "--family")
    gold_list = [g.strip() for g in gold.split(",") if g.strip()] if gold else None
    from judgebias.tables.pointwise import file_is_pointwise

    pointwise = file_is_pointwise(file)
    margins = margin_overrides(margin, pairwise_only=not pointwise, pointwise_only=pointwise)
    if pointwise:  # the one dispatch point: a pointwise table has its own figures
        from judgebias.cli.pointwise import analyze_pointwise_file

        analyze_pointwise_file(file, out, self_map=self_map, family_map=family_map, gold=gold_list,
                               pairwise=pairwise, skip_invalid=skip_invalid, reps=reps, seed=seed,
                               plots_dir=plots_dir, mlflow=mlflow, run_name=run_name, traces=traces,
                               report=report, multiplicity=multiplicity, cluster_by=cluster_by,
                               margins=margins)
        return
    if pairwise is not None:
        # A pairwise FILE has no scores to compare verdicts with: saying so beats computing without it.
        raise typer.BadParameter(
            f"{terminal_safe(str(file))} is a pairwise table; --pairwise takes a second table only when "
            "FILE is a pointwise one (for pointwise_pairwise_consistency): drop --pairwise, or give the "
            "pointwise table as FILE", param_hint="--pairwise")
    with input_errors(file):
        # A table too large for traces is read without its response texts (their counts instead):
        # ten million rows then fit in a few GB. Traces (asked, or automatic on a small table) need them.
        lean = traces is False or (traces is None and table_rows(file) > TRACES_AUTO_ROWS)
        table, exclusions = read_for_analysis(file, skip_invalid=skip_invalid,
                                              response_features=response_features if lean else None)
        if fold is not None:
            table = refold(table, fold)
        result = analyze(table, self_map=self_map, gold=gold_list, human_as_gold=human_as_gold,
                         exclusions=exclusions, reps=reps, seed=seed, baseline=baseline,
                         family_map=family_map, multiplicity=multiplicity, cluster_by=cluster_by,
                         margins=margins)

    atomic_write_text(out, json.dumps(result, indent=2, allow_nan=False) + "\n")
    typer.echo(terminal_safe(format_report(result), keep="\n"))
    typer.echo(f"\nwrote {out}")

    figures = None
    if plots_dir is not None or mlflow or report:
        from judgebias.reporting.plots import figures_for, save_figures
        from judgebias.reporting.report_card import analyze_outputs

        figures = figures_for(result)
        plots_dir = plots_dir if plots_dir is not None else analyze_outputs(out)[0]
        paths = save_figures(figures, plots_dir)
        figures = dict(zip(figures, paths, strict=True))  # MLflow logs these files: no second drawing
        typer.echo(f"wrote {len(paths)} plot(s) to {plots_dir}")
    pages = []

    def write_pages(links=()) -> list[Path]:
        from judgebias.reporting.report_card import write_report
        from judgebias.reporting.run_page import Link, RunExtras

        return list(write_report(analyze_outputs(out)[1], result,
                                 title=f"Judge report card: {file.name}", plot_dir=plots_dir,
                                 provenance=[f"judgebias analyze {file}", f"metrics: {out}"],
                                 extras=RunExtras(links=[Link(*link) for link in links]) if links else None))

    if report:
        pages = write_pages()
        typer.echo(f"wrote {pages[0]} (and {pages[1].name}); open it in a browser or: judgebias report {out}")
    if mlflow:
        from judgebias.tracking.log_analysis import lead_with_headline, log_analysis, log_reports, run_links
        from judgebias.tracking.mlflow_run import mlflow_run
        from judgebias.tracking.settings import TrackingSettings

        settings = TrackingSettings()
        with mlflow_run(run_name or f"analyze {file.name}", settings=settings,
                        tags={"judgebias.command": "analyze"}) as run:
            # One nested run per judge, its figures under names without the judge: MLflow's
            # compare view lines judges up across runs (the parent's names hold NaN for other judges).
            counts = log_analysis(result, table_path=file, figures=figures, reports=pages,
                                  judge_runs={"judgebias.command": "analyze",
                                              "judgebias.template_digest": "not recorded (judgment table)"})
            wanted = traces if traces is not None else len(table) <= TRACES_AUTO_ROWS
            if wanted and lean:  # --skip-invalid left few enough rows for traces: read their texts
                table = with_response_texts(table, file)
            logged, warning = lead_with_headline(result, table, self_map=self_map, traces=wanted)
            if report:  # the card again, now linking the run and its judgments in MLflow's UI
                pages = write_pages(run_links(logged))
                log_reports(pages)
            if warning:  # the figures are logged; the run stays a success
                typer.echo(f"warning: {terminal_safe(warning)[:500]}", err=True)
        echo_mlflow_run(run.info.run_id, settings.resolved_uri(), counts, logged,
                        "filter them in the experiment's Traces tab: docs/mlflow-genai.md")
        if logged is not None:
            from judgebias.tracking.judgment_traces import filter_strings

            typer.echo(f"  {logged['position flips']} of the table's rows flip with the order; filter: "
                       + filter_strings()["position flips"])


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze_cmd)
