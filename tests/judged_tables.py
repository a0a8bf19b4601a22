"""Small hand-built judgment tables for the tests that log to a real MLflow server."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def short_or_long(path: Path, judges: Sequence[str], seed: int, pairs: int = 30) -> Path:
    """``pairs`` pairs of a short and a longer answer from three generators, each judged by every
    judge, with three human labels (two alike): every pairwise figure but the self-preference ones
    can be computed. Written as JSON lines to ``path``."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(pairs):
        human = ["a", "b"][rng.integers(2)]
        for judge in judges:
            rows.append({"pair_id": f"p{i}", "prompt": f"question {i}", "response_a": "short",
                         "response_b": "a longer answer " * (1 + i % 4), "judge": judge,
                         "generator_a": ["g1", "g2", "g3"][i % 3], "generator_b": ["g2", "g3", "g1"][i % 3],
                         "p_a": float(rng.uniform(0.05, 0.95)), "human": [human, human, "a"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
