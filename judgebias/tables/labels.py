"""Preference labels: the three values ("a", "b", "tie"), the spellings real data files use for
them, and how several annotators' labels become one."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np

LABELS = ("a", "b", "tie")

# Spellings met in real data files; everything else is an error, never a guess.
_LABEL_ALIASES = {
    "a": "a", "b": "b", "tie": "tie",
    "model_a": "a", "model_b": "b", "1": "a", "2": "b", "0": "tie",
    "response_a": "a", "response_b": "b", "[[a]]": "a", "[[b]]": "b", "[[c]]": "tie",
    "draw": "tie", "tie (bothbad)": "tie", "tie_bothbad": "tie", "tie (both bad)": "tie",
}


def normalize_label(value: object) -> str | None:
    """Map one label spelling to "a" | "b" | "tie"; None for empty. Raises ValueError when unknown."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"boolean {value!r} is not a label")
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            value = int(value)
    text = str(value).strip().lower()
    if text in ("", "nan", "none", "null"):
        return None
    try:
        return _LABEL_ALIASES[text]
    except KeyError:
        raise ValueError(f"unknown label {value!r} (expected a, b or tie)") from None


def label_parts(value: object) -> list:
    """The label values inside one cell, as written: a list's items, or a CSV string's parts."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        # CSV cannot hold a list column: accept "a|b|tie" and JSON-ish "['a', 'b']".
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].replace("'", "").replace('"', "")
            return [p for p in (s.strip() for s in text.split(",")) if p]
        if "|" in text:
            return [p.strip() for p in text.split("|") if p.strip()]
        return [text] if text else []
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    return [value]


def as_label_list(value: object) -> list[str]:
    labels = [normalize_label(v) for v in label_parts(value)]
    return [x for x in labels if x is not None]


def majority(labels: Iterable[str]) -> str | None:
    """Strict majority of the labels (more than half); None when there is none."""
    labels = list(labels)
    if not labels:
        return None
    (top, n), *_ = Counter(labels).most_common(1)
    return top if n * 2 > len(labels) else None
