"""Names from data (judges, models, generators) made safe for where they are shown.

A judgment table is third-party data: a judge named ``\\x1b]0;owned\\x07`` would retitle the terminal
that prints it, ``<img src=x onerror=...>`` would be live HTML in a markdown viewer, and ``a/b`` and
``a_b`` must not share a plot file. Each output gets the name in the form that shows it as text.
"""

from __future__ import annotations

import hashlib
import html
import unicodedata
from typing import Any

_STEM_MAX = 80  # characters kept of a name in a file stem; the rest is told apart by the hash


def terminal_safe(text: str, keep: str = "") -> str:
    """``text`` with every control character (C0, DEL, C1: escape sequences, NUL, bell, carriage
    return) shown as its ``\\x..`` escape, so printing it cannot move, clear or retitle a terminal.
    ``keep``: control characters the caller's own layout uses (``"\\n"`` for a multi-line report)."""
    return "".join(c if c in keep or unicodedata.category(c) != "Cc"
                   else c.encode("unicode_escape").decode("ascii") for c in str(text))


def markdown_safe(text: str) -> str:
    """``text`` as inert markdown table-cell text: HTML escaped (a viewer renders raw HTML), the cell
    separator ``|`` escaped, control characters shown as escapes."""
    return html.escape(terminal_safe(text), quote=False).replace("|", "\\|")


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: Any) -> Any:
    """A copy of ``frame`` whose text cells cannot run as a spreadsheet formula: a cell starting with
    ``= + - @`` (or a tab or carriage return) gets a leading ``'``, so a judge named ``=HYPERLINK(...)``
    or ``@SUM(...)`` opens as text. Numbers are left as they are (a negative figure is a number)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = out[column].map(
                lambda v: "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v)
    return out


def file_stem(name: str) -> str:
    """``name`` as one file-name component: only ``[A-Za-z0-9._-]`` kept (others become ``_``), at
    most 80 of them, and a short hash of the original whenever anything was replaced or cut, so two
    names never share a file (``a/b`` and ``a_b``) and none can climb out of its folder."""
    kept = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in str(name))
    if kept == name and len(kept) <= _STEM_MAX and kept.strip(".") != "":
        return kept
    digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{kept[:_STEM_MAX]}-{digest}"
