"""The ``judgebias`` command line. Each command group lives in its own module and registers itself;
commands import heavy dependencies (torch, prefect, mlflow) lazily so ``--help`` stays fast."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="judgebias",
    help="Measure, explain and reduce the biases of LLM-as-a-judge evaluators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Measure, explain and reduce the biases of LLM-as-a-judge evaluators."""
    # A callback keeps typer in group mode even while only one command module is present.


# Modules that define ``register(app)``; a module not written yet is simply absent.
_COMMAND_MODULES = ("importers", "analyze", "judge", "pipeline", "annotate", "bench")


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
    ("judgebias.table", "TableError"),
    ("judgebias.config", "ConfigError"),
    ("judgebias.models", "ModelNotFound"),
    ("judgebias.backends.openai_compat", "ServiceUnavailable"),
    ("judgebias.backends.openai_compat", "EndpointError"),
    ("annotation.labelstudio", "LabelStudioError"),
}


def _is_user_error(exc: BaseException) -> bool:
    return any((cls.__module__, cls.__name__) in _USER_ERRORS for cls in type(exc).__mro__)


def main() -> None:
    try:
        app()
    except Exception as exc:
        if not _is_user_error(exc):
            raise
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
