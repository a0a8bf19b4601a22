"""Simulated judgment tables in the product's own format, prepared by the product's own
``frame.prepare``: human labels as lists, verdicts as "a"/"b"/"tie", probabilities as floats.

Response texts are the one input not written out: word and markdown counts (what ``prepare``
would count in them) are given directly, which keeps a replication at a millisecond or two.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from judgebias.metrics import frame as F

LABELS = np.array(["a", "b", "tie"], dtype=object)
JUDGE = "judge-x"


def label_lists(counts: np.ndarray) -> list[list[str]]:
    """Per row, the list of human labels with ``counts[:, k]`` labels of class k (a, b, tie)."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 2 or counts.shape[1] != 3 or (counts < 0).any():
        raise ValueError(f"label counts must be a (rows, 3) array of counts >= 0, got shape {counts.shape}")
    return [["a"] * int(a) + ["b"] * int(b) + ["tie"] * int(t) for a, b, t in counts]


def one_label(codes: np.ndarray) -> np.ndarray:
    """(rows, 3) counts of one human label per row from codes 0 = a, 1 = b, 2 = tie."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.eye(3, dtype=np.int64)[codes]


def choice_labels(codes: np.ndarray) -> np.ndarray:
    """"a"/"b"/"tie" from codes 0/1/2 (None for -1: no verdict)."""
    codes = np.asarray(codes, dtype=np.int64)
    out = LABELS[np.clip(codes, 0, 2)].copy()
    out[codes < 0] = None
    return out


def table(n_rows: int, *, pair: np.ndarray | None = None, judge: str | np.ndarray = JUDGE,
          human: np.ndarray | None = None, words: tuple[np.ndarray, np.ndarray] | None = None,
          bold: tuple[np.ndarray, np.ndarray] | None = None,
          columns: Mapping[str, np.ndarray | str] | None = None) -> pd.DataFrame:
    """A judgment table of ``n_rows`` rows run through ``frame.prepare``.

    ``pair``: pair index per row (default: one row per pair); ``human``: (rows, 3) label counts
    (default: no labels); ``words``/``bold``: word and bold-span counts of A and B (default 0);
    ``columns``: every other raw column (generator_a, p_a, verdict, p_a_ab, ppl_a, ...)."""
    pair = np.arange(n_rows) if pair is None else np.asarray(pair, dtype=np.int64)
    if pair.shape != (n_rows,):
        raise ValueError(f"pair must have one entry per row ({n_rows}), got {pair.shape}")
    raw: dict[str, object] = {"pair_id": pair.astype(str), "judge": judge}
    if human is not None:
        raw["human"] = label_lists(human)
    raw.update(columns or {})
    zeros = np.zeros(n_rows, dtype=np.int64)
    wa, wb = words if words is not None else (zeros, zeros)
    raw[F.WORDS_A], raw[F.WORDS_B] = np.asarray(wa, dtype=np.int64), np.asarray(wb, dtype=np.int64)
    for name, col_a, col_b in zip(F.MARKDOWN, F.MD_A, F.MD_B, strict=True):
        a, b = bold if (bold is not None and name == "bold") else (zeros, zeros)
        raw[col_a], raw[col_b] = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return F.prepare(pd.DataFrame(raw))


def own_generators(own_side: np.ndarray, own: str = JUDGE, other: str = "other-model",
                   neither: tuple[str, str] = ("model-1", "model-2")) -> dict[str, np.ndarray]:
    """generator_a/generator_b from the own side per row: 0 = A is own, 1 = B is own, -1 = neither."""
    own_side = np.asarray(own_side)
    ga = np.where(own_side == 0, own, np.where(own_side == 1, other, neither[0])).astype(object)
    gb = np.where(own_side == 1, own, np.where(own_side == 0, other, neither[1])).astype(object)
    return {"generator_a": ga, "generator_b": gb}


def categorical(rng: np.random.Generator, probs: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws of 0..k-1 with probabilities ``probs`` (inverse CDF, vectorized)."""
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 1 or (probs < 0).any() or not np.isclose(probs.sum(), 1.0):
        raise ValueError(f"probabilities must be >= 0 and sum to 1, got {probs}")
    return np.minimum(np.searchsorted(np.cumsum(probs), rng.random(size), side="right"), probs.size - 1)


def conditional(rng: np.random.Generator, given: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """One draw per row of 0..k-1 from row ``probs[given[i]]`` of a conditional table."""
    probs = np.asarray(probs, dtype=float)
    cum = np.cumsum(probs, axis=1)[np.asarray(given)]
    u = rng.random(len(given))[:, None]
    return np.minimum((u >= cum).sum(axis=1), probs.shape[1] - 1)
