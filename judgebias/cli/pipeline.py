"""``judgebias run | demo | serve``: the experiment pipeline (Prefect flows tracked in MLflow)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer


def _prepare_env(verbose: bool = False) -> None:
    # Must happen before prefect is imported anywhere (it reads PREFECT_HOME and its logging
    # settings at import).
    from judgebias.flows.runtime.environment import CONSOLE_LEVEL_VAR, prepare

    if verbose:
        os.environ[CONSOLE_LEVEL_VAR] = "INFO"
    prepare(Path.cwd())


def _print_stage_lines() -> None:
    """Each stage's line (``judgebias.tasks.stage_lines``) on stdout, in order with the plan and the
    summary."""
    import logging

    from judgebias.display import terminal_safe
    from judgebias.tasks.stage_lines import LOGGER

    class _Safe(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return "  " + terminal_safe(record.getMessage())  # stage names come from the config

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_Safe())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def _peak_rss_gb() -> float:
    import resource

    # ru_maxrss is in KiB on Linux; children covers nothing here (models load in-process).
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(self_kb, child_kb) / 1024 / 1024


def _load_or_exit(config_path: Path, overrides: dict | None):
    from judgebias.config.experiment import ConfigError, load_config

    try:
        return load_config(config_path, overrides)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


# Options shared by `run` and `demo`.
NoAblations = Annotated[bool, typer.Option("--no-ablations", help="skip the style and fine-tune ablations")]
Threads = Annotated[int | None, typer.Option(
    "--threads", min=1, envvar="JUDGEBIAS_TORCH_THREADS",
    help="torch threads for the models (env JUDGEBIAS_TORCH_THREADS; default: torch's own). On a "
         "machine busy with other work, 1 thread was measured 3-7x faster than 2.")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", help="also print Prefect's own log lines (each task's state and progress, flow runs); "
    "same as PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=INFO. Without it the console shows one line per "
    "stage and Prefect's warnings.")]
Dtype = Annotated[str | None, typer.Option(
    "--dtype", help="dtype of every local model (auto, float32, bfloat16, float16); bfloat16 runs "
    "~2-4x faster on a CPU with AVX512-BF16/AMX at up to ~0.03 in P(A) (docs/benchmarks.md). Part "
    "of the config hash: its own run folder.")]


def _run(config_path: Path, overrides: dict | None, threads: int | None = None, *,
         imported: bool = False, verbose: bool = False) -> None:
    cfg = _load_or_exit(config_path, overrides)
    from judgebias.stages.data import check_sample

    try:
        check_sample(cfg)
    except ValueError as exc:  # said before Prefect starts, not from inside a failed flow
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    # MLflow: the config's tracking_uri, else MLFLOW_TRACKING_URI, else ./mlflow.db
    # (judgebias.tracking.settings). A server that does not answer is said now (one HTTP probe, a
    # short timeout), before Prefect's server guard, torch and the stages are imported: asked after
    # them, a down server took 27-30 s to say so instead of 4-5 s (2 cores at load 6).
    from judgebias.tracking.settings import settings_for

    settings_for(cfg).check_reachable()
    _prepare_env(verbose)
    _print_stage_lines()
    from judgebias.cli import full_disk

    full_disk.keep(f"the stages already finished are kept in {cfg.run_path()}")
    from judgebias.backends.loading import prefetch
    from judgebias.display import terminal_safe
    from judgebias.reporting.experiment_summary import console_report, plan

    start = time.perf_counter()
    typer.echo(f"experiment {cfg.name!r}: run folder {cfg.run_path()} (config hash {cfg.config_hash()})")
    typer.echo(plan(cfg))
    # A SIGKILLed run must not leave Prefect's temporary server behind, nor a dead server the run.
    full_disk.end_when_prefect_server_is_lost()
    if threads:
        import torch

        torch.set_num_threads(threads)
    prefetch(cfg.local_models())  # cold models convert in a child process while Prefect starts
    typer.echo("stages, as each ends (ran, or reused from the run folder):")
    from judgebias.flows.experiment import experiment
    from judgebias.runs.store import RunStore

    if not verbose:  # --verbose asked for Prefect's own lines, tracebacks included
        full_disk.hide_prefect_reports()

    from judgebias.backends.builder import freeze_before_first_model
    from judgebias.runs import interrupts

    freeze_before_first_model()
    with interrupts.stop_at_once_remembered():
        result = experiment(str(config_path), overrides, cfg=cfg)
    wall = time.perf_counter() - start
    store = RunStore(cfg.run_path())
    typer.echo(terminal_safe(console_report(cfg, store, result, wall_s=wall, peak_rss_gb=_peak_rss_gb()),
                             keep="\n"))
    if imported:
        _imported_reports(cfg, store)
    from judgebias.stages.results import refresh_report

    refresh_report(cfg, store)  # the page again, now with links to the MLflow run and imported pages


def _imported_reports(cfg, store) -> None:
    """The bundled real judgments' report cards: findings the demo's tiny models cannot give."""
    from judgebias.display import terminal_safe
    from judgebias.flows.imported import imported_report_cards
    from judgebias.reporting.experiment_summary import imported_lines
    from judgebias.tracking.settings import settings_for

    out = imported_report_cards(str(store.root), settings_for(cfg))
    typer.echo(terminal_safe("\n".join(imported_lines(store, out["reports"], out["runs"])), keep="\n"))


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        config: Path = typer.Argument(..., exists=True, dir_okay=False, help="experiment config (YAML)"),
        sample: int | None = typer.Option(None, "--sample", min=1, help="override dataset.sample"),
        no_ablations: NoAblations = False,
        threads: Threads = None,
        dtype: Dtype = None,
        verbose: Verbose = False,
    ) -> None:
        """Run one experiment: generate, judge both orders, gold, metrics, perplexity/attention,
        ablations; every stage resumable, tracked in MLflow. See docs/pipeline.md."""
        _run(config, _overrides(sample, no_ablations, dtype), threads, verbose=verbose)

    @app.command("demo")
    def demo_cmd(
        sample: int | None = typer.Option(
            None, "--sample", min=2, help="number of instructions (default: the bundled config's)"
        ),
        no_ablations: NoAblations = False,
        threads: Threads = None,
        dtype: Dtype = None,
        verbose: Verbose = False,
    ) -> None:
        """Run the bundled experiment offline on two packaged small models (SmolLM2-135M-Instruct and
        gemma-3-270m) over MT-bench instructions: Prefect in ephemeral mode, MLflow in ./mlflow.db.
        Then the report cards of real judges on bundled real data (PandaLM, LLMBar), marked imported.
        A few minutes cold on 2 CPU cores (README has the current measured time), seconds again (every
        stage is in the run folder)."""
        from judgebias.config.experiment import demo_config_path

        _run(demo_config_path(), _overrides(sample, no_ablations, dtype or _demo_dtype()), threads,
             imported=True, verbose=verbose)

    @app.command("serve")
    def serve_cmd(
        config: Path = typer.Argument(None, dir_okay=False, help="experiment config (default: the demo's)"),
        sync_cron: str = typer.Option("0 2 * * *", help="cron of the annotation sync + metric recompute"),
        experiment_cron: str = typer.Option("0 3 * * 0", help="cron of the full experiment"),
        timezone: str = typer.Option("UTC", help="time zone of the cron schedules"),
        watch: list[Path] = typer.Option(
            None, "--watch", dir_okay=False,
            help="a watch config (docs/watch.md): also register its watched judge on its own cron; "
                 "repeatable"),
        watch_only: bool = typer.Option(False, "--watch-only", help="register only the --watch deployments"),
    ) -> None:
        """Register scheduled deployments (nightly annotation sync, weekly experiment, and each
        --watch config's watched judge) with the Prefect API in PREFECT_API_URL and run them from
        this process until stopped (Ctrl-C)."""
        from judgebias.config.experiment import demo_config_path

        if watch_only and not watch:
            raise typer.BadParameter("--watch-only needs at least one --watch CONFIG")
        # Absolute, but the path the user gave: a deployment of configs/demo.yaml (a link) names that.
        path = None if watch_only else Path(os.path.abspath(config or demo_config_path()))
        if path is not None:
            _load_or_exit(path, None)
        watches = tuple(os.path.abspath(w) for w in watch or ())
        _prepare_env()
        from judgebias.flows.serve import Schedule, serve

        if "PREFECT_API_URL" not in os.environ:
            typer.echo(
                "note: PREFECT_API_URL is not set; scheduled runs need a Prefect server "
                "(prefect server start), see docs/pipeline.md",
                err=True,
            )
        try:
            serve(
                str(path) if path else None,
                Schedule(sync_cron=sync_cron, experiment_cron=experiment_cron, timezone=timezone),
                watches=watches,
            )
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None


def _demo_dtype() -> str | None:
    """bf16 for the demo where the CPU computes it natively (measured 2-3x faster than fp32 on 2 cores
    with AMX or AVX512-BF16), with its cost against float32 measured in the run and printed; fp32
    elsewhere."""
    from judgebias.backends.loading import native_bf16_units

    units = native_bf16_units()
    if not units:
        return None
    typer.echo(f"dtype: bfloat16, as this CPU computes it natively ({', '.join(units)}): 2-3x faster "
               "than float32; its cost in P(A) is measured on a few pairs and printed at the end "
               "(--dtype float32 for the exact reference)")
    return "bfloat16"


def _overrides(sample: int | None, no_ablations: bool, dtype: str | None = None) -> dict | None:
    from judgebias.backends.kinds import DTYPES
    from judgebias.config.overrides import LOCAL_DTYPE

    out: dict = {}
    if sample is not None:
        out["dataset"] = {"sample": sample}
    if no_ablations:
        out["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    if dtype is not None:
        if dtype not in DTYPES:
            raise typer.BadParameter(f"unknown --dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        out[LOCAL_DTYPE] = dtype
        _warn_slow_bf16(dtype)
    return out or None


def _warn_slow_bf16(dtype: str) -> None:
    if dtype != "bfloat16":
        return
    from judgebias.backends.loading import default_device, native_bf16_units, slow_bf16_warning

    warning = slow_bf16_warning(dtype, default_device(), native_bf16_units())
    if warning:
        typer.echo(warning, err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the 'judgebias' command")
