"""Anthropic HH-RLHF (``*.jsonl.gz`` or ``*.jsonl`` of ``{"chosen": ..., "rejected": ...}``): human
preference pairs with no judge.

Each record is two full dialogues that share every turn but the last assistant turn. The shared
part, up to and without the final ``Assistant:`` marker, becomes ``prompt``; the two final
assistant turns become the responses. Which of chosen/rejected is A is drawn per record from a
seeded RNG (``seed``, default 0; recorded in the ``order_seed`` column) so that ``human`` is not
always "a" and position effects cannot masquerade as preference.

``pair_id`` = ``hh-rlhf/<file name>/<line number>`` (the file has no ids; line numbers of an
unchanged public file are stable).

Dialogues that cannot be split are left out and counted: identical chosen/rejected, no assistant
turn, prefixes that differ before the last assistant turn (the two dialogues diverge earlier, so
there is no single prompt), an empty final turn.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from judgebias.importers._common import finish, get
from judgebias.tables.pairwise import Exclusions, TableError

ASSISTANT = "\n\nAssistant:"


def split_dialogue(chosen: str, rejected: str) -> tuple[str, str, str] | str:
    """(prompt, chosen final turn, rejected final turn), or the reason the pair cannot be split."""
    if chosen == rejected:
        return "identical_dialogues"
    ic, ir = chosen.rfind(ASSISTANT), rejected.rfind(ASSISTANT)
    if ic < 0 or ir < 0:
        return "no_assistant_turn"
    if chosen[:ic] != rejected[:ir]:
        return "dialogues_diverge_before_last_turn"
    a, b = chosen[ic + len(ASSISTANT):].strip(), rejected[ir + len(ASSISTANT):].strip()
    if not a or not b:
        return "empty_final_turn"
    if a == b:
        return "identical_final_turns"
    prompt = chosen[:ic].strip()
    if not prompt:
        return "empty_prompt"
    return prompt, a, b


def _lines(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            yield from enumerate(fh, 1)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TableError(str(path), [f"cannot read: {exc}"]) from exc


def import_hh_rlhf(src: Path, seed: int = 0, **_: object):
    """Import an HH-RLHF JSONL(.gz) file; ``seed`` fixes which response is A."""
    src = Path(src)
    if not src.is_file():
        raise TableError(str(src), ["file does not exist (expected an HH-RLHF *.jsonl.gz or *.jsonl)"])
    rng = random.Random(seed)
    exclusions = Exclusions()
    rows = []
    for line_no, line in _lines(src):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TableError(str(src), [f"row {line_no}: not valid JSON ({exc.msg} at column {exc.colno})"]
                             ) from None
        if not isinstance(rec, dict):
            raise TableError(str(src), [f"row {line_no}: expected a JSON object"])
        chosen, rejected = get(rec, "chosen", src, line_no), get(rec, "rejected", src, line_no)
        # One draw per record whatever happens to it, so a record's order depends only on its line.
        chosen_is_a = rng.random() < 0.5
        for name, value in (("chosen", chosen), ("rejected", rejected)):
            if not isinstance(value, str):
                raise TableError(str(src), [f"row {line_no}, field {name!r}: expected text, "
                                            f"got {type(value).__name__}"])
        split = split_dialogue(chosen, rejected)
        if isinstance(split, str):
            exclusions.add(split, example=f"row {line_no}")
            continue
        prompt, good, bad = split
        rows.append({
            "pair_id": f"hh-rlhf/{src.name}/{line_no}", "prompt": prompt,
            "response_a": good if chosen_is_a else bad, "response_b": bad if chosen_is_a else good,
            "judge": None, "human": ["a" if chosen_is_a else "b"],
            "source": "hh-rlhf", "order_seed": seed,
        })
    return finish(rows, str(src), exclusions)
