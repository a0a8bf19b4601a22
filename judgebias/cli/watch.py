"""``judgebias compare A B`` (what changed between two runs of a judge) and ``judgebias gate METRICS``
(CI rules over the figures). A run is named by its metrics JSON, its run folder, its judgment table
(analyzed here), ``bundled:NAME`` (a table shipped with judgebias) or an MLflow run id."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from judgebias.cli.options import BootstrapSeed

_TABLE_SUFFIXES = (".parquet", ".jsonl", ".csv")


@dataclass
class Loaded:
    name: str
    result: dict[str, Any]
    table: Any = None  # the judgment table (pandas) when known
    mlflow_run: str | None = None


def _read_table(path: Path):
    from judgebias.tables.files import read_table

    table, _ = read_table(path)
    return table


def _analyzed(name: str, path: Path, reps: int, seed: int) -> Loaded:
    from judgebias.reporting.analysis import analyze

    table = _read_table(path)
    return Loaded(name, analyze(table, reps=reps, seed=seed), table)


def load_run(spec: str, work: Path, *, table: Path | None = None, reps: int = 2000, seed: int = 0) -> Loaded:
    """One run from what the user named (see the module's doc); ``table``: its judgment table, for a
    metrics JSON that stands alone."""
    from judgebias.runs.layout import RunLayout
    from judgebias.tracking.compare_run import fetch_run, looks_like_run_id

    path = Path(spec)
    if spec.startswith("bundled:"):
        from judgebias.bundled import BUNDLED

        found = {b.name: b for b in BUNDLED}
        entry = found.get(spec.removeprefix("bundled:"))
        if entry is None:
            raise typer.BadParameter(
                f"{spec!r}: bundled tables are {', '.join('bundled:' + n for n in found)}"
            )
        return _analyzed(spec, entry.path(), reps, seed)
    if path.is_dir():
        metrics, tpath = path / RunLayout().metrics, path / RunLayout().table
        if not metrics.is_file():
            raise typer.BadParameter(f"{spec}: a folder without {RunLayout().metrics} is no run folder")
        tpath = table or (tpath if tpath.is_file() else None)
        return Loaded(
            spec, json.loads(metrics.read_text(encoding="utf-8")), _read_table(tpath) if tpath else None
        )
    if path.is_file() and path.suffix == ".json":
        return Loaded(
            spec, json.loads(path.read_text(encoding="utf-8")), _read_table(table) if table else None
        )
    if path.is_file() and path.suffix in _TABLE_SUFFIXES:
        return _analyzed(spec, path, reps, seed)
    if looks_like_run_id(spec):
        metrics, tpath = fetch_run(spec, work / spec)
        tpath = table or tpath
        return Loaded(
            spec,
            json.loads(metrics.read_text(encoding="utf-8")),
            _read_table(tpath) if tpath else None,
            mlflow_run=spec,
        )
    raise typer.BadParameter(
        f"{spec!r} is no metrics JSON, run folder, judgment table ({', '.join(_TABLE_SUFFIXES)}), "
        "bundled:NAME or MLflow run id"
    )


def judge_pairs(before: Loaded, after: Loaded, judge: str | None, judge_b: str | None):
    """The (before, after) sides to compare: the named judge(s), else every judge both runs have,
    else the one judge of each."""
    from judgebias.reporting.run_compare import Side

    ja, jb = list(before.result.get("judges") or {}), list(after.result.get("judges") or {})
    if judge or judge_b:
        names = [(judge or judge_b, judge_b or judge)]
    elif shared := [j for j in ja if j in jb]:
        names = [(j, j) for j in shared]
    elif len(ja) == 1 and len(jb) == 1:
        names = [(ja[0], jb[0])]
    else:
        raise typer.BadParameter(
            f"the runs share no judge name (before: {ja}; after: {jb}): name them with --judge and --judge-b"
        )
    for a, b in names:
        for run, j, have in ((before, a, ja), (after, b, jb)):
            if j not in have:
                raise typer.BadParameter(f"judge {j!r} is not in {run.name} (judges: {have})")
    return [
        (
            Side(
                before.name, a, before.result["judges"][a], before.result.get("settings") or {}, before.table
            ),
            Side(after.name, b, after.result["judges"][b], after.result.get("settings") or {}, after.table),
        )
        for a, b in names
    ]


def run_compare(
    before: Loaded,
    after: Loaded,
    *,
    judge: str | None = None,
    judge_b: str | None = None,
    reps: int,
    seed: int,
    figures: list[str] | None = None,
) -> dict[str, Any]:
    from judgebias.reporting.run_compare import compare

    try:
        return compare(judge_pairs(before, after, judge, judge_b), reps=reps, seed=seed, only=figures or None)
    except ValueError as exc:
        if isinstance(exc, typer.BadParameter):
            raise
        raise typer.BadParameter(str(exc)) from None


def compare_cmd(
    before: str = typer.Argument(
        ...,
        metavar="A",
        help="The earlier run: metrics JSON, run folder, judgment table, bundled:NAME or MLflow run id.",
    ),
    after: str = typer.Argument(..., metavar="B", help="The later run, named the same ways."),
    judge: str = typer.Option(
        None,
        "--judge",
        help="The judge to compare (in A; in B too unless --judge-b). Default: every judge both runs have.",
    ),
    judge_b: str = typer.Option(None, "--judge-b", help="The judge's name in B, when it differs."),
    table_a: Path = typer.Option(
        None,
        "--table-a",
        help="A's judgment table, when A is a metrics JSON: "
        "the differences are then paired where both judged the same pairs.",
    ),
    table_b: Path = typer.Option(None, "--table-b", help="B's judgment table (as --table-a)."),
    figure: list[str] = typer.Option(
        None, "--figure", help="Compare only this registry figure (repeatable)."
    ),
    out: Path = typer.Option(
        Path("compare.json"),
        "--out",
        "-o",
        help="Where to write the comparison JSON; the page goes beside it (.html).",
    ),
    reps: int = typer.Option(
        1000, help="Cluster-bootstrap resamples of the shared prompts (paired differences)."
    ),
    seed: BootstrapSeed = 0,
    mlflow: bool = typer.Option(
        True, "--mlflow/--no-mlflow", help="When A and B are MLflow runs: tag B with what changed and link A."
    ),
    exit_code: bool = typer.Option(
        False, "--exit-code", help="Exit 1 when some figure changed (Holm-adjusted), 0 otherwise."
    ),
) -> None:
    """What changed between two runs of a judge: every figure both share, the difference with its 95%
    interval (paired over the same pairs where the judgment tables are at hand, else independent),
    tests adjusted across figures (Holm), as statements, JSON and an HTML page."""
    from judgebias.display import terminal_safe
    from judgebias.reporting.run_compare_page import render_html, text_lines
    from judgebias.runs.store import atomic_write_text

    with tempfile.TemporaryDirectory() as tmp:
        a = load_run(before, Path(tmp), table=table_a, seed=seed)
        b = load_run(after, Path(tmp), table=table_b, seed=seed)
        result = run_compare(a, b, judge=judge, judge_b=judge_b, reps=reps, seed=seed, figures=figure)
    atomic_write_text(out, json.dumps(result, indent=2, allow_nan=False) + "\n")
    page = out.with_suffix(".html")
    atomic_write_text(
        page,
        render_html(
            result,
            title=f"Run comparison: {before} -> {after}",
            provenance=[f"before: {before}", f"after: {after}", f"judgebias compare {before} {after}"],
        ),
    )
    typer.echo(terminal_safe("\n".join(text_lines(result)), keep="\n"))
    typer.echo(f"wrote {out} and {page}")
    if mlflow and a.mlflow_run and b.mlflow_run:
        from judgebias.tracking.compare_run import tag_later_run

        tags = tag_later_run(b.mlflow_run, a.mlflow_run, result, [page])
        typer.echo(f"tagged MLflow run {b.mlflow_run}: {len(tags)} tags, linked to {a.mlflow_run}")
    if exit_code and result["changed"]:
        raise typer.Exit(1)


def gate_cmd(
    metrics: str = typer.Argument(
        ...,
        metavar="METRICS",
        help="The run to gate: metrics JSON, run folder, judgment table, bundled:NAME or MLflow run id.",
    ),
    rule: list[str] = typer.Option(
        None,
        "--rule",
        help="A rule (repeatable): 'agreement_human.ci_low >= 0.7', "
        "'position_consistency >= 0.8', 'no caution on verbosity_bias', "
        "'no change since RUN'.",
    ),
    rules: Path = typer.Option(None, "--rules", help="A YAML file: a list of rules, or one under 'rules:'."),
    judge: list[str] = typer.Option(None, "--judge", help="Gate only this judge (repeatable; default: all)."),
    on_inconclusive: str = typer.Option(
        "fail",
        "--on-inconclusive",
        metavar="pass|fail",
        help="A bound on a point estimate whose 95% interval straddles it.",
    ),
    reps: int = typer.Option(1000, help="Bootstrap resamples of a 'no change since RUN' comparison."),
    seed: BootstrapSeed = 0,
) -> None:
    """CI gate: exit 0 when every rule holds for every judge, 1 with one line per broken rule naming the
    figure, its value and interval. Rules name the figure registry's figures (docs/watch.md)."""
    from judgebias.display import terminal_safe
    from judgebias.reporting.gate import (
        ON_INCONCLUSIVE,
        broken,
        evaluate,
        parse_rule,
        report_line,
        rules_from_yaml,
    )

    if on_inconclusive not in ON_INCONCLUSIVE:
        raise typer.BadParameter("pass or fail", param_hint="--on-inconclusive")
    try:
        parsed = [parse_rule(r) for r in rule or []]
        if rules is not None:
            parsed += rules_from_yaml(rules.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--rule/--rules") from None
    if not parsed:
        raise typer.BadParameter("give at least one --rule or a --rules file", param_hint="--rule")
    with tempfile.TemporaryDirectory() as tmp:
        run = load_run(metrics, Path(tmp), seed=seed)
        comparisons = {}
        for r in parsed:
            if r.kind == "change" and r.run not in comparisons:
                earlier = load_run(r.run, Path(tmp), seed=seed)
                names = judge or [
                    j for j in run.result.get("judges") or {} if j in (earlier.result.get("judges") or {})
                ]
                comparisons[r.run] = (
                    run_compare(earlier, run, reps=reps, seed=seed)
                    if not names
                    else _per_judge(earlier, run, names, reps, seed)
                )
    try:
        verdicts = evaluate(
            parsed, run.result, judges=judge or None, on_inconclusive=on_inconclusive, comparisons=comparisons
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    bad = broken(verdicts, on_inconclusive)
    for v in verdicts:
        if v in bad or v.status != "pass":
            typer.echo(terminal_safe(report_line(v)))
    typer.echo(
        f"gate: {len(verdicts) - len(bad)} of {len(verdicts)} rule checks pass "
        f"({len(parsed)} rule(s) x {len(verdicts) // len(parsed)} judge(s))"
    )
    if bad:
        raise typer.Exit(1)


def _per_judge(earlier: Loaded, run: Loaded, names: list[str], reps: int, seed: int) -> dict[str, Any]:
    from judgebias.reporting.run_compare import compare

    sides = [p for j in names for p in judge_pairs(earlier, run, j, j)]
    return compare(sides, reps=reps, seed=seed)


def judges_cmd(
    experiment: str = typer.Option(
        None, "--experiment", help="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME or judgebias's)."
    ),
    out: Path = typer.Option(
        Path("judges.html"), "--out", "-o", help="The page; the rows go beside it (.json)."
    ),
    log: bool = typer.Option(
        True,
        "--log/--no-log",
        help="Also log the table and page to MLflow, in a run 'judges across runs' of the experiment.",
    ),
) -> None:
    """Every judge seen in an MLflow experiment, one row per run and judge: agreement and kappa against
    humans with the confusion matrix, the main bias figures, the dataset digest (AlpacaEval's
    evaluator table across runs)."""
    from judgebias.display import terminal_safe
    from judgebias.reporting.judges_table import judge_rows, render_html
    from judgebias.runs.store import atomic_write_text
    from judgebias.tracking.judges_across_runs import collect, log_judges_table

    try:
        runs = collect(experiment)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--experiment") from None
    rows = judge_rows(runs)
    atomic_write_text(out.with_suffix(".json"), json.dumps(rows, indent=2, allow_nan=False) + "\n")
    atomic_write_text(
        out,
        render_html(
            rows,
            title="Judges across runs",
            provenance=[f"{len(runs)} run(s) with figures in MLflow experiment {experiment or '(default)'}"],
        ),
    )
    for r in rows:
        agree = r.get("agreement_human.value")
        typer.echo(
            terminal_safe(
                f"{r['judge']:<28} {r['run_name'][:24]:<24} {r['dataset']:<32} agreement "
                f"{'n/a' if agree is None else f'{agree:.3f}'}"
            )
        )
    typer.echo(f"wrote {out} and {out.with_suffix('.json')}: {len(rows)} row(s) from {len(runs)} run(s)")
    if log:
        run_id = log_judges_table(rows, out, experiment=experiment)
        typer.echo(f"logged to MLflow run {run_id}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
    app.command("gate")(gate_cmd)
    app.command("judges")(judges_cmd)
