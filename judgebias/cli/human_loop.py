"""``judgebias annotate plan`` and ``judgebias annotate replay``: how many labels, and proof of the loop."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.annotate import SELF_HELP, annotate_app, ledger_for
from judgebias.cli.options import fail, origin_map, origin_option, out_folder


def _table_with_ledger_labels(table: Path, ledger: Path | None):
    from judgebias.annotation.feedback import merge_labels
    from judgebias.annotation.store import Ledger
    from judgebias.tables.files import read_table

    df, _ = read_table(table)
    path = ledger_for(table, ledger)
    if path.exists():
        df, _ = merge_labels(df, Ledger(path).labels(include_skipped=True))
    return df


@annotate_app.command("plan")
def plan_cmd(
    table: Path = typer.Argument(..., help="The experiment's judgment table."),
    judge: str = typer.Option(..., "--judge", "-j", help="The measured judge."),
    figure: str = typer.Option(None, help="Figure to plan for: eo (the default), tpr, tnr, dp_human, "
                               "agreement_human, agreement_gold_human, dbg_human, verbosity; a pointwise "
                               "table: score_bias_human (the default), human_mean, score_self_preference."),
    half_width: float = typer.Option(None, "--half-width", min=0.0, help="Target 95% half-width."),
    budget: list[int] = typer.Option(None, "--budget", "-n", help="Budgets to report the expected "
                                     "half-width for (repeatable)."),
    population: str = typer.Option("all", help="all or own (as for push)."),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    self_: list[str] = origin_option("--self", SELF_HELP),
    ledger: Path = typer.Option(None, help="Labels ledger: its labels refine the pilot variances."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """Labels needed for a target 95% half-width, and the half-width a budget buys, per design.

    Pilot variances come from the labels so far and, where a pair has none, from the gold panel's
    votes standing in for humans (so the first plan is a guess that the first batch corrects).
    PPI++ rows appear once 10 or more pairs carry labels.

    A pointwise table plans its rating figures over the items the judge scored: the ratings pulled so
    far and, where an item has none, the other judges' (--gold) mean score stand in for the human one.
    """
    from judgebias.annotation.planning import plan
    from judgebias.annotation.sampling import population_frame
    from judgebias.tables.pairwise import TableError
    from judgebias.tables.pointwise import file_is_pointwise

    if half_width is None and not budget:
        fail("give --half-width, --budget, or both")
    if file_is_pointwise(table):
        _plan_ratings(table, judge, figure or "score_bias_human", half_width, budget or (), population,
                      gold, origin_map(self_), ledger, as_json)
        return
    figure = figure or "eo"
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
    _plan_lines(rows, half_width, budget)
    if first["pilot_labels"] < 10:
        typer.echo("PPI++ is planned once 10 or more pairs carry labels (its residual variance needs them).")


def _plan_ratings(table, judge, figure, half_width, budgets, population, gold, self_map, ledger, as_json):
    """``annotate plan`` on a pointwise table: the ratings pulled so far refine the pilot."""
    from judgebias.annotation.rating_plan import MIN_PPI_LABELS, rating_plan
    from judgebias.tables.pairwise import TableError

    if population != "all":
        fail(f"--population {population}: a pointwise table's population is every item the judge scored "
             "(own responses are a figure there: --figure score_self_preference)")
    try:
        df = _pointwise_with_ratings(table, ledger)
        rows, pilot = rating_plan(df, judge, figure, half_width=half_width, budgets=budgets,
                                  self_map=self_map, gold=gold or None)
    except (TableError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(rows.to_json(orient="records", indent=2))
        return
    typer.echo(f"{figure} of {judge} over {rows.iloc[0]['population_size']} items it scored; pilot ratings: "
               f"{pilot['labelled']}, other judges' mean score standing in on {pilot['from_gold']}, "
               f"the judge's own score on {pilot['from_own_score']}")
    _plan_lines(rows, half_width, budgets)
    if pilot["from_own_score"]:
        typer.echo("the judge's own score stands in on items no other judge scored: it makes judge - human "
                   "zero there, so these widths are optimistic until ratings come in.")
    if pilot["labelled"] < MIN_PPI_LABELS:
        typer.echo(f"PPI++ is planned once {MIN_PPI_LABELS} or more items carry ratings (its residual "
                   "variance needs them).")


def _pointwise_with_ratings(table: Path, ledger: Path | None):
    """The pointwise table with the ledger's live ratings as ``human_scores`` of the items rated."""
    from judgebias.annotation.rating_loop import merge_ratings
    from judgebias.annotation.ratings import live_ratings
    from judgebias.annotation.store import Ledger
    from judgebias.cli.annotate_ratings import read_pointwise

    df = read_pointwise(table)
    path = ledger_for(table, ledger)
    return merge_ratings(df, live_ratings(Ledger(path))) if path.exists() else df


def _plan_lines(rows, half_width, budget) -> None:
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


FIGURES_HELP = ("Comma-separated figures (default eo,agreement_human,verbosity; a pointwise table: "
                "human_mean,score_bias_human,score_self_preference).")


@annotate_app.command("replay")
def replay_cmd(
    table: Path = typer.Argument(..., help="A judgment table whose pairs (or, pointwise, items) all carry "
                                 "human labels."),
    judge: list[str] = typer.Option(..., "--judge", "-j", help="Measured judge(s)."),
    self_: list[str] = origin_option("--self", SELF_HELP),
    gold: list[str] = typer.Option(None, "--gold", help="Gold-panel judge(s) (default: the other judges)."),
    budgets: str = typer.Option("25,50,100,200,400", help="Comma-separated label budgets."),
    reps: int = typer.Option(200, min=1, help="Repetitions per budget."),
    batch: int = typer.Option(25, min=1, help="Labels per batch of the loop."),
    design: str = typer.Option("poisson", help="Design of methods (c) and (d)."),
    population: str = typer.Option("all", help="all or own."),
    figures: str = typer.Option(None, help=FIGURES_HELP),
    seed: int = typer.Option(0),
    out: Path = typer.Option(Path("replay"), help="Folder for results.csv, summary.csv/json and the plot."),
    mlflow: bool = typer.Option(False, "--mlflow/--no-mlflow", help="Log the summary and plot to MLflow."),
) -> None:
    """Hide the human labels, run the loop in batches, and score four methods against the all-labels
    figure: (a) the contested-pairs ranking with plain estimates, (b) uniform random with plain
    estimates, (c) the probability design with Hájek estimates, (d) the same draws with PPI++.

    A pointwise table whose items all carry human ratings replays the rating loop: items drawn by the
    rating push's design, each rating figure Hájek (design) and PPI++ with the judge's score as the
    prediction (ppi), against the figure over every rated item. Items without a rating are left out.
    """
    from judgebias.annotation.replay import METHODS, ReplaySettings, replay
    from judgebias.tables.files import read_table
    from judgebias.tables.pairwise import TableError
    from judgebias.tables.pointwise import file_is_pointwise

    out_folder(out)
    pointwise = file_is_pointwise(table)
    if figures is None:
        figures = ("human_mean,score_bias_human,score_self_preference" if pointwise
                   else "eo,agreement_human,verbosity")
    try:
        budget_list = _budgets(budgets)
        settings = ReplaySettings(judges=judge, budgets=budget_list, reps=reps,
                                  batch=batch, design=design, population=population,
                                  figures=tuple(f.strip() for f in figures.split(",")),
                                  self_map=origin_map(self_), gold=gold or None, seed=seed)
        if pointwise:
            from judgebias.annotation.rating_replay import RATING_METHODS, rating_replay
            from judgebias.cli.annotate_ratings import read_pointwise

            results, info = rating_replay(read_pointwise(table), settings)
            methods = RATING_METHODS
            typer.echo(f"population: {info['items']} rated items scored by {', '.join(info['judges'])}"
                       + (f" ({info['unrated_left_out']} without a rating left out)"
                          if info["unrated_left_out"] else ""))
        else:
            df, _ = read_table(table)
            results, methods = replay(df, settings), METHODS
    except (TableError, ValueError) as exc:
        fail(str(exc))
    summary = _write_replay(results, out, methods)
    if mlflow:
        from judgebias.tracking.replay_run import log_replay

        typer.echo(f"MLflow run {log_replay(summary, out, vars(settings) | {'table': str(table)})}")


def _write_replay(results, out: Path, methods):
    """The replay's files in ``out`` and its tables on the terminal; returns the summary."""
    from judgebias.annotation.replay import labels_saved, markdown, saved_markdown, summarize
    from judgebias.reporting.plots import replay_figure, save_figure

    summary = summarize(results)
    out.mkdir(parents=True, exist_ok=True)
    from judgebias.display import spreadsheet_safe

    spreadsheet_safe(results).to_csv(out / "results.csv", index=False)
    spreadsheet_safe(summary).to_csv(out / "summary.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summary.to_dict("records"), indent=1, default=float))
    saved = labels_saved(summary)
    spreadsheet_safe(saved).to_csv(out / "labels_saved.csv", index=False)
    (out / "summary.md").write_text(markdown(summary, methods) + "\n\nLabels PPI++ saves at equal width "
                                    "(Hájek labels for PPI++'s width, interpolated between budgets):\n\n"
                                    + saved_markdown(saved) + "\n")
    save_figure(replay_figure(summary), out / "replay.png")
    typer.echo(summary.round(3).to_string(index=False))
    typer.echo("labels PPI++ saves at equal width:\n" + saved.round(3).to_string(index=False))
    typer.echo(f"wrote {out}/results.csv, summary.csv, summary.json, summary.md, labels_saved.csv, "
               "replay.png")
    return summary


def register(app: typer.Typer) -> None:
    """Nothing at the top level: ``plan`` and ``replay`` join ``annotate`` (decorated on its group
    above), so this module is listed after ``annotate`` and imports it, never the reverse."""
