"""Options and option checks more than one command shares: the ``--self``/``--family`` maps, the
margins, the multiplicity method and the MLflow server that must answer before any work is done."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

# analyze --traces left unset: every row becomes an MLflow trace only for tables this small.
TRACES_AUTO_ROWS = 50

# Options several commands declare. One the commands describe alike is one Annotated alias; one each
# command describes for itself (what its figures do with it) keeps the command's help, and the
# spelling it shares (name, metavar, default, the check of its value) is one function here.
SkipInvalid = Annotated[bool, typer.Option(
    "--skip-invalid", help="Exclude invalid rows (counted by reason) instead of failing.")]
BootstrapSeed = Annotated[int, typer.Option("--seed", help="Bootstrap seed.")]


def origin_option(option: str, help: str) -> Any:
    """``--self``/``--family JUDGE=GENERATOR`` (repeatable; comma lists): read by ``origin_map``."""
    return typer.Option(None, option, metavar="JUDGE=GENERATOR", help=help)


def cluster_by_option(help: str) -> Any:
    """``--cluster-by COLUMN|none``: the rows sharing a value of COLUMN are one cluster (default: the
    prompt; none: every row its own)."""
    return typer.Option(None, "--cluster-by", metavar="COLUMN|none", help=help)


def margin_option(help: str) -> Any:
    """``--margin FIGURE=VALUE`` (repeatable): read by ``margin_overrides`` or the command's own
    margins."""
    return typer.Option(None, "--margin", metavar="FIGURE=VALUE", help=help)


def _multiplicity_method(value: str | None) -> str | None:
    from judgebias.multiplicity import check_method

    try:
        return None if value is None else check_method(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--multiplicity") from None


def multiplicity_option(default: str | None, help: str) -> Any:
    """``--multiplicity holm|bh``, given to the command as ``check_method`` spells it (aliases such
    as fdr read as bh); another value is a usage error before any work."""
    return typer.Option(default, "--multiplicity", metavar="holm|bh", callback=_multiplicity_method,
                        help=help)


def fail(message: str, code: int = 1) -> None:
    """A message in red on stderr and the exit code: a failure the user can act on, no traceback."""
    typer.secho(message, fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def out_folder(out: Path, option: str = "--out") -> Path:
    """``out`` as a folder to write into: a usage error naming it when a file is there already."""
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file; {option} names a folder (its files are written "
                                 "inside it)", param_hint=option)
    return out


def origin_map(items: list[str] | None, hint: str = "--self") -> dict[str, tuple[str, ...]]:
    """``--self J=G1,G2`` / ``--family J=G1,G2`` as the metrics' map; a malformed entry is a usage
    error naming the option."""
    from judgebias.metrics.origin import parse_self_map

    try:
        return parse_self_map(items or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


def margin_overrides(items: list[str] | None, *, pairwise_only: bool = False,
                     pointwise_only: bool = False) -> dict[str, float]:
    """``--margin FIGURE=VALUE`` options as {figure: value}, checked against the declared margins
    (the registry's and the probes' unless ``pointwise_only``, the pointwise figures' unless
    ``pairwise_only``); a bad one is the option's error, naming the item."""
    from judgebias.metrics.margins import POINTWISE_MARGINS, parse_overrides
    from judgebias.metrics.registry import margins

    known = ([] if pointwise_only else list(margins())) + ([] if pairwise_only else list(POINTWISE_MARGINS))
    try:
        return parse_overrides(items or [], known)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--margin") from None


def require_tracking(mlflow: bool) -> None:
    """With ``--mlflow``, a tracking server that does not answer is said before the work, not
    minutes after (``TrackingSettings.check_reachable``)."""
    if mlflow:
        from judgebias.tracking.settings import TrackingSettings

        TrackingSettings().check_reachable()


@contextlib.contextmanager
def input_errors(file: Path) -> Iterator[None]:
    """A table that cannot be read (``TableError``) or figures its rows cannot give (``ValueError``,
    naming ``file``) as one line on stderr and exit code 2, never a traceback."""
    from judgebias.display import terminal_safe
    from judgebias.tables.pairwise import TableError

    try:
        yield
    except TableError as exc:
        typer.echo(terminal_safe(f"error: {exc}"), err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:
        typer.echo(terminal_safe(f"error: {file}: {exc}"), err=True)
        raise typer.Exit(2) from None


def echo_mlflow_run(run_id: str, uri: str, counts: dict, logged: dict | None, where: str) -> None:
    """What an analyze-like command logged to MLflow: the run, its counts and, when rows were logged
    as traces, how many (``where``: how to find them)."""
    from judgebias.redaction import redact_uri

    typer.echo(f"MLflow: run {run_id} at {redact_uri(uri)} ({counts['metrics']} metrics, "
               f"{counts['figures']} plots)")
    if logged is not None:
        typer.echo(f"MLflow traces: {logged['logged']} logged, {logged['skipped']} already there"
                   + (f", {logged['missing']} NOT found after logging" if logged["missing"] else "")
                   + f" ({where})")
