"""A stop the user asked for (Ctrl-C), honoured right after the batch being computed is committed.

Python raises KeyboardInterrupt wherever the main thread happens to be when SIGINT arrives; inside
a finalizer or a callback the interpreter prints "Exception ignored" and carries on. Seen here: a
`judgebias judge` given Ctrl-C half-way ran to the end and wrote its table in 2 of 3 full test
runs (that cause is suspected, not proven). A command that wants Ctrl-C honoured runs inside
``stop_between_batches()``: SIGINT then only records the request, and the call cache
(``cache.CachedBackend``) raises KeyboardInterrupt from ordinary code after the batch it just
stored. A second Ctrl-C stops at once. A command that stops at once (``judgebias run``: Prefect
marks its runs Crashed and the finished stages are kept) runs inside ``stop_at_once_remembered()``:
Ctrl-C raises KeyboardInterrupt where the main thread is, as Python's own handler does, and is also
remembered, so one the interpreter swallowed is raised again by the next ``check()`` (after each
stored batch of model calls, at each stage's start and end). Seen here: a `judgebias run` given
Ctrl-C as its first subflow began ran to the end and exited 0 once in 5 tries (the one beside
the full test suite).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_REQUESTED = threading.Event()


def _on_sigint(signum, frame) -> None:
    if _REQUESTED.is_set():
        signal.default_int_handler(signum, frame)  # the second Ctrl-C: KeyboardInterrupt now
    _REQUESTED.set()


def _on_sigint_at_once(signum, frame) -> None:
    _REQUESTED.set()
    signal.default_int_handler(signum, frame)


@contextmanager
def _sigint_handled_by(handler) -> Iterator[None]:
    """``handler`` for SIGINT inside the block (main thread); the previous handler is back
    afterwards (a command run in-process, e.g. by a test, leaves nothing behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only: nothing to install from here
        return
    _REQUESTED.clear()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _REQUESTED.clear()


def stop_between_batches():
    """Inside this block, Ctrl-C stops at the next batch boundary (a second one at once)."""
    return _sigint_handled_by(_on_sigint)


def stop_at_once_remembered():
    """Inside this block, Ctrl-C stops at once, and the next ``check()`` raises it again where the
    interpreter swallowed it."""
    return _sigint_handled_by(_on_sigint_at_once)


def check() -> None:
    """Raise KeyboardInterrupt when a stop was asked for: call it where stopping loses nothing."""
    if _REQUESTED.is_set():
        raise KeyboardInterrupt("stop requested (Ctrl-C)")
