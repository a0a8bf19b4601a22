"""MT-Bench human judgments (``lmsys/mt_bench_human_judgments``): split ``human`` (expert and
author votes) and split ``gpt4_pair`` (GPT-4's pairwise verdicts, both presentation orders
already combined by MT-Bench) on the same (question, model pair, turn).

* One pair per (question_id, unordered model pair, turn):
  ``pair_id`` = ``mt-bench/<question_id>/<model 1>__<model 2>/turn<turn>`` with the two model
  names sorted, and A = the alphabetically first model. A row that lists the models the other way
  round has its texts and winner swapped to match, so votes on the same comparison collapse.
* Rows whose ``judge`` names GPT-4 (``gpt4_pair``, ``gpt-4``...) become judge rows with
  ``judge`` = ``judge_name`` (default ``gpt-4``). MT-Bench's ``tie (inconsistent)`` (the two
  orders disagreed) is a tie, counted as recoded and flagged in ``order_inconsistent``.
* Every other row is a human vote: its label joins the pair's ``human`` list (several annotators
  per pair), its annotator id joins ``annotators``. A pair no LLM judged is a human-only row.
* Multi-turn rendering as in ``judgebias.importers._lmsys``.

Source: ``hf:lmsys/mt_bench_human_judgments`` (splits ``human`` and ``gpt4_pair``; ``split``
selects) or a local JSONL/JSON/Parquet file with the same columns (the judge column tells the
two kinds apart, so one file may hold both).
"""

from __future__ import annotations

import re
from pathlib import Path

from judgebias.importers._common import RECODED, finish, text_problem
from judgebias.importers._lmsys import field, read_rows, render_pair, where_error
from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import Exclusions

REPO = "lmsys/mt_bench_human_judgments"
SPLITS = ["human", "gpt4_pair"]
_LLM_JUDGE = re.compile(r"^gpt-?4", re.IGNORECASE)
_FLIP = {"a": "b", "b": "a", "tie": "tie"}


def import_mt_bench_human(src: Path | str, split: list[str] | None = None, turns: str = "all",
                          judge_name: str = "gpt-4", **_: object):
    """Import MT-Bench human and GPT-4 pairwise judgments, one row per (pair, LLM judge)."""
    exclusions = Exclusions()
    pairs: dict[str, dict] = {}
    judged: dict[str, dict] = {}
    for where, rec in read_rows(src, REPO, split, SPLITS):
        qid = field(rec, "question_id", where)
        model_a, model_b = field(rec, "model_a", where), field(rec, "model_b", where)
        for name, value in (("model_a", model_a), ("model_b", model_b)):
            if text_problem(value):
                raise where_error(where, f"field {name!r}: {value!r} is not a model name")
        annotator = str(field(rec, "judge", where))
        raw = str(field(rec, "winner", where)).strip().lower()
        inconsistent = raw == "tie (inconsistent)"
        try:
            winner = "tie" if inconsistent else normalize_label(raw)
        except ValueError as exc:
            raise where_error(where, f"field 'winner': {exc}") from None
        if winner is None:
            exclusions.add("winner_missing", example=where)
            continue
        rendered = render_pair(rec, where, turns)
        if isinstance(rendered, str):
            exclusions.add(rendered, example=where)
            continue
        prompt, resp_a, resp_b = rendered
        if model_b < model_a:
            model_a, model_b, resp_a, resp_b, winner = model_b, model_a, resp_b, resp_a, _FLIP[winner]
        turn = int(rec["turn"])
        pair_id = f"mt-bench/{qid}/{model_a}__{model_b}/turn{turn}"
        pair = pairs.get(pair_id)
        if pair is None:
            pair = pairs[pair_id] = {
                "pair_id": pair_id, "prompt": prompt, "response_a": resp_a, "response_b": resp_b,
                "generator_a": model_a, "generator_b": model_b, "human": [], "annotators": [],
                "question_id": qid, "turn": turn, "source": "mt-bench-human",
            }
        elif (pair["prompt"], pair["response_a"], pair["response_b"]) != (prompt, resp_a, resp_b):
            exclusions.add("texts_differ_from_earlier_row_of_same_pair", example=where)
            continue
        if _LLM_JUDGE.match(annotator):
            if inconsistent:
                exclusions.add(f"{RECODED}verdict_tie_inconsistent")
            if pair_id in judged:
                exclusions.add("duplicate_llm_judgment", example=where)
                continue
            # The release folds GPT-4's two orders itself (an inconsistent pair is a tie).
            judged[pair_id] = {"judge": judge_name, "verdict": winner, "fold_rule": "agree-else-tie",
                               "order_inconsistent": inconsistent,
                               "raw_judge": annotator}
        else:
            pair["human"].append(winner)
            pair["annotators"].append(annotator)
    rows = [{**pair, **judged.get(pid, {"judge": None})} for pid, pair in pairs.items()]
    return finish(rows, str(src), exclusions)
