"""MT-bench's pairwise judge prompt ``pair-v2``: explain first, then "[[A]]", "[[B]]" or "[[C]]".

The text is copied unchanged from lm-sys/FastChat ``fastchat/llm_judge/data/judge_prompts.jsonl``
(Copyright LMSYS, Apache License 2.0; see https://www.apache.org/licenses/LICENSE-2.0). It is the
judge prompt of the self-preference paper (Wataoka et al. 2024).
"""

from __future__ import annotations

from judgebias.backends.protocol import Prompt
from judgebias.prompts.base import JudgeTemplate

SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI "
    "assistants to the user question displayed below. You should choose the assistant that follows the "
    "user's instructions and answers the user's question better. Your evaluation should consider factors "
    "such as the helpfulness, relevance, accuracy, depth, creativity, and level of detail of their "
    "responses. Begin your evaluation by comparing the two responses and provide a short explanation. "
    "Avoid any position biases and ensure that the order in which the responses were presented does not "
    "influence your decision. Do not allow the length of the responses to influence your evaluation. Do "
    "not favor certain names of the assistants. Be as objective as possible. After providing your "
    'explanation, output your final verdict by strictly following this format: "[[A]]" if assistant A is '
    'better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.'
)

USER = (
    "[User Question]\n{question}\n\n[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant "
    "A's Answer]\n\n[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)


def _chat(query: str, first: str, second: str) -> Prompt:
    user = USER.format(question=query, answer_a=first, answer_b=second)
    return Prompt.chat(("system", SYSTEM), ("user", user))


MTBENCH_PAIR = JudgeTemplate(
    name="mtbench-pair", version="pair-v2",
    description="MT-bench pair-v2 (FastChat): the judge explains, then ends with [[A]], [[B]] or [[C]] "
                "(tie). P(A), P(B), P(C) are read at the token after '[['. Chat models only.",
    options=("A", "B", "C"), explain_first=True,
    markers=("[The Start of Assistant A's Answer]\n", "[The Start of Assistant B's Answer]\n"),
    chat_builder=_chat, raw_builder=None,
    source="lm-sys/FastChat judge_prompts.jsonl, pair-v2 (Apache-2.0)")
