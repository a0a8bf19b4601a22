"""A progress counter redrawn in place (``\\r``, no newline) on stderr, and ``end_line``: every error,
stop or final line of a command calls it first, so that it starts on a line of its own instead of
after a half-drawn counter."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

# The stream whose last line is a counter not yet ended (at most one: commands draw one at a time).
_OPEN: list[TextIO] = []


def counter(label: str, every: float = 2.0) -> Callable[[int, int], None]:
    """``report(done, total)``: redraws ``label: done/total (rate/s)`` at most every ``every`` seconds,
    and always at the end (then with its newline)."""
    start = time.perf_counter()
    last = [-math.inf]  # the first call draws

    def report(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - last[0] > every:
            last[0] = now
            rate = done / max(now - start, 1e-9)
            stream = sys.stderr  # looked up now: a test's captured stream, or the terminal
            finished = done == total
            print(f"\r{label}: {done}/{total} ({rate:.1f}/s)", end="\n" if finished else "", file=stream,
                  flush=True)
            _OPEN[:] = [] if finished else [stream]
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
