"""The end of ``annotate push`` for pairs and (a pointwise table) items alike: say what the batch is,
push it unless it is a dry run, and say where it went. ``annotate`` and ``annotate_ratings`` both call
it, so the two pushes print the same lines."""

from __future__ import annotations

import typer

from judgebias.cli.options import fail


def report_and_push(client, batch, store, *, project_title: str, seed: int, dry_run: bool, unit: str,
                    tasks: str, note: str | None = None) -> None:
    """``batch``: a ``loop.Batch`` (``next_batch`` or ``next_rating_batch``); ``note``: a line printed
    after the batch's own (the pairwise stratified design's caution)."""
    from judgebias.annotation.labelstudio import LabelStudioError
    from judgebias.annotation.summary import batch_lines, pushed_lines

    typer.echo("\n".join(batch_lines(batch.summary, resumed=batch.resumed, unit=unit)))
    if note:
        typer.echo(note)
    if dry_run or batch.rows.empty:
        return
    try:
        result = client.push(batch.rows, store, project_title=project_title, seed=seed)
    except LabelStudioError as exc:
        fail(f"{exc}\nThe batch is recorded in {store.path}; run push again to finish it (no new draw).")
    typer.echo("\n".join(pushed_lines(result, client.url, store.path, tasks=tasks)))
