"""The ``judgebias`` command line. Each command group lives in its own module and registers itself;
commands import heavy dependencies (torch, prefect, mlflow) lazily so ``--help`` stays fast."""

from __future__ import annotations

import importlib
import os
import signal
import sys

import typer

from judgebias.cli.progress import end_line

app = typer.Typer(
    name="judgebias",
    help="Measure, explain and reduce the biases of LLM-as-a-judge evaluators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's own help layout (every subcommand inherits it): it re-flows each paragraph to the terminal,
    # where typer's rich layout kept the docstrings' line breaks (a wrapped line left one stray word
    # on a line of its own) and printed <bool> beside every flag.
    rich_markup_mode=None,
    # Click wraps help at 80 columns whatever the terminal: each command's summary was cut at ~60
    # characters. Up to 120 where the terminal is that wide (COLUMNS); 80 stays the floor.
    context_settings={"max_content_width": 120},
    epilog="New here? Start with `judgebias demo`: a whole experiment offline (README gives its time on "
           "2 cores), ending with the report cards of real judges on bundled data. Every command has --help.",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"judgebias {version('judgebias')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("judgebias (not installed: no version recorded)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the installed version and exit."),
) -> None:
    """Measure, explain and reduce the biases of LLM-as-a-judge evaluators."""
    # A callback keeps typer in group mode even while only one command module is present.


# Modules that define ``register(app)``; a module not written yet is simply absent.
_COMMAND_MODULES = ("importers", "analyze", "report", "judge", "pipeline", "annotate", "human_loop", "bench",
                    "coverage", "leaderboard", "watch", "watch_judge")


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"judgebias.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"judgebias.cli.{name}":
                continue
            raise
        module.register(app)


_register_all()


# Errors that say what is wrong with the user's input or a service, in words: printed as one line
# (exit code 2) rather than as a traceback. Named by module and class so the CLI's start-up does
# not import torch, openai or the Label Studio SDK to recognize them.
_USER_ERRORS = {
    ("judgebias.tables.pairwise", "TableError"),
    ("judgebias.config.experiment", "ConfigError"),
    ("judgebias.backends.loading", "ModelNotFound"),
    ("judgebias.backends.openai_compat", "ServiceUnavailable"),
    ("judgebias.backends.openai_compat", "EndpointError"),
    ("judgebias.backends.vllm_backend", "VLLMNotInstalled"),
    ("judgebias.backends.vllm_backend", "VLLMWorkerFailed"),
    ("judgebias.annotation.labelstudio", "LabelStudioError"),
    ("judgebias.tracking.settings", "TrackingUnavailable"),
}


def _is_user_error(exc: BaseException) -> bool:
    return any((cls.__module__, cls.__name__) in _USER_ERRORS for cls in type(exc).__mro__)


# Prefect turns SIGTERM into this (a BaseException) in the main thread while a flow runs.
_STOP_SIGNALS = {("builtins", "KeyboardInterrupt"): 130, ("prefect.exceptions", "TerminationSignal"): 143}


def _stop_code(exc: BaseException) -> int | None:
    for cls in type(exc).__mro__:
        code = _STOP_SIGNALS.get((cls.__module__, cls.__name__))
        if code is not None:
            return code
    return None


def _stop_now(code: int) -> None:
    """Leave now, without joining worker threads.

    By the time a stop reaches here Prefect has let the running task finish and marked the runs
    Crashed; what is finished is safe (call-cache rows commit per batch, run-store files are
    written atomically). A normal exit would still join leftover worker threads, and SIGTERM's
    default action would skip the exit handlers that stop Prefect's temporary server, leaving it
    running. So the exit handlers run, then the process exits."""
    import atexit

    end_line()
    typer.echo("stopped: finished model calls and stages are kept; run the same command to resume",
               err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(code)


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` ends a chain that began with Ctrl-C (typer turns it into a silent exit 130)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _on_sigterm(signum, frame) -> None:
    _stop_now(143)


def main() -> None:
    import atexit
    import gc

    # Every object moved out of the collector's reach as the interpreter ends: a command that loaded
    # torch, Prefect and MLflow holds some 450,000, and the teardown collected over all of them after
    # the last line (a `judgebias run` whose stages were all in its run folder: 13.7 s, 12.0 s frozen,
    # docs/benchmarks.md). They are still released by reference counting; only garbage cycles among
    # them go uncollected, memory the process hands back as it exits (files and databases are closed
    # by the code that opened them, never left to the collector). Registered before the command runs,
    # so run after the exit handlers Prefect and MLflow register as it runs; once per process.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    # While a flow runs, Prefect's SIGTERM handler replaces this one: it lets the running task
    # finish, marks the runs Crashed, then re-sends SIGTERM to the handler it replaced (this one).
    signal.signal(signal.SIGTERM, _on_sigterm)
    from judgebias.cli import full_disk

    full_disk.keep(None)  # what a previous command run in this process kept is not this one's
    try:
        app()
    except Exception as exc:
        end_line()  # the error's line (or traceback) starts on its own line, not after a counter
        if _interrupted(exc):
            # Ctrl-C that a library's own clean-up turned into an error (Prefect's task engine, hit
            # before its task run existed, raised "Task run is not set" while handling it: exit 1
            # and a traceback in 1 of the fresh-clone suites): still the user's stop
            _stop_now(130)
        if _is_user_error(exc):
            typer.echo(f"error: {exc}", err=True)
            raise SystemExit(2) from None
        said = full_disk.line(exc)  # a full disk, however deep in the chain (Prefect re-raises it)
        if said is None:
            raise
        typer.echo(said, err=True)
        raise SystemExit(full_disk.EXIT_CODE) from None
    except SystemExit as exc:
        if exc.code == 130 and _interrupted(exc):
            _stop_now(130)
        raise
    except BaseException as exc:
        end_line()
        code = _stop_code(exc)
        if code is None:
            raise
        _stop_now(code)
