"""A command that fills the disk, or loses Prefect's temporary server, ends in one line, not in
Prefect's tracebacks (or a hang): what happened, what is kept, and the command that resumes (the
same one: finished stages are read back from the run folder, finished model calls from the call
cache)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

# sysexits.h EX_IOERR ("an error occurred while doing I/O on some file"): apart from 1 (a bug's
# traceback), 2 (bad input, a service down) and 130/143 (stopped by a signal).
EXIT_CODE = 74

_KEPT: list[str] = []


def keep(what: str | None) -> None:
    """Say, should the disk fill during this command, what it leaves for the rerun to reuse
    (e.g. "the stages already finished are kept in <run folder>"); None: nothing (the default)."""
    _KEPT[:] = [what] if what else []


def resume_command(argv: list[str] | None = None) -> str:
    """The command this process runs, as the user can paste it again: ``judgebias ARGS`` when that
    is the ``judgebias`` on PATH, the script's path when it is not (the quick start installs into
    ``.venv`` without activating it), ``python -m judgebias`` for a module run."""
    argv = list(sys.argv if argv is None else argv)
    prog = argv[0] if argv else "judgebias"
    on_path = shutil.which("judgebias")
    if Path(prog).name == "__main__.py":
        head = f"{shlex.quote(sys.executable)} -m judgebias"
    elif on_path and os.path.exists(prog) and os.path.samefile(on_path, prog):
        head = "judgebias"
    else:
        head = shlex.quote(prog)
    return " ".join([head, *map(shlex.quote, argv[1:])])


def line(exc: BaseException) -> str | None:
    """The one line that says a full disk ended the command (None: the disk is not the cause)."""
    from judgebias.display import terminal_safe
    from judgebias.runs.diskfull import find

    full = find(exc)
    if full is None:
        return None
    parts = [f"error: disk full ({full.reason})" + (f" while writing {full.path}" if full.path else "")]
    parts += _KEPT
    then = "to resume" if _KEPT else "again"
    text = "; ".join(parts) + f". Free some space, then run the same command {then}: {resume_command()}"
    return terminal_safe(text)  # paths and arguments are the user's: no terminal escapes


def end_when_prefect_server_is_lost() -> None:
    """Run Prefect's temporary server under its guard; should the server end while this command
    runs, end the command at once (exit 2, a service down) with one line instead of hanging on the
    dead API."""
    from judgebias.display import terminal_safe
    from judgebias.flows.runtime.server_guard import end_this_process, guard_temporary_server

    def lost(code: int) -> None:
        parts = [f"error: Prefect's temporary server ended (exit code {code}) while the command ran"]
        parts += _KEPT
        then = "to resume" if _KEPT else "again"
        end_this_process(terminal_safe("; ".join(parts) + f". Run the same command {then}: "
                                       f"{resume_command()}"), 2)

    guard_temporary_server(lost)


def hide_prefect_reports() -> None:
    """Prefect's console drops its own reports of a full disk (each failed task's and flow's
    traceback, some 500 lines for one write): the command's last line says it once. Their copies
    still go to the Prefect API. Call after prefect is imported (it sets up logging then)."""
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    from judgebias.runs.diskfull import HideDiskFull

    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
                isinstance(f, HideDiskFull) for f in handler.filters):
            handler.addFilter(HideDiskFull("prefect"))
