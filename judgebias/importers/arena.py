"""Chatbot Arena conversations (``lmsys/chatbot_arena_conversations``): one crowd vote per battle,
so every row is a human-labelled pair with no judge.

* ``pair_id`` = ``arena/<question_id>`` (the dataset's own battle id). A question_id seen again
  with the same models and texts adds its vote to ``human``; with different content it is left
  out and counted (ids are then not trustworthy for that row).
* A = ``model_a``'s conversation, B = ``model_b``'s, as shown to the voter.
* ``winner`` ``tie (bothbad)`` is a tie (recoded, counted). The voter id goes to ``annotators``.
* Conversations of several turns are rendered as in ``judgebias.importers._lmsys``.

Source: ``hf:lmsys/chatbot_arena_conversations`` (gated: accept its terms on the Hub and set
HF_TOKEN) or a local JSONL/JSON/Parquet file with the same columns.
"""

from __future__ import annotations

import re
from pathlib import Path

from judgebias.importers._common import RECODED, finish, text_problem
from judgebias.importers._lmsys import field, read_rows, render_pair, where_error
from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import Exclusions

REPO = "lmsys/chatbot_arena_conversations"
EXTRA = ("language", "anony", "tstamp")


def import_arena(src: Path | str, split: list[str] | None = None, turns: str = "all", **_: object):
    """Import Chatbot Arena battles as human-labelled pairs."""
    exclusions = Exclusions()
    by_id: dict[str, dict] = {}
    for where, rec in read_rows(src, REPO, split, ["train"]):
        qid = str(field(rec, "question_id", where))
        model_a, model_b = field(rec, "model_a", where), field(rec, "model_b", where)
        for name, value in (("model_a", model_a), ("model_b", model_b)):
            if text_problem(value):
                raise where_error(where, f"field {name!r}: {value!r} is not a model name")
        raw = field(rec, "winner", where)
        try:
            winner = normalize_label(raw)
        except ValueError as exc:
            raise where_error(where, f"field 'winner': {exc}") from None
        if winner is None:
            exclusions.add("winner_missing", example=where)
            continue
        if str(raw).strip().lower() != winner and str(raw).strip().lower() != f"model_{winner}":
            exclusions.add(f"{RECODED}winner_" + re.sub(r"[^a-z0-9]+", "_", str(raw).lower()).strip("_"))
        rendered = render_pair(rec, where, turns)
        if isinstance(rendered, str):
            exclusions.add(rendered, example=where)
            continue
        prompt, resp_a, resp_b = rendered
        pair_id = f"arena/{qid}"
        seen = by_id.get(pair_id)
        if seen is not None:
            same = (seen["generator_a"], seen["generator_b"], seen["prompt"], seen["response_a"],
                    seen["response_b"]) == (model_a, model_b, prompt, resp_a, resp_b)
            if not same:
                exclusions.add("question_id_reused_with_other_content", example=where)
                continue
            seen["human"].append(winner)
            seen["annotators"].append(str(rec.get("judge")))
            continue
        by_id[pair_id] = {
            "pair_id": pair_id, "prompt": prompt, "response_a": resp_a, "response_b": resp_b,
            "generator_a": model_a, "generator_b": model_b, "judge": None, "human": [winner],
            "annotators": [str(rec.get("judge"))], "turn": int(rec["turn"]), "source": "arena",
            **{k: rec.get(k) for k in EXTRA if k in rec},
        }
    return finish(list(by_id.values()), str(src), exclusions)
