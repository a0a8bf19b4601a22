"""A progress counter redraws its line in place (``\\r``, no newline): an error, a stop or a final line
printed while one is half-drawn starts on a line of its own, not after the counter."""

from __future__ import annotations

import errno
import sys
from types import SimpleNamespace

import pandas as pd
import pytest

from judgebias.cli import progress
from judgebias.exclusions import Exclusions
from judgebias.table import TableError


def test_end_line_ends_only_a_counter_left_open(capsys):
    report = progress.counter("items")
    report(1, 4)  # drawn (the first call is always more than 2 s after time 0), not finished
    progress.end_line()
    progress.end_line()  # already ended: nothing more
    assert capsys.readouterr().err.count("\n") == 1
    report = progress.counter("more")
    report(2, 2)  # a finished counter ends its own line
    progress.end_line()
    err = capsys.readouterr().err
    assert err.startswith("\rmore: 2/2 (") and err.count("\n") == 1


def _fake_judge(monkeypatch, tmp_path, fail: BaseException | None):
    """``judgebias judge`` with a backend that is never loaded: the judging draws 1 of 4, then
    raises ``fail`` (or returns the table unfinished: a counter that never reached its total)."""
    from judgebias.backends import builder
    from judgebias.cli import judge
    from judgebias.io import write_table

    table = pd.DataFrame([{"pair_id": "p1", "prompt": "q", "response_a": "x", "response_b": "y"}])
    src = write_table(table, tmp_path / "in.jsonl")
    runner = SimpleNamespace(cache=SimpleNamespace(enabled=False), hits=0, calls=0, name="fake")
    monkeypatch.setattr(builder, "build_backend", lambda spec: runner)
    monkeypatch.setattr(builder, "cached", lambda inner, spec, cache: runner)

    def judge_table(df, backend, template, **kwargs):
        judge._progress("judging 2 pairs x 2 orders")(1, 4)
        if fail is not None:
            raise fail
        return table.assign(judge="fake", p_a=0.5), Exclusions()

    monkeypatch.setattr(judge, "judge_table", judge_table)
    return ["judge", str(src), "--judge", "fake", "--out", str(tmp_path / "out.jsonl")]


def _main(monkeypatch, capsys, args) -> tuple[object, str]:
    from judgebias.cli import main

    monkeypatch.setattr(sys, "argv", ["judgebias", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    return stop.value.code, capsys.readouterr().err


def _counter_then(err: str, first: str) -> None:
    """The counter's line ended, then ``first`` at the start of the next line."""
    counter, _, rest = err.partition("\n")
    assert counter.startswith("\rjudging 2 pairs x 2 orders: 1/4 ("), err
    assert rest.startswith(first), err


@pytest.mark.parametrize("fail, code, first", [
    (TableError("t.jsonl", ["row 1: bad"]), 2, "error: t.jsonl: 1 problem(s)"),
    (OSError(errno.ENOSPC, "No space left on device"), 74, "error: disk full"),
], ids=["user error", "full disk"])
def test_an_error_starts_on_its_own_line(monkeypatch, capsys, tmp_path, fail, code, first):
    got, err = _main(monkeypatch, capsys, _fake_judge(monkeypatch, tmp_path, fail))
    assert got == code
    _counter_then(err, first)


def test_a_stop_starts_on_its_own_line(monkeypatch, capsys, tmp_path):
    import atexit
    import os

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: None)  # not pytest's handlers, in-process
    monkeypatch.setattr(os, "_exit", leave)
    got, err = _main(monkeypatch, capsys, _fake_judge(monkeypatch, tmp_path, KeyboardInterrupt()))
    assert got == 130
    _counter_then(err, "stopped: finished model calls")


def test_the_final_line_follows_an_unfinished_counter_on_a_line_of_its_own(monkeypatch, capsys, tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    res = CliRunner().invoke(app, _fake_judge(monkeypatch, tmp_path, None))
    assert res.exit_code == 0, res.output
    # CliRunner mixes stderr into the output: the counter's line is ended before "wrote".
    assert "1/4 (" in res.output and "\nwrote " in res.output, res.output
