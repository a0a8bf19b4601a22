"""``judgebias import FORMAT SRC --out FILE``: turn a real dataset into a judgment table."""

from __future__ import annotations

from pathlib import Path

import typer

FORMAT_HELP = {
    "pandalm": "folder with testset-v1.json and <judge>-testset-v1.json files",
    "alpaca-eval": "results folder of <model>/model_outputs.json, <model>/<annotator>/annotations.json",
    "llmbar": "subset folder (dataset.json, evaluators/<model>/<strategy>/result.json) or their parent",
    "hh-rlhf": "*.jsonl.gz of chosen/rejected dialogues (A/B order drawn with --seed)",
    "arena": "local .jsonl/.json/.parquet, or hf:lmsys/chatbot_arena_conversations",
    "mt-bench-human": "local .jsonl/.json/.parquet, or hf:lmsys/mt_bench_human_judgments",
    "mlflow": "no SRC: the traces of --experiment NAME at MLFLOW_TRACKING_URI and their assessments "
              "(docs/mlflow-genai.md)",
    "mt-bench-single": "FastChat model_judgment/*_single.jsonl (single-answer scores; a pointwise table)",
    "table": "any judgment table as .csv/.jsonl/.parquet (columns: docs/importers.md), pairwise or pointwise",
}
FIELD_COLUMNS = ("pair_id", "prompt", "response_a", "response_b", "generator_a", "generator_b")


def _parse_mapping(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        judge, sep, generator = item.partition("=")
        if not sep or not judge.strip() or not generator.strip():
            raise typer.BadParameter(f"{item!r}: expected JUDGE=GENERATOR", param_hint="--judge-generator")
        out[judge.strip()] = generator.strip()
    return out


def _rule(fold: str) -> str:
    from judgebias.tables.folding import check_rule

    try:
        return check_rule(fold)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fold") from None


def import_cmd(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="One of: " + ", ".join(FORMAT_HELP)),
    src: str = typer.Argument(None, metavar="SRC", help="File or folder to import, or hf:<repo> "
                              "(none for mlflow)."),
    out: Path = typer.Option(..., "--out", "-o", help="Table to write: .jsonl or .parquet."),
    seed: int = typer.Option(0, help="hh-rlhf: RNG seed for which response is A (stored in order_seed)."),
    split: list[str] = typer.Option(None, "--split", help="arena/mt-bench-human: split(s) to read "
                                    "(hub or a {split: rows} JSON); repeat for several. Default: all."),
    turns: str = typer.Option("all", help="arena/mt-bench-human: 'all' renders later turns as transcripts, "
                              "'first' leaves multi-turn judgments out (counted)."),
    judge_generator: list[str] = typer.Option(
        None, "--judge-generator", metavar="JUDGE=GENERATOR",
        help="Say which generator a judge is (e.g. weighted_alpaca_eval_gpt4_turbo=gpt4_1106_preview); "
             "fills the judge_generator column. Repeatable."),
    fold: str = typer.Option("auto", "--fold", metavar="RULE",
                             help="How rows with both presentation orders fold into verdict: auto "
                                  "(mean-probability where both orders have P(A), else agree-else-tie), "
                                  "agree-else-tie or mean-probability. See docs/metrics.md."),
    experiment: str = typer.Option(None, "--experiment", help="mlflow: the experiment whose traces to read."),
    judge_assessment: list[str] = typer.Option(
        None, "--judge-assessment", metavar="NAME",
        help="mlflow: feedback name(s) holding a judge's pairwise verdict (a/b/tie) or P(A); the judge "
             "is the feedback's source id. Repeatable. Default: preference."),
    human_assessment: str = typer.Option(None, "--human-assessment", metavar="NAME",
                                         help="mlflow: feedback name of the HUMAN-source labels "
                                              "(default: preference; pointwise: score)."),
    mode: str = typer.Option("auto", "--mode", help="mlflow: pairwise (verdicts on two responses), "
                             "pointwise (a score per response: --judge-assessment defaults to score) or "
                             "auto: pointwise when the experiment holds judgebias' pointwise traces and "
                             "no pairwise ones."),
    trace_filter: str = typer.Option(None, "--filter", metavar="FILTER",
                                     help="mlflow: a search_traces filter string, e.g. "
                                          "\"tag.`judgebias.position_flip` = 'true'\"."),
    pair_id_field: str = typer.Option(None, "--pair-id-field", metavar="SPEC",
                                      help="mlflow: where each column is read, as request.KEY (the root "
                                           "span's inputs), response.KEY (its outputs), tag.NAME or "
                                           "metadata.NAME; default request.<column>. Same for the "
                                           "five options below."),
    prompt_field: str = typer.Option(None, "--prompt-field", metavar="SPEC"),
    response_a_field: str = typer.Option(None, "--response-a-field", metavar="SPEC"),
    response_b_field: str = typer.Option(None, "--response-b-field", metavar="SPEC"),
    generator_a_field: str = typer.Option(None, "--generator-a-field", metavar="SPEC"),
    generator_b_field: str = typer.Option(None, "--generator-b-field", metavar="SPEC"),
) -> None:
    """Import a real dataset into a judgment table; prints rows, judges, labelled pairs, exclusions.

    Formats (details in docs/importers.md):

    """
    from judgebias.importers import IMPORTERS, finish_import, import_dataset, split_counts
    from judgebias.tables.files import write_table
    from judgebias.tables.pairwise import TableError, human_label

    if fmt not in IMPORTERS and fmt != "mlflow":
        raise typer.BadParameter(f"unknown format {fmt!r}; choose from {', '.join(IMPORTERS)}",
                                 param_hint="FORMAT")
    if turns not in ("all", "first"):
        raise typer.BadParameter("use 'all' or 'first'", param_hint="--turns")
    mapping = _parse_mapping(judge_generator or [])
    specs = dict(zip(FIELD_COLUMNS, (pair_id_field, prompt_field, response_a_field, response_b_field,
                                     generator_a_field, generator_b_field), strict=True))
    if fmt != "mlflow" and src is None:
        raise typer.BadParameter(f"{fmt} needs a file or folder to import", param_hint="SRC")
    if fmt == "mlflow" and not experiment:
        raise typer.BadParameter("mlflow needs the experiment to read", param_hint="--experiment")
    try:
        if fmt == "mlflow":
            table, exclusions = _read_mlflow(experiment, judge_assessment, human_assessment,
                                             {k: v for k, v in specs.items() if v}, trace_filter, mode)
            if "pair_id" in table.columns:
                table, exclusions = finish_import(table, exclusions, f"mlflow experiment {experiment!r}",
                                                  judge_generator=mapping, fold_rule=_rule(fold))
        else:
            table, exclusions = import_dataset(fmt, src, judge_generator=mapping, seed=seed,
                                               split=split or None, turns=turns, fold_rule=_rule(fold))
        write_table(table, out)
    except TableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None

    judges = sorted(table["judge"].dropna().unique())
    if "pair_id" not in table.columns:  # a pointwise table (judgebias.tables.pointwise)
        judges = [j for j in judges if j]
        rated = int(table["human_scores"].map(len).gt(0).sum())
        typer.echo(f"wrote {out}")
        typer.echo(f"pointwise rows: {len(table)}  items: {table['item_id'].nunique()}  judges: {len(judges)}"
                   + (f" ({', '.join(judges)})" if judges else "") + f"  rows with human scores: {rated}")
        from judgebias.display import terminal_safe
        from judgebias.tables.pointwise import unscored_reasons

        reasons = unscored_reasons(table)
        typer.echo(f"unscored judge rows: {sum(reasons.values())}"
                   + "".join(f"\n  {v}: {terminal_safe(k)[:160]}" for k, v in reasons.items()))
        return
    per_pair = table.drop_duplicates("pair_id")
    labelled = int(per_pair["human"].map(len).gt(0).sum())
    with_majority = int(human_label(per_pair).notna().sum())
    dropped, no_verdict, recoded = split_counts(exclusions)
    typer.echo(f"wrote {out}")
    typer.echo(f"rows: {len(table)}  pairs: {table['pair_id'].nunique()}  judges: {len(judges)}"
               + (f" ({', '.join(judges)})" if judges else ""))
    typer.echo(f"pairs with human labels: {labelled} (with a strict majority: {with_majority})")
    # Reasons name what was left out (source records: whole pairs or judge rows); see docs/importers.md.
    typer.echo(f"excluded: {sum(dropped.values())}" + "".join(f"\n  {k}: {v}" for k, v in dropped.items()))
    if no_verdict:
        typer.echo(f"kept without a verdict (judge rows; counted as judge_missing by the metrics): "
                   f"{sum(no_verdict.values())}" + "".join(f"\n  {k}: {v}" for k, v in no_verdict.items()))
    if recoded:
        typer.echo("recoded (kept):" + "".join(f"\n  {k}: {v}" for k, v in recoded.items()))


def _read_mlflow(experiment: str, judges: list[str] | None, human: str | None, fields: dict[str, str],
                 trace_filter: str | None, mode: str = "auto"):
    """The MLflow reader lives in tracking/ (the domain core never imports mlflow)."""
    from judgebias.tracking.settings import TrackingSettings
    from judgebias.tracking.trace_import import check_field_spec, read_judgment_traces

    if mode not in ("auto", "pairwise", "pointwise"):
        raise typer.BadParameter("use pairwise, pointwise or auto", param_hint="--mode")

    for column, spec in fields.items():
        try:
            check_field_spec(spec)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=f"--{column.replace('_', '-')}-field") from None
    from judgebias.tracking.settings import TrackingUnavailable

    try:
        TrackingSettings().use_store()
    except TrackingUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from judgebias.tracking.pointwise_traces import LAYOUT, experiment_layouts, read_pointwise_traces

    if mode == "auto":
        mode = "pointwise" if experiment_layouts(experiment) == {LAYOUT} else "pairwise"
    if mode == "pointwise":
        if fields:
            raise typer.BadParameter("the pair field options read pairwise traces", param_hint="--mode")
        return read_pointwise_traces(experiment, judge_assessments=judges or ["score"],
                                     human_assessment=human or "score", filter_string=trace_filter)
    return read_judgment_traces(experiment, judge_assessments=judges or ["preference"],
                                human_assessment=human or "preference", fields=fields,
                                filter_string=trace_filter)


import_cmd.__doc__ += "\n\n".join(f"  {k}: {v}" for k, v in FORMAT_HELP.items())


def register(app: typer.Typer) -> None:
    app.command(name="import", help=import_cmd.__doc__)(import_cmd)
