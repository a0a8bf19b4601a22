"""A judgebias judge as an ``mlflow.genai`` scorer (issue 35, item 3).

``pairwise_scorer(backend, template)`` wraps any judgebias backend (local model or endpoint; wrap it
in ``judgebias.backends.call_cache.CachedBackend`` to reuse answers) so ``mlflow.genai.evaluate(data,
scorers=[...])`` judges each row in BOTH presentation orders, with P(A) from the option
probabilities, and records one feedback per row: value ``a``/``b``/``tie``, source LLM_JUDGE named
after the judge, P(A) per order and the per-order verdicts in its metadata. ``judgebias import
mlflow --judge-assessment NAME`` reads those back (the verdict; P(A) stays in the metadata).

A row gives the pair as ``inputs`` ``{"prompt", "response_a", "response_b"}``, or the prompt in
``inputs`` and the two responses in ``outputs`` (``{"response_a", "response_b"}``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from judgebias.engine.pairwise import judge_pairs
from judgebias.prompts import DBG_AB
from judgebias.tables.records import Pair

FIELDS = ("prompt", "response_a", "response_b")


def _pair(inputs: Any, outputs: Any) -> Pair:
    fields: dict[str, Any] = {}
    for part in (outputs, inputs):
        if isinstance(part, Mapping):
            fields.update({k: part[k] for k in FIELDS if k in part})
    missing = [k for k in FIELDS if not isinstance(fields.get(k), str) or not fields[k].strip()]
    if missing:
        raise ValueError(f"the row has no text for {missing}: give inputs {{'prompt', 'response_a', "
                         "'response_b'}} (or the responses in outputs)")
    prompt, a, b = (fields[k] for k in FIELDS)
    return Pair(pair_id=Pair.make_id(prompt, a, b), prompt=prompt, response_a=a, response_b=b)


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def pairwise_scorer(backend: Any, template: Any = DBG_AB, *, judge: str | None = None,
                    name: str | None = None) -> Any:
    """The scorer; its name (the feedback's name) defaults to the judge's, so several judges can
    score one evaluation side by side."""
    from mlflow.entities import AssessmentSource, AssessmentSourceType, Feedback
    from mlflow.genai.scorers import scorer

    judge = judge or backend.name
    source = AssessmentSource(AssessmentSourceType.LLM_JUDGE, judge)

    def judgebias_pairwise(inputs: Any = None, outputs: Any = None) -> Feedback:
        pair = _pair(inputs, outputs)
        result = judge_pairs([pair], backend, template, judge=judge)
        row = result.rows[0]
        p_a = row.get("p_a")
        verdict = row.get("verdict")
        if verdict is None and p_a is not None and not math.isnan(p_a):
            verdict = "a" if p_a > 0.5 else "b" if p_a < 0.5 else "tie"
        metadata = {k: _text(row.get(k)) for k in ("p_a", "p_a_ab", "p_a_ba", "verdict_ab", "verdict_ba")}
        if verdict is None:
            reason = "; ".join(j.error for j in result.judgments if j.error) or "no verdict"
            from mlflow.entities import AssessmentError

            return Feedback(error=AssessmentError(error_code="NO_VERDICT", error_message=reason),
                            source=source, metadata=metadata)
        return Feedback(value=verdict, source=source, metadata=metadata,
                        rationale=f"P(A) {_text(p_a)} (A shown first {metadata['p_a_ab']}, "
                                  f"second {metadata['p_a_ba']})")

    return scorer(judgebias_pairwise, name=name or judge)
