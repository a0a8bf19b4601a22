"""``judgebias coverage``: the command around ``judgebias.coverage`` (what it measures is there)."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Annotated

import typer

# Each cell keeps three floats per replication and figure: a million replications is ~100 MB, a
# trillion asked 36 TiB of numpy and died in a traceback.
MAX_REPS = 1_000_000


def register(app: typer.Typer) -> None:
    @app.command("coverage")
    def coverage_cmd(
        reps: Annotated[int | None, typer.Option(
            min=1, max=MAX_REPS, help="Replications per (figure, n) [default: 1000; with --nested 200 per "
            "(figure, clusters, rows, ICC)].")] = None,
        n: Annotated[str, typer.Option("--n", help="Comma list of table sizes (units; expected labels "
                                       "for the human loop).")] = "10,25,50,100,200,400,1000",
        family: Annotated[list[str] | None, typer.Option("--family", "-f", help="Only this figure family "
                                                         "(repeatable; default: all).")] = None,
        seed: Annotated[int, typer.Option(help="Seed of every cell's random stream.")] = 0,
        workers: Annotated[int, typer.Option(min=1, help="Worker processes, at most one per usable core "
                                             "(a larger number is capped, and the run says so).")] = 2,
        out: Annotated[Path, typer.Option(help="Folder for coverage.csv, coverage.md and coverage.png.")
                       ] = Path("benchmarks/results/coverage"),
        mlflow: Annotated[bool, typer.Option("--mlflow/--no-mlflow", help="Also log the run to MLflow.")
                          ] = False,
        list_only: Annotated[bool, typer.Option("--list", help="List the families and figures, then stop.")
                             ] = False,
        nested: Annotated[bool, typer.Option("--nested", help="Nested tables instead: units in clusters "
                                             "(prompts), coverage by number of clusters, ICC and rows per "
                                             "cluster, beside the independent method.")] = False,
        clusters: Annotated[str, typer.Option(help="With --nested: comma list of numbers of clusters.")
                            ] = "10,20,40,80",
        icc: Annotated[str, typer.Option(help="With --nested: comma list of intra-cluster correlations in "
                                         "[0, 1).")] = "0,0.2,0.5",
        rows: Annotated[str, typer.Option(help="With --nested: comma list of rows per cluster, K or LOW-HIGH "
                                          "(uniform).")] = "1-20",
    ) -> None:
        """Coverage, mean width and bias of every printed 95% interval on simulated tables whose
        true figures are known, computed by the product's own metric functions."""
        from judgebias.coverage import FAMILIES, OPT_IN
        from judgebias.coverage.report import markdown, write
        from judgebias.coverage.runner import run

        if nested and not list_only:
            _nested(family, reps, clusters, icc, rows, seed, workers, out)
            return
        reps = 1000 if reps is None else reps
        if list_only:
            for fam in (*FAMILIES, *OPT_IN):
                opt = f" [only with -f {fam.name}: slow]" if fam in OPT_IN else ""
                typer.echo(f"{fam.name}: {fam.description} ({fam.nuisance}){opt}")
                for fig in fam.figures:
                    typer.echo(f"  {fig.name:<36} {fig.method:<44} truth {fig.truth:+.4f}")
            return
        from judgebias.cli.options import out_folder

        out_folder(out)
        try:
            ns = [int(x) for x in n.split(",") if x.strip()]
        except ValueError:
            raise typer.BadParameter(f"--n must be a comma list of integers, got {n!r}") from None
        from judgebias.coverage.runner import worker_count

        start = time.perf_counter()
        try:
            summary = run(family or None, ns, reps=reps, seed=seed, workers=workers,
                          progress=lambda line: typer.echo(line, err=True))
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        wall = time.perf_counter() - start
        used = worker_count(workers, len(summary[["family", "n"]].drop_duplicates()))
        paths = write(summary, out)
        typer.echo(markdown(summary))
        typer.echo(f"wall time {wall:.1f} s with {used} worker(s); wrote " +
                   ", ".join(str(p) for p in paths.values()))
        if mlflow:
            from judgebias.tracking.coverage_run import log_coverage

            run_id = log_coverage(summary, out, {"reps": reps, "n": n, "families": family or "all",
                                                 "seed": seed, "workers": used, "wall_s": round(wall, 1),
                                                 "machine": platform.processor() or platform.machine()})
            typer.echo(f"MLflow run {run_id}")


def _nested(family: list[str] | None, reps: int | None, clusters: str, icc: str, rows: str, seed: int,
            workers: int, out: Path) -> None:
    from judgebias.coverage import nested as N
    from judgebias.coverage.report import nested_markdown, write_nested

    try:
        gs = [int(x) for x in clusters.split(",") if x.strip()]
        iccs = [float(x) for x in icc.split(",") if x.strip()]
        ranges = [N.parse_rows(x) for x in rows.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"--clusters, --icc, --rows: {exc}") from None
    reps = N.DEFAULT_REPS if reps is None else reps
    start = time.perf_counter()
    try:
        summary = N.run(family or None, gs, iccs, ranges, reps=reps, seed=seed, workers=workers,
                        progress=lambda line: typer.echo(line, err=True))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    wall = time.perf_counter() - start
    paths = write_nested(summary, out)
    typer.echo(nested_markdown(summary))
    typer.echo(f"wall time {wall:.1f} s with {workers} worker(s); wrote "
               + ", ".join(str(p) for p in paths.values()))
