"""Help as a user reads it at 80 columns (issue 34, item 12): no `<bool>` beside a flag, no stray word
left on a line of its own where a docstring's line break met the terminal's wrap, and `annotate`
says it draws a probability sample."""

from __future__ import annotations

import itertools

import typer
from typer.testing import CliRunner

from judgebias.cli import app

WIDTH = 80


def _every_command() -> list[list[str]]:
    def walk(cmd, path: list[str]):
        yield path
        # A group (typer vendors its own click, so no isinstance check against click.Group).
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def _description(text: str) -> list[list[str]]:
    """The paragraphs between the usage line and the first section (Arguments:, Options:, ...)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.strip().rstrip(":") in {"Arguments", "Options", "Commands"}:
            break
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def test_help_is_reflowed_and_has_no_bool_placeholders():
    runner = CliRunner()
    commands = _every_command()
    assert len(commands) > 15  # the root, its commands and annotate's
    for path in commands:
        out = runner.invoke(app, [*path, "--help"], terminal_width=WIDTH).output
        where = " ".join(["judgebias", *path])
        assert "<bool>" not in out, where
        assert max(len(line) for line in out.splitlines()) <= WIDTH, where
        for paragraph in _description(out):
            # A line is ended too early when the next line's first word would have fitted on it
            # (click fills 78 columns at 80): a hard line break in the source met the terminal's wrap.
            early = [line for line, after in itertools.pairwise(paragraph)
                     if len(line) + 1 + len(after.split()[0]) <= WIDTH - 2]
            assert not early, f"{where}: {early}"


def test_annotate_says_it_draws_a_probability_sample():
    out = CliRunner().invoke(app, ["annotate", "--help"], terminal_width=WIDTH).output
    assert "probability sample" in " ".join(out.split())
    assert "most informative" not in out


def test_root_help_says_where_to_start_and_uses_a_wide_terminal():
    """The root help cut every summary at ~60 characters whatever the width, and did not say where to
    start."""
    import os
    import subprocess
    import sys

    wide = subprocess.run([sys.executable, "-m", "judgebias", "--help"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "140"})
    assert wide.returncode == 0
    assert "Start with `judgebias demo`" in " ".join(wide.stdout.split())
    analyze = next(line for line in wide.stdout.splitlines() if line.strip().startswith("analyze "))
    assert analyze.rstrip().endswith("with 95% intervals.")  # the whole first sentence, not "95%..."
