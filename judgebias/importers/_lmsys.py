"""Shared reading for the two LMSYS datasets (Chatbot Arena conversations, MT-Bench human
judgments): the same row schema (question_id, model_a, model_b, winner, judge, conversation_a,
conversation_b, turn), read from the Hugging Face Hub or from a local JSONL/JSON/Parquet file.

Conversations are lists of ``{"role": "user"|"assistant", "content": ...}``. A judgment on turn
``t`` covers the first ``t`` exchanges. For ``t == 1`` the prompt is the user message and the
responses are the two first answers. For ``t > 1`` the two sides' earlier answers differ, so no
single prompt precedes both final answers: the prompt is the FIRST user message and each response
is that side's transcript of the rest (its first answer, then ``User: ...`` / ``Assistant: ...``
turns). ``turns="first"`` leaves multi-turn rows out instead (counted).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from judgebias.importers._common import load_json
from judgebias.tables.pairwise import TableError

HUB_PREFIX = "hf:"
FIELDS = ("question_id", "model_a", "model_b", "winner", "judge", "conversation_a", "conversation_b", "turn")


def _plain(value: Any) -> Any:
    """Parquet/Arrow hands back numpy arrays and numpy scalars: make them JSON-like."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def is_hub(src: Path | str) -> bool:
    return str(src).startswith(HUB_PREFIX)


def read_rows(src: Path | str, default_repo: str, splits: list[str] | None,
              default_splits: list[str]) -> Iterator[tuple[str, dict]]:
    """Yield (where, row) with ``where`` naming file/split and 1-based row for error messages."""
    if is_hub(src):
        yield from _hub_rows(str(src)[len(HUB_PREFIX):] or default_repo, splits or default_splits)
        return
    path = Path(src)
    if not path.is_file():
        raise TableError(str(path), ["file does not exist (give a .jsonl/.json/.parquet file, or "
                                     f"{HUB_PREFIX}{default_repo} to download from the Hugging Face Hub)"])
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records = _jsonl(path)
    elif suffix == ".json":
        data = load_json(path)
        if isinstance(data, dict):  # {"split name": [rows]}, as saved from a DatasetDict
            chosen = splits or list(data)
            missing = [s for s in chosen if s not in data]
            if missing:
                raise TableError(str(path), [f"no split(s) {missing} (file has {sorted(data)})"])
            records = [r for s in chosen for r in data[s]]
        elif isinstance(data, list):
            records = data
        else:
            kind = type(data).__name__
            raise TableError(str(path), [f"expected a list of rows or {{split: rows}}, got {kind}"])
    elif suffix in (".parquet", ".pq"):
        import pandas as pd
        try:
            records = [_plain(r) for r in pd.read_parquet(path).to_dict(orient="records")]
        except Exception as exc:
            raise TableError(str(path), [f"cannot read as Parquet: {exc}"]) from exc
    else:
        raise TableError(str(path), [f"unknown file type {suffix!r}; use .jsonl, .json or .parquet"])
    for i, rec in enumerate(records, 1):
        if not isinstance(rec, dict):
            raise TableError(str(path), [f"row {i}: expected an object, got {type(rec).__name__}"])
        yield f"{path}|{i}", rec


def _jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TableError(str(path), [f"row {i}: not valid JSON ({exc.msg} at column {exc.colno})"]
                                 ) from None
    return rows


def _hub_rows(repo: str, splits: list[str]) -> Iterator[tuple[str, dict]]:
    """Download through ``datasets`` (gated sets need HF_TOKEN in the environment)."""
    from datasets import load_dataset

    for split in splits:
        try:
            ds = load_dataset(repo, split=split)
        except Exception as exc:
            raise TableError(f"{HUB_PREFIX}{repo}[{split}]", [f"cannot load from the Hugging Face Hub: {exc}"]
                             ) from exc
        for i, rec in enumerate(ds, 1):
            yield f"{HUB_PREFIX}{repo}[{split}]|{i}", rec


def where_error(where: str, message: str) -> TableError:
    source, row = where.rsplit("|", 1)
    return TableError(source, [f"row {row}, {message}"])


def field(rec: dict, name: str, where: str) -> Any:
    if name not in rec:
        raise where_error(where, f"field {name!r}: missing")
    return rec[name]


def _messages(conv: Any, name: str, where: str) -> list[tuple[str, str]]:
    if not isinstance(conv, list):
        raise where_error(where, f"field {name!r}: expected a list of messages, got {type(conv).__name__}")
    out = []
    for k, msg in enumerate(conv):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise where_error(where, f"field {name!r}: message {k} needs 'role' and 'content'")
        out.append((str(msg["role"]), msg["content"]))
    return out


def render_pair(rec: dict, where: str, turns: str = "all") -> tuple[str, str, str] | str:
    """(prompt, response_a, response_b) for the judged turn, or an exclusion reason."""
    turn = field(rec, "turn", where)
    valid = isinstance(turn, (int, float)) and not isinstance(turn, bool) and not math.isnan(turn)
    if not valid or turn < 1 or int(turn) != turn:
        raise where_error(where, f"field 'turn': {turn!r} is not a turn number (1, 2, ...)")
    turn = int(turn)
    if turns == "first" and turn > 1:
        return "multi_turn_left_out"
    sides = []
    for name in ("conversation_a", "conversation_b"):
        msgs = _messages(field(rec, name, where), name, where)[: 2 * turn]
        if len(msgs) < 2 * turn:
            return "conversation_shorter_than_turn"
        if [r for r, _ in msgs] != ["user", "assistant"] * turn:
            return "conversation_roles_not_alternating"
        sides.append(msgs)
    users_a = [c for r, c in sides[0] if r == "user"]
    users_b = [c for r, c in sides[1] if r == "user"]
    if users_a != users_b:
        return "user_turns_differ_between_sides"
    if any(not isinstance(c, str) or not c.strip() for side in sides for _, c in side):
        return "empty_message"
    prompt = users_a[0]
    responses = []
    for side in sides:
        parts = [side[1][1]]
        for k in range(1, turn):
            parts.append(f"User: {side[2 * k][1]}\n\nAssistant: {side[2 * k + 1][1]}")
        responses.append("\n\n".join(parts))
    return prompt, responses[0], responses[1]
