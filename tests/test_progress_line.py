"""A progress counter redraws its line in place (``\\r``, no newline): an error, a stop or a final line
printed while one is half-drawn starts on a line of its own, not after the counter."""

from __future__ import annotations

import errno
import sys
from types import SimpleNamespace

import pandas as pd
import pytest

from judgebias.cli import progress
from judgebias.tables.exclusions import Exclusions
from judgebias.tables.pairwise import TableError


@pytest.fixture(autouse=True)
def _stderr_is_a_terminal(monkeypatch, request):
    """The tests of the line redrawn in place run as on a terminal; those of a log as in a file."""
    if "in_a_log" not in request.node.name:
        monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)


def test_in_a_log_one_line_every_n_seconds_with_a_newline(capsys, monkeypatch):
    monkeypatch.setenv(progress.ENV_LOG_SECONDS, "30")
    now = [100.0]
    report = progress.counter("judging 200 pairs x 2 orders", clock=lambda: now[0])
    for t, done in ((101.0, 10), (110.0, 50), (131.5, 128), (140.0, 200), (190.0, 400)):
        now[0] = t
        report(done, 400)
    lines = capsys.readouterr().err.split("\n")
    # Drawn: the first call, the first past 30 s after it (31.5 s), the end; 10 and 40 s: skipped.
    assert lines == ["judging 200 pairs x 2 orders: 10/400 (10.0/s, 1 s, about 39 s left)",
                     # 128 in 31.5 s = 4.06/s; 272 left at that rate = 66.9 s
                     "judging 200 pairs x 2 orders: 128/400 (4.1/s, 32 s, about 1 min 07 s left)",
                     "judging 200 pairs x 2 orders: 400/400 (4.4/s, 1 min 30 s)", ""]
    progress.end_line()  # nothing is left open in a log
    assert capsys.readouterr().err == ""


def test_a_shorter_redraw_covers_the_longer_line(capsys):
    now = [0.0]
    report = progress.counter("x", clock=lambda: now[0])
    now[0] = 1.0
    report(5, 100)   # "x: 5/100 (5.0/s, 1 s, about 19 s left)"
    now[0] = 4.0
    report(99, 100)  # "x: 99/100 (24.8/s, 4 s, about 0 s left)": as long; then the end, shorter
    now[0] = 4.5
    report(100, 100)
    first, second, last = capsys.readouterr().err.split("\r")[1:]
    assert len(last.rstrip("\n")) >= len(second) and last.endswith("\n")
    assert first == "x: 5/100 (5.0/s, 1 s, about 19 s left)"


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
    from judgebias.tables.files import write_table

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
