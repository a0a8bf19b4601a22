"""``judgebias annotate push|pull|status``: the human annotation loop on a Label Studio server.

The server URL and API key come from LABEL_STUDIO_URL / LABEL_STUDIO_API_KEY (never a flag: a token
on a command line ends up in shell history and process lists).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import typer

from judgebias.cli.options import fail, origin_map, origin_option

annotate_app = typer.Typer(
    name="annotate",
    help="Draw a probability sample of the pairs (each pair's chance of being drawn is known and "
    "recorded), have human annotators label it in Label Studio, and estimate every human-anchored figure "
    "for all pairs from those labels. Needs LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY "
    "(scripts/labelstudio_start.sh writes both to <data dir>/labelstudio.env).",
    no_args_is_help=True,
)

SELF_HELP = (
    "Responses of GENERATOR count as JUDGE's own (repeatable; a judge named like a generator "
    "is always its own)."
)


def ledger_for(table: Path, ledger: Path | None) -> Path:
    from judgebias.annotation.store import default_ledger_path

    return ledger or default_ledger_path(table)


# The names before issue 32 made them public, for branches written against them.
_fail, ledger_for = fail, ledger_for


@annotate_app.command("push")
def push_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table (.jsonl/.parquet/.csv)."),
    budget: int = typer.Option(50, "--budget", "-n", min=1,
                               help="Pairs to draw in this batch (expected number for --design poisson)."),
    design: str = typer.Option("poisson", help="Probability design: poisson (each pair with probability "
                               "proportional to its usefulness score, floored at --min-prob), stratified "
                               "(Neyman allocation over own/other x judge-gold agreement x order flip), "
                               "or uniform."),
    population: str = typer.Option("all", help="Pairs the figures describe and the draw covers: all "
                                   "(every pair a measured judge rated) or own (pairs with the judge's "
                                   "own response)."),
    min_prob: float = typer.Option(None, min=0.0, max=1.0,
                                   help="poisson: inclusion-probability floor (default: half the "
                                   "uniform rate)."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Measured judge(s) (default: all judges)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = origin_option("--self", SELF_HELP),
    project_title: str = typer.Option(
        "judgebias pairwise preferences",
        help="Label Studio project (created with the pairwise config when absent, reused otherwise).",
    ),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite next to TABLE)."),
    seed: int = typer.Option(0, help="Seed of the draw and of the left/right swap shown to annotators."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Show the batch's design; record and push nothing."),
    rubric: str = typer.Option(None, help="Pointwise tables: the rubric raters read under the response "
                               "(default: the row's criterion and the scale's ends)."),
) -> None:
    """Draw the next batch of pairs by a probability design and push it to Label Studio.

    Every pair of the population gets a known inclusion probability, recorded in the ledger with the
    batch before any task is created, so `annotate pull` can estimate each figure for the whole
    population (Hájek and PPI++) instead of averaging hand-picked pairs (docs/annotation.md). A push
    interrupted mid-way finishes its batch on the next run. Annotators see only the prompt and the two
    responses, in a seeded random order.

    A pointwise table (one response per row) gets rating tasks instead: one response, the rubric and
    one choice per score of the table's scale; items are drawn the same way.
    """
    from judgebias.tables.pointwise import file_is_pointwise

    if file_is_pointwise(table):
        from judgebias.cli.annotate_ratings import RATING_TITLE, push_ratings

        title = RATING_TITLE if project_title == "judgebias pairwise preferences" else project_title
        push_ratings(table, budget=budget, design=design, min_prob=min_prob, judges=judge or None,
                     self_map=origin_map(self_), project_title=title,
                     ledger_path=ledger_for(table, ledger), seed=seed, dry_run=dry_run, rubric=rubric)
        return
    from judgebias.annotation.labelstudio import LabelStudioClient, LabelStudioError, ServerSettings
    from judgebias.annotation.labelstudio import project_title as title_ok
    from judgebias.annotation.loop import DesignSettings
    from judgebias.annotation.store import Ledger
    from judgebias.tables.files import read_table
    from judgebias.tables.pairwise import TableError

    settings = DesignSettings(design=design, population=population, min_prob=min_prob, seed=seed,
                              judges=judge or None, gold=gold or None, self_map=origin_map(self_))
    ledger_path = ledger_for(table, ledger)
    try:
        project_title = title_ok(project_title)  # before the batch is drawn and recorded
        df, _ = read_table(table)
        client = None if dry_run else LabelStudioClient(ServerSettings.from_env())
        # A dry run leaves no ledger file behind; a real push records the batch before pushing it.
        store = Ledger(ledger_path) if (ledger_path.exists() or not dry_run) else None
    except (TableError, ValueError, LabelStudioError) as exc:
        fail(str(exc))
    with store.lock() if store is not None else nullcontext():
        _push_locked(df, store, client, budget, settings, project_title, seed, dry_run)


def _push_locked(df, store, client, budget, settings, project_title, seed, dry_run) -> None:
    """Draw (or resume) and push while holding the ledger's lock."""
    from judgebias.annotation.loop import next_batch
    from judgebias.cli.annotate_push import report_and_push

    try:
        batch = next_batch(df, store, budget, settings, record=not dry_run)
    except ValueError as exc:
        fail(str(exc))
    note = None
    if not batch.resumed and batch.summary["design"] == "stratified":
        from judgebias.metrics.human import STRATIFIED_DIFFERENCE_WARNING

        note = f"note: {STRATIFIED_DIFFERENCE_WARNING} (EO, verbosity)"
    report_and_push(client, batch, store, project_title=project_title, seed=seed, dry_run=dry_run,
                    unit="pair", tasks="task", note=note)


@annotate_app.command("pull")
def pull_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Judge(s) to recompute (default: all)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = origin_option("--self", SELF_HELP),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite)."),
    out: Path = typer.Option(None, help="Merged table to write (default: <table>.human.jsonl)."),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="Log the figures as a new MLflow run."),
    tracking_uri: str = typer.Option(None, envvar="MLFLOW_TRACKING_URI", help="MLflow tracking URI."),
    experiment: str = typer.Option(None, envvar="MLFLOW_EXPERIMENT_NAME",
                                   help="MLflow experiment when no --parent-run-id (default: judgebias)."),
    parent_run_id: str = typer.Option(None, help="The experiment's MLflow run: the new run is linked to it."),
    offline: bool = typer.Option(False, "--offline", help="Skip the server; recompute from the ledger."),
    reps: int = typer.Option(2000, min=100, help="Bootstrap replicates of the DBG interval."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON after the summary."),
) -> None:
    """Pull labels, merge them into the table, estimate every human-label figure, log to MLflow.

    Takes every annotator, skips and edits (the latest version of an annotation wins, nothing counts
    twice) and writes the table with the merged `human` column. Each figure (EO, TPR/TNR, human
    own-preference, judge-human and gold-human agreement, DBG against humans, verbosity parity) is
    estimated for the population the batches were drawn from: Hájek with the design's variance and
    PPI++ with the gold panel as predictor, each with its 95% interval, labels used and effective
    sample size. Figures on the labelled pairs alone are printed as that subset only.

    A pointwise table: ratings become each item's `human_scores`; the human mean score, the judge's
    bias against humans and its score self-preference are estimated for every item, Hájek and PPI++
    (the judge's score as the prediction).
    """
    from judgebias.tables.pointwise import file_is_pointwise

    if file_is_pointwise(table):
        from judgebias.cli.annotate_ratings import pull_ratings

        if mlflow and not offline:
            from judgebias.tracking.settings import TrackingSettings

            TrackingSettings(**({"tracking_uri": tracking_uri} if tracking_uri else {})).check_reachable()
        pull_ratings(table, judges=judge or None, self_map=origin_map(self_),
                     ledger_path=ledger_for(table, ledger), out=out, offline=offline, mlflow=mlflow,
                     tracking_uri=tracking_uri, experiment=experiment, parent_run_id=parent_run_id,
                     as_json=as_json)
        return
    from judgebias.annotation.labelstudio import LabelStudioError
    from judgebias.annotation.sync import SyncSettings, recompute_from_ledger, sync
    from judgebias.tables.pairwise import TableError

    settings = SyncSettings(
        table=table,
        judges=judge or (),
        ledger=ledger_for(table, ledger),
        out=out,
        self_map=origin_map(self_),
        gold=gold or None,
        log_mlflow=mlflow,
        tracking_uri=tracking_uri,
        experiment=experiment,
        parent_run_id=parent_run_id,
        reps=reps,
    )
    if mlflow and not offline:
        from judgebias.tracking.settings import TrackingSettings

        TrackingSettings(**({"tracking_uri": tracking_uri} if tracking_uri else {})).check_reachable()
    try:
        if offline:
            previous = settings.previous_figures()
            figures, _ = recompute_from_ledger(settings)
            summary = {"figures": figures, "previous_figures": previous, "out": str(settings.out_path)}
        else:
            summary = sync(settings).summary()
    except LabelStudioError as exc:
        fail(
            f"{exc}\nThe ledger {settings.ledger_path} is intact; run pull again when the server is back "
            "(or --offline to recompute from the labels already pulled)."
        )
    except (TableError, ValueError) as exc:
        fail(str(exc))
    from judgebias.annotation.summary import sync_lines

    if offline:
        typer.echo("offline: Label Studio not contacted; figures recomputed from the ledger's labels")
    if not mlflow:
        typer.echo("--no-mlflow: nothing logged to MLflow")
    elif offline:
        typer.echo("offline: nothing logged to MLflow either")
    typer.echo("\n".join(sync_lines(summary)))
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))


@annotate_app.command("status")
def status_cmd(
    table: Path = typer.Argument(None, help="Judgment table (locates the default ledger)."),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite)."),
) -> None:
    """Pushed / labelled / pending counts and labels per annotator (from the ledger; no server)."""
    from judgebias.annotation.store import Ledger

    if table is None and ledger is None:
        raise typer.BadParameter("give TABLE or --ledger")
    path = ledger or ledger_for(table, None)
    if not Path(path).exists():
        fail(f"no labels ledger at {path}: nothing pushed yet (run `judgebias annotate push`)")
    from judgebias.tables.pointwise import file_is_pointwise

    if table is not None and file_is_pointwise(table):
        from judgebias.annotation.ratings import rating_status

        st = rating_status(Ledger(path))
        typer.echo(f"ledger {path}\nitems pushed {st['pushed']}, rated {st['labelled']}, pending "
                   f"{st['pending']}; ratings {st['labels']}, skipped {st['skipped']}")
        return
    st = Ledger(path).status()
    typer.echo(f"ledger {path}")
    from judgebias.annotation.summary import ledger_line

    typer.echo(ledger_line(st))
    for who, counts in sorted(st["per_annotator"].items()):
        typer.echo(f"  {who:<16} labelled {counts['labelled']:>5}  skipped {counts['skipped']:>5}  "
                   f"both bad {counts.get('both_bad', 0):>4}")


def register(app: typer.Typer) -> None:
    app.add_typer(annotate_app, name="annotate")
