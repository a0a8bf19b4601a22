"""``judgebias annotate push|pull|status``: the human annotation loop on a Label Studio server.

The server URL and API key come from LABEL_STUDIO_URL / LABEL_STUDIO_API_KEY (never a flag: a token
on a command line ends up in shell history and process lists).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

annotate_app = typer.Typer(
    name="annotate",
    help="Send the most informative pairs to human annotators (Label Studio) and fold their labels back "
    "into the experiment. Needs LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY (scripts/labelstudio_start.sh "
    "writes both to <data dir>/labelstudio.env).",
    no_args_is_help=True,
)

_SELF_HELP = (
    "Responses of GENERATOR count as JUDGE's own (repeatable; a judge named like a generator "
    "is always its own)."
)


def _fail(message: str, code: int = 1) -> None:
    typer.secho(message, fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _self_map(items: list[str] | None) -> dict[str, tuple[str, ...]]:
    from annotation.selection import normalize_self_map

    try:
        return normalize_self_map(items or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--self") from None


def _ledger_for(table: Path, ledger: Path | None) -> Path:
    from annotation.store import default_ledger_path

    return ledger or default_ledger_path(table)


@annotate_app.command("push")
def push_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table (.jsonl/.parquet/.csv)."),
    budget: int = typer.Option(50, "--budget", "-n", min=0, help="How many new pairs to send."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Measured judge(s) (default: all judges)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = typer.Option(None, "--self", metavar="JUDGE=GENERATOR", help=_SELF_HELP),
    project_title: str = typer.Option(
        "judgebias pairwise preferences",
        help="Label Studio project (created with the pairwise config when absent, reused otherwise).",
    ),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite next to TABLE)."),
    seed: int = typer.Option(0, help="Seed of the per-pair left/right swap shown to annotators."),
    include_labelled: bool = typer.Option(False, "--include-labelled", help="Also consider pairs that "
                                          "already carry human labels in the table (e.g. to re-label them)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the ranking; push nothing."),
) -> None:
    """Push the BUDGET most informative pairs not pushed yet.

    Pairs are ranked by how much a human label can move the EO/DBG estimates (self-judged pairs, a
    split gold panel, judge-vs-gold disagreement, order flips; see docs/annotation.md). Annotators see
    only the prompt and the two responses, in a seeded random order. Pushing again never duplicates.
    """
    from annotation.labelstudio import LabelStudioClient, LabelStudioError, ServerSettings
    from annotation.selection import select_pairs
    from annotation.store import Ledger
    from judgebias.io import read_table
    from judgebias.table import TableError

    try:
        df, _ = read_table(table)
        ledger_path = _ledger_for(table, ledger)
        # A dry run, or a run that fails before pushing, leaves no ledger file behind.
        pushed = Ledger(ledger_path).pushed_keys() if ledger_path.exists() else set()
        sel = select_pairs(df, budget, judges=judge or None, gold_judges=gold or None,
                           self_map=_self_map(self_), exclude_keys=pushed, include_labelled=include_labelled)
    except (TableError, ValueError) as exc:
        _fail(str(exc))
    for r in sel.chosen.itertuples():
        typer.echo(f"{r.rank:>4}  {r.pair_id:<24} score {r.score:.3f}  " + "; ".join(r.reasons))
    typer.echo(
        f"{len(sel.chosen)} of {sel.candidates} candidate pairs chosen; not candidates: {sel.exclusions}"
    )
    if dry_run or sel.chosen.empty:
        return
    store = Ledger(ledger_path)
    try:
        client = LabelStudioClient(ServerSettings.from_env())
        result = client.push(sel.chosen, store, project_title=project_title, seed=seed)
    except LabelStudioError as exc:
        _fail(f"{exc}\nNothing was recorded for the pairs not pushed; the ledger {store.path} is intact.")
    typer.echo(
        f"project {result.project_id} at {client.url}: {result.pushed} task(s) created, "
        f"{result.adopted_from_server} already on the server adopted; ledger {store.path}"
    )


@annotate_app.command("pull")
def pull_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Judge(s) to recompute (default: all)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = typer.Option(None, "--self", metavar="JUDGE=GENERATOR", help=_SELF_HELP),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite)."),
    out: Path = typer.Option(None, help="Merged table to write (default: <table>.human.jsonl)."),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="Log the figures as a new MLflow run."),
    tracking_uri: str = typer.Option(None, envvar="MLFLOW_TRACKING_URI", help="MLflow tracking URI."),
    experiment: str = typer.Option(None, envvar="MLFLOW_EXPERIMENT_NAME",
                                   help="MLflow experiment when no --parent-run-id (default: judgebias)."),
    parent_run_id: str = typer.Option(None, help="The experiment's MLflow run: the new run is linked to it."),
    offline: bool = typer.Option(False, "--offline", help="Skip the server; recompute from the ledger."),
    reps: int = typer.Option(2000, min=100, help="Bootstrap replicates of the DBG interval."),
) -> None:
    """Pull labels, merge them into the table, recompute EO/DBG, log to MLflow.

    Takes every annotator, skips and edits (the latest version of an annotation wins, nothing counts
    twice), writes the table with the merged `human` column, recomputes EO with human labels as Y and
    DBG against the gold panel and the human-augmented gold, and logs a new MLflow run linked to the
    experiment's run.
    """
    from annotation.labelstudio import LabelStudioError
    from annotation.sync import SyncSettings, recompute_from_ledger, sync
    from judgebias.table import TableError

    settings = SyncSettings(
        table=table,
        judges=judge or (),
        ledger=_ledger_for(table, ledger),
        out=out,
        self_map=_self_map(self_),
        gold=gold or None,
        log_mlflow=mlflow,
        tracking_uri=tracking_uri,
        experiment=experiment,
        parent_run_id=parent_run_id,
        reps=reps,
    )
    try:
        if offline:
            figures, _ = recompute_from_ledger(settings)
            summary = {"figures": figures, "out": str(settings.out_path)}
        else:
            summary = sync(settings).summary()
    except LabelStudioError as exc:
        _fail(
            f"{exc}\nThe ledger {settings.ledger_path} is intact; run pull again when the server is back "
            "(or --offline to recompute from the labels already pulled)."
        )
    except (TableError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(json.dumps(summary, indent=2, default=str))


@annotate_app.command("status")
def status_cmd(
    table: Path = typer.Argument(None, help="Judgment table (locates the default ledger)."),
    ledger: Path = typer.Option(None, help="Labels ledger (default: <table>.labels.sqlite)."),
) -> None:
    """Pushed / labelled / pending counts and labels per annotator (from the ledger; no server)."""
    from annotation.store import Ledger

    if table is None and ledger is None:
        raise typer.BadParameter("give TABLE or --ledger")
    path = ledger or _ledger_for(table, None)
    if not Path(path).exists():
        _fail(f"no labels ledger at {path}: nothing pushed yet (run `judgebias annotate push`)")
    st = Ledger(path).status()
    typer.echo(f"ledger {path}")
    typer.echo(
        f"pushed {st['pushed']}  labelled {st['labelled']}  pending {st['pending']}  "
        f"labels {st['labels']}  skipped {st['skipped']}"
    )
    for who, counts in sorted(st["per_annotator"].items()):
        typer.echo(f"  {who:<16} labelled {counts['labelled']:>5}  skipped {counts['skipped']:>5}")


def register(app: typer.Typer) -> None:
    app.add_typer(annotate_app, name="annotate")
