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
        reps: Annotated[int, typer.Option(min=1, max=MAX_REPS, help="Replications per (figure, n).")] = 1000,
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
    ) -> None:
        """Coverage, mean width and bias of every printed 95% interval on simulated tables whose
        true figures are known, computed by the product's own metric functions."""
        from judgebias.coverage import FAMILIES, OPT_IN
        from judgebias.coverage.report import markdown, write
        from judgebias.coverage.runner import run

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
