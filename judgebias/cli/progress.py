"""A progress counter that reads where it is written: on a terminal one line redrawn in place
(``\\r``, no newline); in a file or a CI log (stderr not a terminal) a line of its own every
``JUDGEBIAS_PROGRESS_SECONDS`` seconds (default 30) and at the end, each with the rate, the time
so far and the time left at that rate. ``end_line``: every error, stop or final line of a command
calls it first, so that it starts on a line of its own instead of after a half-drawn counter."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

# The stream whose last line is a counter not yet ended (at most one: commands draw one at a time).
_OPEN: list[TextIO] = []
ENV_LOG_SECONDS = "JUDGEBIAS_PROGRESS_SECONDS"
LOG_SECONDS = 30.0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: written like a log
        return False


def log_seconds() -> float:
    """Seconds between two lines in a log (``JUDGEBIAS_PROGRESS_SECONDS``, default 30)."""
    raw = os.environ.get(ENV_LOG_SECONDS)
    try:
        value = float(raw) if raw else LOG_SECONDS
    except ValueError:
        value = LOG_SECONDS
    return value if value >= 0 else LOG_SECONDS


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def progress_text(label: str, done: int, total: int, elapsed: float) -> str:
    """``label: done/total (rate/s, elapsed, about T left)`` (no time left before the first item)."""
    rate = done / max(elapsed, 1e-9)
    left = f", about {_duration((total - done) / rate)} left" if 0 < done < total and rate > 0 else ""
    return f"{label}: {done}/{total} ({rate:.1f}/s, {_duration(elapsed)}{left})"


def counter(label: str, every: float = 2.0, *, clock: Callable[[], float] = time.perf_counter
            ) -> Callable[[int, int], None]:
    """``report(done, total)``: on a terminal redraws the line at most every ``every`` seconds, in a
    log writes one at most every ``log_seconds()``; always at the end (then with its newline)."""
    start = clock()
    last = [-math.inf]  # the first call draws
    width = [0]

    def report(done: int, total: int) -> None:
        now = clock()
        stream = sys.stderr  # looked up now: a test's captured stream, or the terminal
        terminal = _is_terminal(stream)
        finished = done == total
        if not finished and now - last[0] <= (every if terminal else log_seconds()):
            return
        last[0] = now
        text = progress_text(label, done, total, now - start)
        if terminal:
            pad = " " * max(0, width[0] - len(text))  # a shorter line covers all of the longer one
            width[0] = len(text)
            print(f"\r{text}{pad}", end="\n" if finished else "", file=stream, flush=True)
            _OPEN[:] = [] if finished else [stream]
        else:
            print(text, file=stream, flush=True)
    return report


def end_line() -> None:
    """End a counter line left open (a newline on its stream); nothing when no counter is open."""
    if not _OPEN:
        return
    stream = _OPEN.pop()
    try:
        stream.write("\n")
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stream: the line cannot be ended, nor read
        pass


@contextmanager
def ended_line() -> Iterator[None]:
    """A block that draws counters: however it ends (an error, a stop, a counter that never reached
    its total), what is printed next starts on a line of its own."""
    try:
        yield
    finally:
        end_line()
