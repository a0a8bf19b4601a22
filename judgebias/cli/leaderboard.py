"""``judgebias leaderboard TABLE --out leaderboard.json``: model strengths and ranks per judge under
bias-correcting variants, with their agreement with the human ranking."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from judgebias.cli.options import BootstrapSeed, SkipInvalid, cluster_by_option, margin_option, origin_option


def leaderboard_cmd(
    file: Path = typer.Argument(..., metavar="TABLE", help="Judgment table: .jsonl, .parquet or .csv."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the leaderboard JSON."),
    self_: list[str] = origin_option(
        "--self",
        help="GENERATOR is JUDGE itself under another name (as for analyze). Repeatable; comma lists "
             "allowed. A judge's own name and the table's judge_generator column always count."),
    family: list[str] = origin_option(
        "--family",
        help="GENERATOR is of JUDGE's family (e.g. pandalm-7b=llama-7b). Repeatable; comma lists allowed."),
    judge: list[str] = typer.Option(None, "--judge", "-j", help="Only these judges (default: all)."),
    reps: int = typer.Option(1000, help="Bootstrap resamples of the prompts (or --cluster-by clusters)."),
    cluster_by: str = cluster_by_option(
        help="What the bootstrap resamples: the values of COLUMN (rows sharing one are not independent); "
             "default the prompt, 'none' every pair on its own. The audit figures read the same."),
    seed: BootstrapSeed = 0,
    label_sample: int = typer.Option(
        None, "--label-sample", metavar="N",
        help="human_anchored uses a seeded uniform sample of N labelled pairs instead of every one (what a "
             "small label budget buys; the human reference keeps every label)."),
    plots_dir: Path = typer.Option(None, "--plots-dir",
                                   help="Write the forest plot and the rank-change chart (PNG) here."),
    skip_invalid: SkipInvalid = False,
    target_half_width: float = typer.Option(
        None, "--target-half-width", metavar="H",
        help="The planner's target: 95% half-width (log-odds) on the recommended ranking's top-two gap "
             "(default: the gap itself, so its interval would just exclude 0)."),
    timing: list[str] = typer.Option(
        None, "--timing", metavar="RATER=SECONDS[:USD]",
        help="Measured seconds (and dollars) per 1,000 judgments of a judge or 'panel' (e.g. from "
             "`judgebias bench`); the recommendation's last tie-break. Repeatable. Judges that "
             "`judgebias judge` recorded beside TABLE (TABLE.usage.json) need none."),
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow",
                                help="Log params, metrics, the JSON and the plots to MLflow "
                                     "(MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)."),
    margin: list[str] = margin_option(
        help="Override a margin the recommendation's R4 reads (verbosity_bias=0.05, "
             "style_length_term=0.2): R4 passes only with the interval inside it, else inconclusive."),
    run_name: str = typer.Option(None, help="MLflow run name (default: leaderboard <file name>)."),
) -> None:
    """Bradley-Terry leaderboard of the generators, per judge, raw and bias-corrected.

    Variants: raw, style (Arena-Hard-Auto style control), related (without the judge's relatives'
    comparisons), related_term (explicit self/family term), panel (unrelated judges pooled per
    comparison), human_anchored (PPI++ with the human labels), human. 95% intervals and rank
    intervals from a seeded bootstrap over prompts; Kendall tau and Spearman with the human ranking.
    Layout: docs/metrics.md "Leaderboard".
    """
    from judgebias.cli.options import input_errors, origin_map, require_tracking
    from judgebias.display import terminal_safe
    from judgebias.reporting.leaderboard import format_leaderboard, leaderboard
    from judgebias.runs.store import atomic_write_text
    from judgebias.tables.files import read_table

    require_tracking(mlflow)
    try:
        timings = parse_timing(timing or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--timing") from None
    if target_half_width is not None and not target_half_width > 0:
        raise typer.BadParameter(f"must be > 0, got {target_half_width}", param_hint="--target-half-width")
    from judgebias.metrics.margins import parse_overrides
    from judgebias.metrics.recommend import MARGINS

    try:
        margins = parse_overrides(margin or [], MARGINS)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--margin") from None
    maps = {hint: origin_map(spec, hint) for hint, spec in (("--self", self_), ("--family", family))}
    with input_errors(file):
        from judgebias.tables.files import read_usage

        try:
            recorded = recorded_timing(read_usage(file))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="TABLE") from None
        timings = {**recorded, **timings}  # what is typed in wins over what was recorded
        table, _ = read_table(file, skip_invalid=skip_invalid)
        generators = {str(g) for col in ("generator_a", "generator_b") if col in table.columns
                      for g in table[col].dropna()}
        unknown = sorted({g for gens in maps["--family"].values() for g in gens} - generators)
        if unknown:  # a typo would otherwise only show as a variant identical to raw
            raise typer.BadParameter(f"--family names generator(s) the table does not have: {unknown}",
                                     param_hint="--family")
        result = leaderboard(table, self_map=maps["--self"], family_map=maps["--family"],
                             judges=judge or None, reps=reps, seed=seed, label_sample=label_sample,
                             timing=timings, target_half_width=target_half_width, cluster_by=cluster_by,
                             margins=margins)
    typer.echo(terminal_safe(format_leaderboard(result), keep="\n"))
    if out is not None:
        atomic_write_text(out, json.dumps(result, indent=2, allow_nan=False) + "\n")
        typer.echo("\n" + terminal_safe(f"wrote {out}"))
    figures = None
    if plots_dir is not None or mlflow:
        from judgebias.reporting.plots_leaderboard import leaderboard_figures, save_leaderboard_figures

        figures = leaderboard_figures(result)
        if plots_dir is not None:
            paths = save_leaderboard_figures(figures, plots_dir)
            typer.echo(terminal_safe(f"wrote {len(paths)} plot(s) to {plots_dir}"))
    if mlflow:
        from judgebias.tracking.log_leaderboard import log_leaderboard
        from judgebias.tracking.mlflow_run import mlflow_run
        from judgebias.tracking.settings import TrackingSettings

        settings = TrackingSettings()
        with mlflow_run(run_name or f"leaderboard {file.name}", settings=settings,
                        tags={"judgebias.command": "leaderboard"}) as run:
            counts = log_leaderboard(result, figures=figures)
        from judgebias.redaction import redact_uri

        typer.echo(terminal_safe(f"MLflow: run {run.info.run_id} at {redact_uri(settings.resolved_uri())} "
                                 f"({counts['metrics']} metrics, {counts['figures']} plots)"))


def parse_timing(specs: list[str]) -> dict[str, dict]:
    """``RATER=SECONDS[:USD]`` entries as rater -> {"seconds_per_1000", "usd_per_1000", "source"}."""
    out: dict[str, dict] = {}
    for spec in specs:
        rater, sep, value = spec.partition("=")
        seconds, _, usd = value.partition(":")
        try:
            numbers = [float(seconds), *([float(usd)] if usd else [])]
        except ValueError:
            numbers = []
        bad = not numbers or any(not (x >= 0) or x == float("inf") for x in numbers)
        if not sep or not rater.strip() or bad:
            raise ValueError(f"expected RATER=SECONDS[:USD] with numbers >= 0, got {spec!r}")
        out[rater.strip()] = {"seconds_per_1000": numbers[0],
                              "usd_per_1000": numbers[1] if len(numbers) > 1 else None,
                              "source": "given with --timing"}
    return out


def recorded_timing(record: dict) -> dict[str, dict]:
    """The judges' seconds (and dollars) per 1,000 judgments that ``judgebias judge`` recorded
    (``judgebias.tables.files.read_usage``), as ``parse_timing`` gives them; judges whose run made no call
    (all from the call cache) or did not finish are left out."""
    out: dict[str, dict] = {}
    for judge, r in (record.get("judges") or {}).items():
        per = r.get("per_1000") if isinstance(r, dict) else None
        if r.get("status") != "finished" or not per or per.get("seconds_per_1000") is None:
            continue
        out[judge] = {"seconds_per_1000": float(per["seconds_per_1000"]),
                      "usd_per_1000": per.get("usd_per_1000"),
                      "source": f"recorded by judgebias judge at {r.get('recorded')}: {per.get('basis')} "
                                f"in {r.get('seconds')} s"}
    return out


def register(app: typer.Typer) -> None:
    app.command("leaderboard")(leaderboard_cmd)
