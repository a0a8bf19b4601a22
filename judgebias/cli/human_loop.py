"""``judgebias annotate plan`` and ``judgebias annotate replay``: how many labels, and proof of the loop."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.annotate import SELF_HELP, annotate_app, ledger_for
from judgebias.cli.options import fail, origin_map


def _table_with_ledger_labels(table: Path, ledger: Path | None):
    from judgebias.annotation.feedback import merge_labels
    from judgebias.annotation.store import Ledger
    from judgebias.io import read_table

    df, _ = read_table(table)
    path = ledger_for(table, ledger)
    if path.exists():
        df, _ = merge_labels(df, Ledger(path).labels(include_skipped=True))
    return df


@annotate_app.command("plan")
def plan_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table."),
    judge: str = typer.Option(..., "--judge", "-j", help="The measured judge."),
    figure: str = typer.Option("eo", help="Figure to plan for: eo, tpr, tnr, dp_human, agreement_human, "
                               "agreement_gold_human, dbg_human, verbosity."),
    half_width: float = typer.Option(None, "--half-width", min=0.0, help="Target 95% half-width."),
    budget: list[int] = typer.Option(None, "--budget", "-n", help="Budgets to report the expected "
                                     "half-width for (repeatable)."),
    population: str = typer.Option("all", help="all or own (as for push)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = typer.Option(None, "--self", metavar="JUDGE=GENERATOR", help=SELF_HELP),
    ledger: Path = typer.Option(None, help="Labels ledger: its labels refine the pilot variances."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Labels needed for a target 95% half-width, and the half-width a budget buys, per design.

    Pilot variances come from the labels so far and, where a pair has none, from the gold panel's
    votes standing in for humans (so the first plan is a guess that the first batch corrects).
    PPI++ rows appear once 10 or more pairs carry labels.
    """
    from judgebias.annotation.planning import plan
    from judgebias.annotation.sampling import population_frame
    from judgebias.table import TableError

    if half_width is None and not budget:
        fail("give --half-width, --budget, or both")
    try:
        df = _table_with_ledger_labels(table, ledger)
        sm = origin_map(self_)
        frame = population_frame(df, population, judges=[judge], gold_judges=gold or None, self_map=sm)
        rows = plan(frame, df, judge, figure, half_width=half_width, budgets=budget or (), self_map=sm,
                    gold=gold or None)
    except (TableError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(rows.to_json(orient="records", indent=2))
        return
    first = rows.iloc[0]
    typer.echo(f"{figure} of {judge} over population {population!r} ({first['population_size']} pairs); "
               f"pilot labels: {first['pilot_labels']}")
    for r in rows.to_dict("records"):
        parts = [f"{r['design']:<10} {r['estimator']:<6}"]
        if half_width is not None:
            need = r.get("labels_for_target")
            parts.append(f"±{half_width:g} needs " + (f"{need} labels" if need is not None and need == need
                                                       else "more than the population"))
        for b in budget or ():
            hw = r.get(f"half_width_at_{b}")
            parts.append(f"n={b}: ±{hw:.3f}" if hw is not None and hw == hw else f"n={b}: n/a")
        if r.get("note") and r["note"] == r["note"]:
            parts.append(f"({r['note']})")
        typer.echo("  ".join(parts))
    if first["pilot_labels"] < 10:
        typer.echo("PPI++ is planned once 10 or more pairs carry labels (its residual variance needs them).")


def _budgets(text: str) -> tuple[int, ...]:
    """``--budgets`` as positive whole numbers, or a ValueError that names the bad entry."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) <= 0:
            raise ValueError(f"--budgets: {part!r} is not a positive whole number of labels "
                             "(give a comma-separated list such as 25,50,100)")
        out.append(int(part))
    return tuple(out)


@annotate_app.command("replay")
def replay_cmd(
    table: Path = typer.Argument(..., help="A judgment table whose pairs all carry human labels."),
    judge: list[str] = typer.Option(..., "--judge", "-j", help="Measured judge(s)."),
    self_: list[str] = typer.Option(None, "--self", metavar="JUDGE=GENERATOR", help=SELF_HELP),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    budgets: str = typer.Option("25,50,100,200,400", help="Comma-separated label budgets."),
    reps: int = typer.Option(200, min=1, help="Repetitions per budget."),
    batch: int = typer.Option(25, min=1, help="Labels per batch of the loop."),
    design: str = typer.Option("poisson", help="Design of methods (c) and (d)."),
    population: str = typer.Option("all", help="all or own."),
    figures: str = typer.Option("eo,agreement_human,verbosity", help="Comma-separated figures."),
    seed: int = typer.Option(0),
    out: Path = typer.Option(Path("replay"), help="Folder for results.csv, summary.csv/json and the plot."),
    mlflow: bool = typer.Option(False, "--mlflow/--no-mlflow", help="Log the summary and plot to MLflow."),
) -> None:
    """Hide the human labels, run the loop in batches, and score four methods against the all-labels
    figure: (a) the contested-pairs ranking with plain estimates, (b) uniform random with plain
    estimates, (c) the probability design with Hájek estimates, (d) the same draws with PPI++."""
    from judgebias.annotation.replay import (
        ReplaySettings,
        labels_saved,
        markdown,
        replay,
        saved_markdown,
        summarize,
    )
    from judgebias.io import read_table
    from judgebias.reporting.plots import replay_figure, save_figure
    from judgebias.table import TableError

    try:
        budget_list = _budgets(budgets)
        df, _ = read_table(table)
        settings = ReplaySettings(judges=judge, budgets=budget_list, reps=reps,
                                  batch=batch, design=design, population=population,
                                  figures=tuple(f.strip() for f in figures.split(",")),
                                  self_map=origin_map(self_), gold=gold or None, seed=seed)
        results = replay(df, settings)
    except (TableError, ValueError) as exc:
        fail(str(exc))
    summary = summarize(results)
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summary.to_dict("records"), indent=1, default=float))
    saved = labels_saved(summary)
    saved.to_csv(out / "labels_saved.csv", index=False)
    (out / "summary.md").write_text(markdown(summary) + "\n\nLabels PPI++ saves at equal width (Hájek labels "
                                    "for PPI++'s width, interpolated between budgets):\n\n"
                                    + saved_markdown(saved) + "\n")
    save_figure(replay_figure(summary), out / "replay.png")
    with_pd = summary.round(3)
    typer.echo(with_pd.to_string(index=False))
    typer.echo("labels PPI++ saves at equal width:\n" + saved.round(3).to_string(index=False))
    typer.echo(f"wrote {out}/results.csv, summary.csv, summary.json, summary.md, labels_saved.csv, "
               "replay.png")
    if mlflow:
        from judgebias.tracking.replay_run import log_replay

        typer.echo(f"MLflow run {log_replay(summary, out, vars(settings) | {'table': str(table)})}")


def register(app: typer.Typer) -> None:
    """Nothing at the top level: ``plan`` and ``replay`` join ``annotate`` (decorated on its group
    above), so this module is listed after ``annotate`` and imports it, never the reverse."""
