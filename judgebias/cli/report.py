"""``judgebias report RUN_OR_FILE``: the report card page of an analyze or experiment run."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.options import margin_option, multiplicity_option


def _source(target: str, workdir: Path) -> tuple[Path, Path | None, Path, str, dict]:
    """(metrics.json, plots folder, default page path, title, probes' figures) for a file, a run
    folder or an MLflow run id."""
    path = Path(target)
    if path.is_file():
        from judgebias.reporting.report_card import analyze_outputs

        plots, page = analyze_outputs(path)
        return path, plots if plots.is_dir() else None, page, path.name, {}
    if path.is_dir():
        from judgebias.runs.layout import RunLayout

        metrics = path / RunLayout().metrics
        if not metrics.is_file():
            raise typer.BadParameter(
                f"{path} is a folder without {RunLayout().metrics} (not a run folder)",
                param_hint="RUN_OR_FILE",
            )
        from judgebias.reporting.experiment_summary import indexed_probe_results
        from judgebias.runs.store import RunStore

        probes = indexed_probe_results(RunStore(path))
        # "report ." named the page after "" (Path(".").name)
        return metrics, path / RunLayout().plots, path / RunLayout().report_html, path.resolve().name, probes
    from judgebias.redaction import redact_uri
    from judgebias.tracking.log_analysis import download_analysis
    from judgebias.tracking.settings import TrackingSettings

    settings = TrackingSettings()
    settings.use_store()
    try:
        metrics, plots = download_analysis(target, workdir / target)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="RUN_OR_FILE") from None
    except Exception as exc:  # MLflow raises its own types for an unknown run id
        raise typer.BadParameter(
            f"{target!r} is neither a file, a run folder nor an MLflow run at "
            f"{redact_uri(settings.resolved_uri())} ({type(exc).__name__}: {exc})",
            param_hint="RUN_OR_FILE",
        ) from None
    return metrics, plots, workdir / target / "report.html", f"MLflow run {target}", {}


def _leaderboard(target: str) -> tuple[dict | None, Path | None]:
    """A run folder's leaderboard and its plots folder (the page ends with them), else (None, None)."""
    from judgebias.runs.layout import RunLayout

    path = Path(target)
    board = path / RunLayout().leaderboard
    if not path.is_dir() or not board.is_file():
        return None, None
    try:
        return json.loads(board.read_text(encoding="utf-8")), path / RunLayout().leaderboard_plots
    except (OSError, json.JSONDecodeError):
        return None, None


def report_cmd(
    target: str = typer.Argument(
        ..., metavar="RUN_OR_FILE", help="metrics JSON from analyze, a run folder, or an MLflow run id."
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="Page to write (default: beside the metrics; for an MLflow run, reports/<run id>/report.html).",
    ),
    open_: bool = typer.Option(False, "--open", help="Open the page in the default browser."),
    multiplicity: str = multiplicity_option(
        None,
        help="Adjust each judge's statement tests by holm (family-wise error) or bh (false discovery "
             "rate) instead of the method the analysis recorded (holm when none)."),
    margin: list[str] = margin_option(
        help="Read the statements against this margin of practical irrelevance instead of the one the "
             "analysis recorded (repeatable; as on analyze)."),
) -> None:
    """Write the judge report card (self-contained HTML + markdown) of a run and print its path."""
    from judgebias.cli.options import margin_overrides
    from judgebias.reporting.report_card import write_report

    margins = margin_overrides(margin)
    metrics, plots, default, title, probes = _source(target, Path("reports"))
    try:
        result = json.loads(metrics.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        typer.echo(f"error: {metrics}: not a readable metrics JSON ({exc})", err=True)
        raise typer.Exit(2) from None
    if not isinstance(result, dict) or "judges" not in result:
        typer.echo(f"error: {metrics}: no 'judges' section; expected the JSON of judgebias analyze", err=True)
        raise typer.Exit(2)
    from judgebias.reporting.run_page import run_extras

    page_path = out or default
    # A run folder's page links its MLflow run, imported data and ablations, relative to the page.
    extras = run_extras(target, page_path.parent) if Path(target).is_dir() else None
    board, board_plots = _leaderboard(target)
    # The header the flow gave the run's page, kept when the page is written again from its folder.
    from judgebias.reporting.run_page import page_header

    header = page_header(target) if Path(target).is_dir() else None
    heading, provenance = header if header else (f"Judge report card: {title}", [])
    page, md = write_report(
        page_path,
        {**result, "probes": probes} if probes else result,
        title=heading,
        plot_dir=plots,
        provenance=[*provenance, f"metrics: {metrics}"],
        multiplicity=multiplicity,
        margins=margins or None,
        extras=extras,
        leaderboard=board,
        leaderboard_plots=board_plots,
    )
    typer.echo(f"wrote {page}\nwrote {md}")
    if open_:
        import webbrowser

        if not webbrowser.open(page.resolve().as_uri()):
            typer.echo("no browser found here; open the file above in one")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
