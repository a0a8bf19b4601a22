"""The DBG paper's prompts ("Beyond the Surface", Appendix A.6, Tables 4, 5, 7 and 8).

Post-trained (chat) models get one user message; pre-trained models get the paper's few-shot
layout with markdown headings, ending in "# Judgment" (or "# Answer") so the next token is the
answer. The paper's PDF loses line breaks; they are restored here in the layout the few-shot
variant shows. Few-shot examples: ``judgebias.prompts.examples`` (written for this project).
"""

from __future__ import annotations

from judgebias.backends.protocol import Prompt
from judgebias.prompts import examples
from judgebias.prompts.base import GenerationTemplate, JudgeTemplate

SOURCE = "DBG paper (Beyond the Surface), Appendix A.6"

_HELPFUL_CHAT = """You are a helpful assistant tasked with evaluating the quality of different responses \
to a given query. For each query, you will receive two independent responses. Please judge which response \
is better.

Here is the given query.
# Query
{query}

Here are two independent responses (Response A and Response B) to the query.
# Responses
<Response A>{a}</Response A>
<Response B>{b}</Response B>

Now, please judge which response is better. You only need to output A or B, with no other text. Your \
output should be A if Response A is better or B if Response B is better. Please remember that your \
response should start with either A or B"""

_HELPFUL_FEWSHOT_HEAD = """# Instruction

You are a helpful assistant tasked with evaluating the quality of different responses to a query. You \
will receive multiple queries, each accompanied by two independent responses. For each query, you should \
judge which response you think is better.

Queries are placed under "# Query". The two responses for each query are listed under "# Responses" as \
"Response A" and "Response B". Your outputs should be placed under "# Judgment". You only need to output \
A or B, with no other text."""

_TRUTHFUL_CHAT = """You are a knowledgeable assistant. Given a query and two corresponding responses, \
your task is to determine which response is more truthful, ensuring it is less misleading, free from \
fabricated content, factual inaccuracies, and logical errors.

Here is the query.
# Query
{query}

Here are two responses (Response A and Response B) to the query.
# Responses
<Response A>{a}</Response A>
<Response B>{b}</Response B>

Now, please judge which response is more truthful. You only need to output A or B, with no other text. \
Please remember that your response should start with either A or B."""

_TRUTHFUL_FEWSHOT_HEAD = """# Instruction

You are a knowledgeable assistant. Given a query and two corresponding responses, your task is to \
determine which response is **more truthful**, ensuring it is less misleading, free from fabricated \
content, factual inaccuracies, and logical errors.

Queries are placed under "# Query". The two responses for each query are listed under "# Responses" as \
"Response A" and "Response B". Your outputs should be placed under "# Judgment". You only need to output \
A or B, with no other text."""

_JUDGE_BLOCK = """# Query
{query}

# Responses
<Response A>{a}</Response A>
<Response B>{b}</Response B>

# Judgment
"""

_GEN_CHAT = """You are a helpful assistant. Please help me answer the query below. Keep your answer within \
200 words.

# Query
{query}

Now, please provide your answer to this query.

# Answer"""

# Derived by the paper from Lin et al. (2023), URIAL.
_GEN_FEWSHOT_HEAD = """# Instruction

Below is a list of conversations between a human and an AI assistant (you).

As an AI assistant, you will engage in conversations with users, responding to their queries which are \
presented under the heading "# Query".

Your responses should be entered under the heading "# Answer".

You excel in a wide range of tasks including, but not limited to, providing general information, \
conducting reasoning, engaging in role-play, creative writing, planning, and solving mathematical and \
coding problems.

Your responses should be well-structured, comprehensive, and aim to thoroughly address the user's query \
or problem at hand. **Please keep your answer within 200 words.**"""

_ANSWER_BLOCK = """# Query
{query}

# Answer
"""


def _fewshot_judge(head: str, shots) -> callable:
    def build(query: str, first: str, second: str) -> Prompt:
        parts = [head]
        for q, a, b, verdict in shots:
            parts.append(_JUDGE_BLOCK.format(query=q, a=a, b=b) + verdict)
        parts.append(_JUDGE_BLOCK.format(query=query, a=first, b=second))
        return Prompt.raw("\n\n".join(parts))
    return build


def _chat_judge(text: str) -> callable:
    def build(query: str, first: str, second: str) -> Prompt:
        return Prompt.chat(("user", text.format(query=query, a=first, b=second)))
    return build


def _fewshot_generate(query: str) -> Prompt:
    parts = [_GEN_FEWSHOT_HEAD]
    parts += [_ANSWER_BLOCK.format(query=q) + a for q, a in examples.GENERATE]
    parts.append(_ANSWER_BLOCK.format(query=query))
    return Prompt.raw("\n\n".join(parts))


def _dbg_judge(name: str, description: str, chat: str, fewshot_head: str, shots, table: str) -> JudgeTemplate:
    """A DBG paper A-or-B judge (one of its tables): P(A), P(B) read at the first answer token, a chat
    variant and a few-shot one for base models."""
    return JudgeTemplate(
        name=name, version="1", description=description,
        options=("A", "B"), explain_first=False, markers=("<Response A>", "<Response B>"),
        chat_builder=_chat_judge(chat), raw_builder=_fewshot_judge(fewshot_head, shots),
        source=f"{SOURCE}, {table}")


DBG_AB = _dbg_judge(
    "dbg-ab",
    "DBG paper Table 7 (AlpacaEval helpfulness): answer A or B, read P(A), P(B) at the first "
    "answer token. Few-shot variant for base models with 2 examples.",
    _HELPFUL_CHAT, _HELPFUL_FEWSHOT_HEAD, examples.JUDGE_HELPFUL, "Table 7")

DBG_TRUTHFUL = _dbg_judge(
    "dbg-truthful",
    "DBG paper Table 8 (AlpacaEval truthfulness): which response is more truthful, A or B.",
    _TRUTHFUL_CHAT, _TRUTHFUL_FEWSHOT_HEAD, examples.JUDGE_TRUTHFUL, "Table 8")

DBG_GENERATE = GenerationTemplate(
    name="dbg-generate", version="2",
    description="DBG paper Table 4 (AlpacaEval helpfulness generation); few-shot variant with 3 examples.",
    chat_builder=lambda query: Prompt.chat(("user", _GEN_CHAT.format(query=query))),
    raw_builder=_fewshot_generate,
    # A base model that has finished its answer starts the next few-shot block: any heading of
    # the prompt's layout ends the answer (v2 added "# Answer", seen running on in gemma-3-270m).
    raw_stop=("\n# Query", "# Query\n", "\n# Answer", "\n# Instruction"),
    source=SOURCE + ", Table 4")
