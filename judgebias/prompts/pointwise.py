"""Pointwise (absolute-score) judge prompts: one response, one score on a fixed integer scale.

- ``mtbench-single`` / ``mtbench-single-ref``: MT-bench single-answer grading, 1-10, the judge
  explains and ends with "Rating: [[5]]". The text is copied unchanged from lm-sys/FastChat
  ``fastchat/llm_judge/data/judge_prompts.jsonl`` (``single-v1`` and ``single-math-v1``; Copyright
  LMSYS, Apache License 2.0, see judgebias/data/LICENSE.mt_bench).
- ``rubric-5`` / ``rubric-5-ref`` / ``rubric-5-direct``: an absolute rubric in the style of
  Prometheus (Kim et al. 2024): feedback first, then "[RESULT] N" with N in 1..5, against a score
  rubric and, in the ``-ref`` variant, a reference answer that would score 5; ``-direct`` forces the
  answer to start at "[RESULT]" (no feedback generated). The wording is this project's own.
- ``criteria-5``: one criterion per call (1-5, "[RESULT] N"): the judge grades the response on the
  row's criterion alone; several criteria are several judgments, one row each. The wording is this
  project's own.

A template's ``marker`` is the text after which the score is read; the score distribution is read
at the token after it (``judgebias.engine.pointwise``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from judgebias.backends.protocol import Prompt

Builder = Callable[[str, str, "str | None", str], Prompt]  # (query, response, reference, criterion)


@dataclass(frozen=True)
class PointwiseTemplate:
    """A pointwise judging prompt: integer scores ``scale_min``..``scale_max`` written after
    ``marker``; ``needs_reference`` templates fail on an item without a reference answer."""

    name: str
    version: str
    description: str
    scale_min: int
    scale_max: int
    marker: str
    needs_reference: bool
    criterion: str
    builder: Builder
    source: str = ""
    # False: no explanation is generated; the answer is forced to start with ``answer_prefix`` and
    # the score read right after it (for judges too small to keep the format over an explanation).
    explain_first: bool = True
    answer_prefix: str = ""
    # The score IDs the judge writes for scale_min..scale_max, in order ("A".."E"); empty: the
    # integers themselves. A read score is always the integer of its position on the scale.
    labels: tuple[str, ...] = ()
    # The prompt shows a score rubric ("Score k: ...") built by ``rubric_prompt``: the pointwise
    # probes (``judgebias.prompts.pointwise_variants``) can vary it.
    has_rubric: bool = False

    def score_labels(self) -> tuple[str, ...]:
        """What the judge writes for each score, scale_min first."""
        return self.labels or tuple(str(k) for k in range(self.scale_min, self.scale_max + 1))

    def label_value(self, label: str) -> float | None:
        """The score a written ID stands for (a number as itself), None when it is no score ID."""
        if self.labels:
            return float(self.scale_min + self.labels.index(label)) if label in self.labels else None
        try:
            return float(label)
        except ValueError:
            return None

    def tag(self, chat: bool) -> str:
        return f"{self.name}@{self.version}:{'chat' if chat else 'fewshot'}"

    def build(
        self,
        query: str,
        response: str,
        reference: str | None = None,
        *,
        criterion: str | None = None,
        chat: bool = True,
    ) -> Prompt:
        if not chat:
            raise ValueError(
                f"template {self.name!r} has no pre-trained (few-shot, no chat template) variant"
            )
        if self.needs_reference and not reference:
            raise ValueError(f"template {self.name!r} needs a reference answer (column 'reference')")
        return self.builder(query, response, reference, criterion or self.criterion)


MTBENCH_SYSTEM = "You are a helpful assistant."

SINGLE_V1 = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an "
    "AI assistant to the user question displayed below. Your evaluation should consider factors such as the "
    "helpfulness, relevance, accuracy, depth, creativity, and level of detail of the response. Begin your "
    "evaluation by providing a short explanation. Be as objective as possible. After providing your "
    "explanation, you must rate the response on a scale of 1 to 10 by strictly following this format: "
    '"[[rating]]", for example: "Rating: [[5]]".\n\n[Question]\n{question}\n\n[The Start of Assistant\'s '
    "Answer]\n{answer}\n[The End of Assistant's Answer]"
)

SINGLE_MATH_V1 = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an "
    "AI assistant to the user question displayed below. Your evaluation should consider correctness and "
    "helpfulness. You will be given a reference answer and the assistant's answer. Begin your evaluation by "
    "comparing the assistant's answer with the reference answer. Identify and correct any mistakes. Be as "
    "objective as possible. After providing your explanation, you must rate the response on a scale of 1 to "
    '10 by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".\n\n[Question]\n'
    "{question}\n\n[The Start of Reference Answer]\n{ref_answer_1}\n[The End of Reference Answer]\n\n"
    "[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
)


def _single(query: str, response: str, reference: str | None, criterion: str) -> Prompt:
    return Prompt.chat(
        ("system", MTBENCH_SYSTEM), ("user", SINGLE_V1.format(question=query, answer=response))
    )


def _single_ref(query: str, response: str, reference: str | None, criterion: str) -> Prompt:
    user = SINGLE_MATH_V1.format(question=query, ref_answer_1=reference, answer=response)
    return Prompt.chat(("system", MTBENCH_SYSTEM), ("user", user))


RUBRIC_SYSTEM = "You grade one response against a score rubric and give {score} from {low} to {high}."

HELPFULNESS_RUBRIC = (
    "Does the response do what the user asked, correctly and usefully?\n"
    "Score 1: The response ignores the request or is wrong or harmful throughout.\n"
    "Score 2: The response touches the request but is mostly wrong, off-topic or unusable.\n"
    "Score 3: The response answers part of the request; it has clear errors or gaps.\n"
    "Score 4: The response answers the request correctly with minor gaps or unclear parts.\n"
    "Score 5: The response answers the request fully, correctly and clearly."
)

_RUBRIC_TASK = (
    "###Task:\nRead the instruction, the response to grade{ref_note} and the score rubric. Write short "
    "feedback that judges the response strictly by the rubric, not in general. Then give {score} "
    'from {low} to {high}. End with exactly this format: "Feedback: (your feedback) [RESULT] ({one} from '
    '{low} to {high})". Write nothing after the score.\n\n###Instruction:\n{question}\n\n'
    "###Response to grade:\n{answer}\n\n{reference_block}###Score rubric:\n{rubric}\n\n###Feedback:"
)


@dataclass(frozen=True)
class RubricWords:
    """How a rubric prompt names its scores: ``score`` ("an integer score") and ``one`` ("an
    integer") from ``low`` to ``high``; ``reference_score``: what the reference answer is said to
    score (None: no reference shown)."""

    score: str = "an integer score"
    one: str = "an integer"
    low: str = "1"
    high: str = "5"
    reference_score: str | None = None


def rubric_prompt(
    query: str, response: str, reference: str | None, rubric: str, words: RubricWords
) -> Prompt:
    """The Prometheus-style rubric prompt of this project, in the words of ``words``."""
    block = ref_note = ""
    if words.reference_score is not None:
        block = f"###Reference answer (it would score {words.reference_score}):\n{reference}\n\n"
        ref_note = ", a reference answer"
    user = _RUBRIC_TASK.format(
        ref_note=ref_note, question=query, answer=response, reference_block=block, rubric=rubric,
        score=words.score, one=words.one, low=words.low, high=words.high,
    )
    system = RUBRIC_SYSTEM.format(score=words.score, low=words.low, high=words.high)
    return Prompt.chat(("system", system), ("user", user))


def _rubric(query: str, response: str, reference: str | None, criterion: str) -> Prompt:
    return rubric_prompt(query, response, reference, criterion, RubricWords())


def _rubric_ref(query: str, response: str, reference: str | None, criterion: str) -> Prompt:
    return rubric_prompt(query, response, reference, criterion, RubricWords(reference_score="5"))


CRITERION_SYSTEM = "You grade one response on one criterion only and give an integer score from 1 to 5."

_CRITERION_TASK = (
    "###Task:\nRead the instruction and the response to grade. Grade the response on this ONE criterion "
    "only: {criterion}. Every other quality of the response (its length, its style, how it does on any "
    "other criterion) must not change the score. Write short feedback about the criterion, then give an "
    'integer score from 1 (the criterion is not met at all) to 5 (it is fully met). End with exactly this '
    'format: "Feedback: (your feedback) [RESULT] (an integer from 1 to 5)". Write nothing after the '
    "score.\n\n###Instruction:\n{question}\n\n###Response to grade:\n{answer}\n\n###Criterion:\n"
    "{criterion}\n\n###Feedback:"
)


def _criterion(query: str, response: str, reference: str | None, criterion: str) -> Prompt:
    user = _CRITERION_TASK.format(question=query, answer=response, criterion=criterion)
    return Prompt.chat(("system", CRITERION_SYSTEM), ("user", user))


# The two score formats: MT-bench's "Rating: [[k]]", k in 1..10, and this project's Prometheus-style
# "[RESULT] k", k in 1..5.
_MTBENCH_SCALE = {"scale_min": 1, "scale_max": 10, "marker": "[["}
_RESULT_SCALE = {"scale_min": 1, "scale_max": 5, "marker": "[RESULT]"}


def _direct(base: PointwiseTemplate, answer_prefix: str, description: str, source: str) -> PointwiseTemplate:
    """``base`` with the answer forced to start with ``answer_prefix``: nothing is generated before
    the score, whose distribution is read at once (``<name>-direct``, version ``<version>-direct``)."""
    return replace(base, name=f"{base.name}-direct", version=f"{base.version}-direct",
                   description=description, source=source, explain_first=False, answer_prefix=answer_prefix)


MTBENCH_SINGLE = PointwiseTemplate(
    name="mtbench-single",
    version="single-v1",
    description="MT-bench single-answer grading (FastChat single-v1): explain, then 'Rating: [[k]]', k in "
    "1..10. The score distribution is read at the token after the last '[['.",
    **_MTBENCH_SCALE,
    needs_reference=False,
    criterion="overall quality",
    builder=_single,
    source="lm-sys/FastChat judge_prompts.jsonl, single-v1 (Apache-2.0)",
)

# A "-ref" template is its base's grading against a reference answer.
MTBENCH_SINGLE_REF = replace(
    MTBENCH_SINGLE,
    name="mtbench-single-ref",
    version="single-math-v1",
    description="MT-bench single-answer grading against a reference answer (FastChat single-math-v1), 1..10.",
    needs_reference=True,
    criterion="correctness",
    builder=_single_ref,
    source="lm-sys/FastChat judge_prompts.jsonl, single-math-v1 (Apache-2.0)",
)

RUBRIC_5 = PointwiseTemplate(
    name="rubric-5",
    version="1",
    description="Absolute rubric grading in the style of Prometheus: feedback, then '[RESULT] k', k in 1..5; "
    "the criterion column (default: a helpfulness rubric) is the rubric shown.",
    **_RESULT_SCALE,
    needs_reference=False,
    criterion=HELPFULNESS_RUBRIC,
    builder=_rubric,
    source="this project (format after Kim et al. 2024, Prometheus 2)",
    has_rubric=True,
)

RUBRIC_5_REF = replace(
    RUBRIC_5,
    name="rubric-5-ref",
    description="rubric-5 with a reference answer that would score 5 (column 'reference').",
    needs_reference=True,
    builder=_rubric_ref,
)

RUBRIC_5_DIRECT = _direct(
    RUBRIC_5, "[RESULT]",
    description="rubric-5 with the answer forced to start '[RESULT]': no feedback is generated, the "
    "score distribution is read at once (for judges too small to keep the format). Needs "
    "log-probabilities.",
    source="this project (format after Kim et al. 2024, Prometheus 2), answer prefix by this project",
)

MTBENCH_SINGLE_DIRECT = _direct(
    MTBENCH_SINGLE, "Rating: [[",
    description="MT-bench single-v1 with the answer forced to start 'Rating: [[': no explanation is "
    "generated, the score distribution is read at once (one forward pass per read; for judges too "
    "small to keep the format over an explanation). Needs log-probabilities.",
    source="lm-sys/FastChat judge_prompts.jsonl, single-v1 (Apache-2.0), answer prefix by this project",
)

CRITERIA_5 = PointwiseTemplate(
    name="criteria-5",
    version="1",
    description="One criterion per call (multi-criteria scoring as separate judgments, after G-Eval's "
    "per-criterion prompts): feedback on that criterion alone, then '[RESULT] k', k in 1..5. The criterion "
    "comes from the row's criterion column or --criterion (repeatable: one row per item and criterion).",
    **_RESULT_SCALE,
    needs_reference=False,
    criterion="helpfulness",
    builder=_criterion,
    source="this project (format after Kim et al. 2024, Prometheus 2; one criterion per call after Liu et "
    "al. 2023, G-Eval)",
)

CRITERIA_5_DIRECT = _direct(
    CRITERIA_5, "[RESULT]",
    description="criteria-5 with the answer forced to start '[RESULT]': no feedback is generated, the "
    "score distribution is read at once (for judges too small to keep the format over an explanation; "
    "SmolLM2-135M writes no '[RESULT]' after its feedback). Needs log-probabilities.",
    source="this project, answer prefix as mtbench-single-direct",
)

POINTWISE_TEMPLATES: dict[str, PointwiseTemplate] = {
    t.name: t
    for t in (MTBENCH_SINGLE, MTBENCH_SINGLE_REF, MTBENCH_SINGLE_DIRECT, RUBRIC_5, RUBRIC_5_REF,
              RUBRIC_5_DIRECT, CRITERIA_5, CRITERIA_5_DIRECT)
}


def pointwise_template(name: str) -> PointwiseTemplate:
    try:
        return POINTWISE_TEMPLATES[name]
    except KeyError:
        raise ValueError(
            f"unknown pointwise template {name!r}; known: {', '.join(POINTWISE_TEMPLATES)}"
        ) from None
