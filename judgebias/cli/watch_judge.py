"""``judgebias watch CONFIG``: one look of a watched judge now (docs/watch.md), as the scheduled
deployment (``judgebias serve --watch CONFIG``) runs it."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def watch_cmd(
    config: Path = typer.Argument(..., dir_okay=False, help="the watch config (docs/watch.md)"),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="log the look as an MLflow run"),
    exit_code: bool = typer.Option(False, "--exit-code", help="exit 1 when the judge changed"),
) -> None:
    """Judge the watch's pinned audit set, compare its figures with the reference look (alpha spent
    over the declared looks) and record the look; the flow run ends Failed/JudgeChanged when a
    figure changed."""
    from judgebias.config.watch import WatchConfigError, load_watch, pinned_table

    path = os.path.abspath(config)
    try:
        settings, base = load_watch(path)
        pinned_table(settings, base)
    except WatchConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from judgebias.flows.runtime.environment import prepare

    prepare(Path.cwd())
    from judgebias.cli import full_disk

    full_disk.end_when_prefect_server_is_lost()
    from judgebias.flows.watch import CHANGED_STATE, watch_judge

    state = watch_judge(path, mlflow, return_state=True)
    if state.is_failed() and state.name != CHANGED_STATE:
        typer.echo(f"error: {state.message}", err=True)
        raise typer.Exit(2)
    summary = state.result(raise_on_failure=False)
    line = summary["line"] if isinstance(summary, dict) else state.message
    typer.echo(line)
    if state.name == CHANGED_STATE and exit_code:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch_cmd)
