"""A full disk, recognized wherever it surfaces, so a command can say so in one line.

The one event reaches a command under many names: ``OSError(ENOSPC)`` from Python's own writes;
an ``OSError`` without a file name whose text carries "[errno 28]" from pyarrow; safetensors'
``SafetensorError: ... No space left on device (os error 28)``; SQLite's "database or disk is full"
(the call cache, MLflow's store); each possibly re-raised by Prefect for a failed task or flow, or
chained under another error. ``find`` looks through the whole chain; writers that know which file
they were writing say so by raising ``DiskFullError`` from the library's error. Some say only that
a write failed (SQLite's "disk I/O error"; ``torch.save`` to a path: "[enforce fail at
inline_container.cc:...] unexpected pos 576 vs 534" or "PytorchStreamWriter failed writing file
data/0: file write failed", no errno anywhere in the chain): those count as a full disk only where
the file system written to has almost no space left (``io_error`` and ``nearly_full``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL; read from the exception's sqlite_errorcode
# The words the libraries that wrap the OS's error in their own type keep (lower case).
_WORDS = ("no space left on device", "disk quota exceeded", "database or disk is full")


class DiskFullError(OSError):
    """The disk filled while ``filename`` was being written (raised from the library's own error,
    which often does not name the file: pyarrow's never does). Built by ``writing``; OSError's own
    arguments, so it pickles (a Dask worker's error travels pickled)."""

    @classmethod
    def writing(cls, path: str | os.PathLike, cause: BaseException) -> DiskFullError:
        code = errno.EDQUOT if _quota(cause) else errno.ENOSPC
        return cls(code, os.strerror(code), os.fspath(path))


@dataclass(frozen=True)
class DiskFull:
    """What a command says of a full disk: the OS's words and, when known, the file being written."""

    reason: str
    path: str | None


def _quota(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) == errno.EDQUOT or "disk quota exceeded" in _text(exc)


def _text(exc: BaseException) -> str:
    try:
        return str(exc).lower()
    except Exception:  # a library's __str__ that fails must not hide the error being reported
        return ""


def mentions(text: str) -> bool:
    """Whether ``text`` (a message, a log line) speaks of a full disk."""
    low = text.lower()
    return any(w in low for w in _WORDS)


def _is_full(exc: BaseException) -> bool:
    return (getattr(exc, "errno", None) in _ERRNOS or getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
            or mentions(_text(exc)))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or during, and an exception group's members, nearest
    first (each once: chains can loop). A context dropped with ``raise ... from None`` is left out,
    as tracebacks leave it out: the code that raised chose what to say instead."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cur = todo.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        context = None if cur.__suppress_context__ else cur.__context__
        todo.extend(e for e in (cur.__cause__, context) if e is not None)
        if isinstance(cur, BaseExceptionGroup):
            todo.extend(cur.exceptions)


# Under this many bytes available to the user, a write that failed with an I/O error failed for space.
NEARLY_FULL_BYTES = 1 << 20


def nearly_full(path: str | os.PathLike) -> bool:
    """Whether the file system that holds ``path`` (or its nearest existing folder) has almost no
    space left for this user: SQLite says only "disk I/O error" when it cannot grow its files."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        st = os.statvfs(where)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


# The words of a failed write that names no cause (lower case): SQLite's; torch's C++ file writer's
# (torch 2.13 on a device that refuses writes, measured: "unexpected pos", from "basic_ios::clear:
# iostream error"; other versions and sizes: "PytorchStreamWriter failed writing ...: file write failed").
_WRITE_FAILED = ("i/o error", "pytorchstreamwriter failed writing", "file write failed", "unexpected pos",
                 "iostream error")


def io_error(exc: BaseException) -> bool:
    """An error a full disk also causes under another name, anywhere in ``exc``'s chain (EIO, SQLite's
    "disk I/O error", torch's failed write); not a refused permission or a missing folder, which say
    what they are."""
    return any(getattr(e, "errno", None) == errno.EIO or any(w in _text(e) for w in _WRITE_FAILED)
               for e in _chain(exc))


def find(exc: BaseException) -> DiskFull | None:
    """The full disk behind ``exc`` (anywhere in its chain), or None when the disk is not the cause."""
    hits = [e for e in _chain(exc) if _is_full(e)]
    if not hits:
        return None
    path = next((os.fsdecode(e.filename) for e in hits if isinstance(e, OSError) and e.filename), None)
    quota = any(_quota(e) for e in hits)
    return DiskFull(reason="disk quota exceeded" if quota else "no space left on device", path=path)


class HideDiskFull(logging.Filter):
    """Drops the log records of logger ``name`` and its children (all loggers: "") that report a
    full disk (a failed task's traceback, a flow's failed state): the command that ends because of
    it says so once, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not super().filter(record):  # another logger's record: kept whatever it says
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and find(exc) is not None:
            return False
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's to report, not ours
            return True
        return not mentions(message)


@contextlib.contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """A full disk met while writing ``path`` raised as ``DiskFullError`` naming ``path``: pyarrow's
    error names no file, Python's the temporary one, a folder's the file inside it that is deleted.
    An I/O error on a file system left with almost no space counts as one too."""
    try:
        yield
    except Exception as exc:
        if find(exc) is None and not (io_error(exc) and nearly_full(path)):
            raise
        raise DiskFullError.writing(path, exc) from exc
