"""MT-bench single-answer judgments (FastChat ``data/mt_bench/model_judgment/*_single.jsonl``) ->
a pointwise table (``judgebias.tables.pointwise``).

Each record holds ``question_id``, ``model``, ``judge`` ([judge model, prompt name]),
``user_prompt`` (the full judge prompt, which embeds the question, the model's answer and, for
``single-math-v1``, the reference answer), ``judgment`` (the judge's text), ``score`` and ``turn``.
The question, answer and reference are read back from ``user_prompt`` between the prompt's own
markers, so no answer file is needed; a ``question.jsonl`` beside the ``model_judgment`` folder
(FastChat's layout) adds each question's ``category``.

Left out and counted: second-turn records (their prompt is a whole conversation, not one answer)
and records whose prompt lacks the markers. FastChat writes ``score = -1`` when it could not parse a
rating: such a row is kept without a score, with that reason in ``judge_error``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from judgebias.importers._lmsys import field, where_error
from judgebias.tables.files import iter_jsonl
from judgebias.tables.pairwise import Exclusions
from judgebias.tables.pointwise import validate_pointwise

_QUESTION = re.compile(r"\[Question\]\n(.*?)\n\n\[The Start of ", re.DOTALL)
_ANSWER = re.compile(
    r"\[The Start of Assistant's Answer\]\n(.*)\n\[The End of Assistant's Answer\]", re.DOTALL
)
_REFERENCE = re.compile(
    r"\[The Start of Reference Answer\]\n(.*?)\n\[The End of Reference Answer\]", re.DOTALL
)
CRITERION = {"single-v1": "overall quality", "single-math-v1": "correctness"}
NO_RATING = "FastChat could not parse a rating (score -1)"


def _categories(src: Path) -> dict[int, str]:
    questions = src.parent.parent / "question.jsonl"
    if not questions.is_file():
        return {}
    return {int(q["question_id"]): str(q.get("category", "")) for _, q in iter_jsonl(questions)}


def import_mt_bench_single(src: Path | str, **_: object) -> tuple[pd.DataFrame, Exclusions]:
    """One pointwise row per (question, model, judge) of the first turn."""
    src = Path(src)
    categories = _categories(src)
    exclusions = Exclusions()
    rows = []
    for line, rec in iter_jsonl(src):
        where = f"{src}|{line}"
        qid, model = field(rec, "question_id", where), str(field(rec, "model", where))
        judge_field = field(rec, "judge", where)
        judge, prompt_name = (
            ([*judge_field, "", ""])[:2] if isinstance(judge_field, list) else (judge_field, "")
        )
        if int(rec.get("turn", 1)) != 1:
            exclusions.add("second turn (a conversation, not one answer)", example=f"{qid}/{model}")
            continue
        text = str(field(rec, "user_prompt", where))
        question, answer = _QUESTION.search(text), _ANSWER.search(text)
        if question is None or answer is None:
            exclusions.add("user_prompt without the single-answer markers", example=f"{qid}/{model}")
            continue
        reference = _REFERENCE.search(text)
        try:
            score = float(field(rec, "score", where))
        except (TypeError, ValueError):
            raise where_error(where, f"field 'score': {rec.get('score')!r} is not a number") from None
        parsed = score != -1
        if not parsed:
            exclusions.add(NO_RATING, example=f"{qid}/{model}")
        rows.append(
            {
                "item_id": f"mt-bench/{qid}/{model}/turn1",
                "prompt": question.group(1),
                "response": answer.group(1),
                "generator": model,
                "judge": str(judge),
                "score": score if parsed else math.nan,
                "score_argmax": score if parsed else math.nan,
                "score_dist": None,
                "scale_min": 1,
                "scale_max": 10,
                "criterion": CRITERION.get(prompt_name, prompt_name),
                "human_scores": [],
                "reference": reference.group(1) if reference else None,
                "template_version": prompt_name,
                "score_source": "parsed" if parsed else None,
                "judge_error": None if parsed else NO_RATING,
                "raw_output": str(rec.get("judgment", "")),
                "question_id": int(qid),
                "category": categories.get(int(qid), ""),
            }
        )
    if not rows:
        raise where_error(f"{src}|1", "no first-turn single-answer judgment in the file")
    table, _ = validate_pointwise(pd.DataFrame(rows), source=str(src))
    return table, exclusions


__all__ = ["import_mt_bench_single"]
