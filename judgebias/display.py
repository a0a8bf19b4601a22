"""Names from data (judges, models, generators) made safe for where they are shown.

A judgment table is third-party data: a judge named ``\\x1b]0;owned\\x07`` would retitle the terminal
that prints it, ``<img src=x onerror=...>`` would be live HTML in a markdown viewer, and ``a/b`` and
``a_b`` must not share a plot file. Each output gets the name in the form that shows it as text.
"""

from __future__ import annotations

import hashlib
import html
import unicodedata

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


def file_stem(name: str) -> str:
    """``name`` as one file-name component: only ``[A-Za-z0-9._-]`` kept (others become ``_``), at
    most 80 of them, and a short hash of the original whenever anything was replaced or cut, so two
    names never share a file (``a/b`` and ``a_b``) and none can climb out of its folder."""
    kept = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in str(name))
    if kept == name and len(kept) <= _STEM_MAX and kept.strip(".") != "":
        return kept
    digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{kept[:_STEM_MAX]}-{digest}"
