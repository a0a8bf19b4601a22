"""``judgebias annotate push|pull`` on a POINTWISE table: rating tasks instead of pairwise ones.

``judgebias.cli.annotate`` dispatches here when the table has the pointwise shape
(``judgebias.tables.pointwise``), so one command serves both kinds of table.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.annotation.rating_sync import RATING_TITLE, read_pointwise
from judgebias.cli.options import fail

__all__ = ["RATING_TITLE", "pull_ratings", "push_ratings", "read_pointwise"]


def push_ratings(table: Path, *, budget: int, design: str, min_prob: float | None, judges: list[str] | None,
                 self_map: dict, project_title: str, ledger_path: Path, seed: int, dry_run: bool,
                 rubric: str | None) -> None:
    """Draw the next batch of items by a probability design and push them as rating tasks."""
    from judgebias.annotation.labelstudio import LabelStudioError, ServerSettings
    from judgebias.annotation.labelstudio import project_title as title_ok
    from judgebias.annotation.rating_loop import RatingSettings, next_rating_batch, rating_scale
    from judgebias.annotation.ratings import RatingClient
    from judgebias.annotation.store import Ledger
    from judgebias.cli.annotate_push import report_and_push
    from judgebias.tables.pairwise import TableError

    settings = RatingSettings(design=design, min_prob=min_prob, seed=seed, judges=judges, rubric=rubric,
                              self_map=self_map)
    try:
        project_title = title_ok(project_title)
        df = read_pointwise(table)
        client = None if dry_run else RatingClient(ServerSettings.from_env(), rating_scale(df))
        store = Ledger(ledger_path) if (ledger_path.exists() or not dry_run) else None
    except (TableError, ValueError, LabelStudioError) as exc:
        fail(str(exc))
    from contextlib import nullcontext

    with store.lock() if store is not None else nullcontext():
        try:
            batch = next_rating_batch(df, store, budget, settings, record=not dry_run)
        except ValueError as exc:
            fail(str(exc))
        report_and_push(client, batch, store, project_title=project_title, seed=seed, dry_run=dry_run,
                        unit="item", tasks="rating task")


def pull_ratings(table: Path, *, judges: list[str] | None, self_map: dict, ledger_path: Path,
                 out: Path | None, offline: bool, mlflow: bool, tracking_uri: str | None,
                 experiment: str | None, parent_run_id: str | None, as_json: bool) -> None:
    """Pull ratings, merge them into ``human_scores``, estimate the population figures, log them."""
    from judgebias.annotation.labelstudio import LabelStudioError
    from judgebias.annotation.rating_loop import rating_lines
    from judgebias.annotation.rating_sync import RatingSyncSettings, sync_ratings
    from judgebias.tables.pairwise import TableError

    if not ledger_path.exists():
        fail(f"no labels ledger at {ledger_path}: nothing pushed yet (run `judgebias annotate push`)")
    settings = RatingSyncSettings(table=table, judges=judges, ledger=ledger_path, out=out, self_map=self_map,
                                  offline=offline, log_mlflow=mlflow, tracking_uri=tracking_uri,
                                  experiment=experiment, parent_run_id=parent_run_id)
    try:
        result = sync_ratings(settings)
    except LabelStudioError as exc:
        fail(f"{exc}\nThe ledger {ledger_path} is intact; run pull again when the server is back "
             "(or --offline to recompute from the ratings already pulled).")
    except (TableError, ValueError) as exc:
        fail(str(exc))
    status = result.status
    if result.pull is not None:
        from judgebias.annotation.summary import not_counted_lines

        typer.echo("pulled: " + ", ".join(f"{k} {v}" for k, v in result.pull.counts.as_dict().items()))
        for line in not_counted_lines(result.pull.exclusions.to_dict(), result.pull.exclusions.examples):
            typer.echo(line)
    else:
        typer.echo("offline: Label Studio not contacted; figures recomputed from the ledger's ratings")
    typer.echo(f"ledger: items pushed {status['pushed']}, rated {status['labelled']}, pending "
               f"{status['pending']}; ratings {status['labels']}, skipped {status['skipped']}")
    typer.echo("\n".join(rating_lines(result.figures)))
    typer.echo(f"merged table: {result.out_path}\nfigures: {result.figures_path}")
    if result.run_id:
        typer.echo(f"MLflow run: {result.run_id}")
    elif not mlflow:
        typer.echo("--no-mlflow: nothing logged to MLflow")
    if as_json:
        typer.echo(json.dumps({"figures": result.figures, "status": status}, indent=2, default=str))
