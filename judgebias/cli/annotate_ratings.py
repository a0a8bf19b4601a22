"""``judgebias annotate push|pull`` on a POINTWISE table: rating tasks instead of pairwise ones.

``judgebias.cli.annotate`` dispatches here when the table has the pointwise shape
(``judgebias.pointwise_table``), so one command serves both kinds of table.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.options import fail

RATING_TITLE = "judgebias pointwise ratings"


def read_pointwise(table: Path):
    from judgebias.io import read_raw
    from judgebias.pointwise_table import validate_pointwise

    return validate_pointwise(read_raw(table), source=str(table))[0]


def push_ratings(table: Path, *, budget: int, design: str, min_prob: float | None, judges: list[str] | None,
                 self_map: dict, project_title: str, ledger_path: Path, seed: int, dry_run: bool,
                 rubric: str | None) -> None:
    """Draw the next batch of items by a probability design and push them as rating tasks."""
    from judgebias.annotation.labelstudio import LabelStudioError, ServerSettings
    from judgebias.annotation.labelstudio import project_title as title_ok
    from judgebias.annotation.rating_loop import RatingSettings, next_rating_batch, rating_scale
    from judgebias.annotation.ratings import RatingClient
    from judgebias.annotation.store import Ledger
    from judgebias.table import TableError

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
        sm = batch.summary
        if batch.resumed:
            typer.echo(f"batch {sm['resumed_batch']} was drawn but not fully pushed: pushing its "
                       f"{sm['to_push']} remaining item(s), no new draw")
        else:
            typer.echo(f"batch {sm['batch']}: {sm['design']} design over {sm['population_size']} items "
                       f"scored by {', '.join(sm['judges'])} ({sm['left_to_draw']} not drawn before); drew "
                       f"{sm['drawn']} (expected {sm['expected']:.1f}); inclusion probability "
                       f"{sm['pi_min']:.3f}-{sm['pi_max']:.3f}")
        if dry_run or batch.rows.empty:
            return
        try:
            result = client.push(batch.rows, store, project_title=project_title, seed=seed)
        except LabelStudioError as exc:
            fail(f"{exc}\nThe batch is recorded in {store.path}; run push again to finish it (no new draw).")
    typer.echo(f"project {result.project_id} at {client.url}: {result.pushed} rating task(s) created, "
               f"{result.adopted_from_server} already on the server adopted; ledger {store.path}")
    typer.echo(f"open it: {client.url}/projects/{result.project_id}/data")


def pull_ratings(table: Path, *, judges: list[str] | None, self_map: dict, ledger_path: Path,
                 out: Path | None, offline: bool, mlflow: bool, tracking_uri: str | None,
                 experiment: str | None, parent_run_id: str | None, as_json: bool) -> None:
    """Pull ratings, merge them into ``human_scores``, estimate the population figures, log them."""
    from judgebias.annotation.labelstudio import LabelStudioError, ServerSettings
    from judgebias.annotation.rating_loop import (
        flat_metrics,
        rating_estimates,
        rating_lines,
        rating_scale,
        write_outputs,
    )
    from judgebias.annotation.ratings import RatingClient, rating_status
    from judgebias.annotation.store import Ledger
    from judgebias.annotation.sync import default_output_path
    from judgebias.table import TableError

    if not ledger_path.exists():
        fail(f"no labels ledger at {ledger_path}: nothing pushed yet (run `judgebias annotate push`)")
    ledger = Ledger(ledger_path)
    out = out or default_output_path(table)
    pulled = None
    try:
        df = read_pointwise(table)
        if not offline:
            pulled = RatingClient(ServerSettings.from_env(), rating_scale(df)).pull_ratings(ledger)
        merged, figures = rating_estimates(df, ledger, judges, self_map=self_map)
    except LabelStudioError as exc:
        fail(f"{exc}\nThe ledger {ledger_path} is intact; run pull again when the server is back "
              "(or --offline to recompute from the ratings already pulled).")
    except (TableError, ValueError) as exc:
        fail(str(exc))
    figures_path = write_outputs(merged, figures, out)
    status = rating_status(ledger)
    if pulled is not None:
        typer.echo("pulled: " + ", ".join(f"{k} {v}" for k, v in pulled.counts.as_dict().items()))
    else:
        typer.echo("offline: Label Studio not contacted; figures recomputed from the ledger's ratings")
    typer.echo(f"ledger: items pushed {status['pushed']}, rated {status['labelled']}, pending "
               f"{status['pending']}; ratings {status['labels']}, skipped {status['skipped']}")
    typer.echo("\n".join(rating_lines(figures)))
    typer.echo(f"merged table: {out}\nfigures: {figures_path}")
    if mlflow and not offline:
        from judgebias.tracking.feedback_run import log_feedback_run

        params = {"table": str(table), "ledger": str(ledger_path), "kind": "pointwise ratings",
                  "judges": ",".join(figures)}
        run_id = log_feedback_run(flat_metrics(figures), {"figures": figures, "status": status}, params,
                                  tracking_uri=tracking_uri, experiment=experiment,
                                  parent_run_id=parent_run_id,
                                  run_name=f"human ratings: {status['labelled']} of {status['pushed']} items")
        typer.echo(f"MLflow run: {run_id}")
    elif not mlflow:
        typer.echo("--no-mlflow: nothing logged to MLflow")
    if as_json:
        typer.echo(json.dumps({"figures": figures, "status": status}, indent=2, default=str))
