"""``judgebias leaderboard TABLE --out leaderboard.json``: model strengths and ranks per judge under
bias-correcting variants, with their agreement with the human ranking."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def leaderboard_cmd(
    file: Path = typer.Argument(..., metavar="TABLE", help="Judgment table: .jsonl, .parquet or .csv."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the leaderboard JSON."),
    self_: list[str] = typer.Option(
        None, "--self", metavar="JUDGE=GENERATOR",
        help="GENERATOR is JUDGE itself under another name (as for analyze). Repeatable; comma lists "
             "allowed. A judge's own name and the table's judge_generator column always count."),
    family: list[str] = typer.Option(
        None, "--family", metavar="JUDGE=GENERATOR",
        help="GENERATOR is of JUDGE's family (e.g. pandalm-7b=llama-7b). Repeatable; comma lists allowed."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Only these judges (default: all)."),
    reps: int = typer.Option(1000, help="Bootstrap resamples of the prompts."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    label_sample: int = typer.Option(
        None, "--label-sample", metavar="N",
        help="human_anchored uses a seeded uniform sample of N labelled pairs instead of every one (what a "
             "small label budget buys; the human reference keeps every label)."),
    plots_dir: Path = typer.Option(None, "--plots-dir",
                                   help="Write the forest plot and the rank-change chart (PNG) here."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                      help="Exclude invalid rows (counted by reason) instead of failing."),
) -> None:
    """Bradley-Terry leaderboard of the generators, per judge, raw and bias-corrected.

    Variants: raw, style (Arena-Hard-Auto style control), related (without the judge's relatives'
    comparisons), related_term (explicit self/family term), panel (unrelated judges pooled per
    comparison), human_anchored (PPI++ with the human labels), human. 95% intervals and rank
    intervals from a seeded bootstrap over prompts; Kendall tau and Spearman with the human ranking.
    Layout: docs/metrics.md "Leaderboard".
    """
    from judgebias.display import terminal_safe
    from judgebias.io import read_table
    from judgebias.leaderboard import format_leaderboard, leaderboard
    from judgebias.metrics.origin import parse_self_map
    from judgebias.runstore import atomic_write_text
    from judgebias.table import TableError

    maps = {}
    for hint, spec in (("--self", self_), ("--family", family)):
        try:
            maps[hint] = parse_self_map(spec or [])
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=hint) from None
    try:
        table, _ = read_table(file, skip_invalid=skip_invalid)
        generators = {str(g) for col in ("generator_a", "generator_b") if col in table.columns
                      for g in table[col].dropna()}
        unknown = sorted({g for gens in maps["--family"].values() for g in gens} - generators)
        if unknown:  # a typo would otherwise only show as a variant identical to raw
            raise typer.BadParameter(f"--family names generator(s) the table does not have: {unknown}",
                                     param_hint="--family")
        result = leaderboard(table, self_map=maps["--self"], family_map=maps["--family"],
                             judges=judge or None, reps=reps, seed=seed, label_sample=label_sample)
    except TableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:
        typer.echo(terminal_safe(f"error: {file}: {exc}"), err=True)
        raise typer.Exit(2) from None
    typer.echo(terminal_safe(format_leaderboard(result), keep="\n"))
    if out is not None:
        atomic_write_text(out, json.dumps(result, indent=2, allow_nan=False) + "\n")
        typer.echo("\n" + terminal_safe(f"wrote {out}"))
    if plots_dir is not None:
        from judgebias.plots_leaderboard import leaderboard_figures, save_leaderboard_figures

        paths = save_leaderboard_figures(leaderboard_figures(result), plots_dir)
        typer.echo(terminal_safe(f"wrote {len(paths)} plot(s) to {plots_dir}"))


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard_cmd)
