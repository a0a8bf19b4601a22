"""Pointwise judging: one response -> one score, through the same backends, cache and
explain-first reading as pairwise judging (``judgebias.engine.pairwise``).

The judge writes its explanation and then the score after the template's marker ("[[" for
MT-bench, "[RESULT]" for the rubric). The prompt is then scored again with the generated text up to
the marker as the answer prefix, and the score tokens are the options of ``Backend.score_options``:
each score's probability is summed over the tokenizer's variants of its token (" 7", "7", "7]]"),
exactly as P(A) is for option letters. The score is the expected value of that distribution; the
distribution and its argmax are kept.

Two digits ("10" on a 1-10 scale). Most tokenizers (SmolLM2, Qwen, Llama 2, Gemma) write "10" as
"1" then "0", and an option token "1" never includes "10" (a variant must not continue with a
digit). The first read covers the single digits 1..9; a second read at the prefix "...[[1" gives
q = P("0" | "1"), and the mass of "1" is split: P(1) = P("1")(1 - q), P(10) = P("1") q. A
tokenizer with one "10" token (tiktoken-style) puts that mass outside the nine digits: the
distribution is then conditional on a one-digit first token (``mass`` shows how much was read).

Without probabilities (an API without log-probabilities, score tokens outside its top
log-probabilities, a failed second read) the score is the integer parsed from the text, marked
``score_source = "parsed"`` and counted under its reason; nothing is ever filled with a default.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from judgebias.backends.kinds import uses_chat
from judgebias.backends.protocol import Backend, Generation, GenerationParams, OptionScores, Prompt
from judgebias.engine.pairwise import (
    JudgeResult,
    Progress,
    for_template,
    generate_all,
    score_all,
    strip_think,
)
from judgebias.prompts.pointwise import PointwiseTemplate
from judgebias.tables.pairwise import Exclusions

PARSED_NO_LOGPROBS = "score parsed from the text: the endpoint gave no log-probabilities"
PARSED_BOUNDS = "score parsed from the text: score tokens outside the endpoint's top log-probs"
PARSED_READ_FAILED = "score parsed from the text: the score distribution could not be read"


# Deliberate parallel: ScoreItem is records.Pair's pointwise counterpart (one response, not two),
# with the same kinds of fields and the same content-derived id.
@dataclass(frozen=True)
class ScoreItem:
    """One response to score. ``item_id`` is stable: a hash of prompt and response by default."""

    item_id: str
    prompt: str
    response: str
    generator: str | None = None
    reference: str | None = None
    human_scores: tuple[float, ...] = ()
    criterion: str | None = None

    @staticmethod
    def make_id(prompt: str, response: str) -> str:
        return hashlib.sha256(f"{prompt}\x00{response}".encode()).hexdigest()[:16]


@dataclass
class ScoreRead:
    """What one judgment gave: the distribution over the scale (None when only parsed), the
    parsed integer, where the score came from, the options' probability mass, or an error."""

    dist: list[float] | None = None
    parsed: float | None = None
    source: str | None = None
    mass: float = math.nan
    reason: str | None = None
    error: str | None = None
    raw: str = ""
    usage: dict = field(default_factory=dict)


def _score_pattern(marker: str, labels: Sequence[str] = ()) -> re.Pattern:
    score = "(" + "|".join(re.escape(x) for x in labels) + r")\b" if labels else r"(\d+(?:\.\d+)?)"
    if marker == "[[":
        return re.compile(r"\[\[\s*" + score + r"\s*\]\]")
    return re.compile(re.escape(marker) + r"\s*" + score)


def find_score(
    text: str, marker: str, labels: Sequence[str] = ()
) -> tuple[int | None, float | None, str | None]:
    """(position just after the final marker, the score written after it or None, error).
    ``labels``: the template's score IDs ("A".."E"; the k-th is score k); empty: integers.

    The last well-formed score wins (the explanation may quote the format, "Rating: [[5]]");
    failing that, the last bare marker, whose score is then read from the probabilities."""
    body, offset, error = strip_think(text)
    if error:
        return None, None, error
    matches = list(_score_pattern(marker, labels).finditer(body))
    if matches:
        m = matches[-1]
        value = labels.index(m.group(1)) + 1.0 if labels else float(m.group(1))
        return offset + m.start() + len(marker), value, None
    pos = body.rfind(marker)
    if pos < 0:
        return None, None, f"off-format: no score after {marker!r}"
    return offset + pos + len(marker), None, None


def raw_probability(scores: OptionScores, option: str) -> float:
    """The unnormalized probability of ``option`` (normalized share x options' mass); an option
    outside an endpoint's top log-probs counts 0 (it is below the smallest listed one)."""
    if scores.error or math.isnan(scores.mass):
        return math.nan
    p = scores.probs.get(option, math.nan)
    if not math.isnan(p):
        return p * scores.mass
    if scores.bounds and option in scores.bounds:
        low, high = scores.bounds[option]
        return high * scores.mass if low > 0 else 0.0
    return math.nan


def digit_options(template: PointwiseTemplate) -> tuple[str, ...]:
    """The score tokens read at the answer position: the template's score IDs, else the digits."""
    if template.labels:
        return template.labels
    return tuple(str(k) for k in range(template.scale_min, min(template.scale_max, 9) + 1))


def combine(
    template: PointwiseTemplate, first: OptionScores, ten: OptionScores | None
) -> tuple[list[float] | None, float, str | None]:
    """(distribution over scale_min..scale_max, mass of the first read, reason when unusable)."""
    if first.error:
        return None, math.nan, first.error
    if first.verdict_only:
        return None, first.mass, PARSED_NO_LOGPROBS
    if first.bounds:
        return None, first.mass, PARSED_BOUNDS
    options = digit_options(template)
    probs = [first.probs.get(o, math.nan) for o in options]
    if any(math.isnan(p) for p in probs):
        return None, first.mass, PARSED_READ_FAILED
    if template.scale_max < 10 or template.labels:
        return probs, first.mass, None
    q = math.nan if ten is None else raw_probability(ten, "0")
    if math.isnan(q) or ten is None or ten.verdict_only:
        return None, first.mass, PARSED_READ_FAILED
    q = min(max(q, 0.0), 1.0)
    one = options.index("1")
    dist = [*probs, probs[one] * q]
    dist[one] = probs[one] * (1.0 - q)
    return dist, first.mass, None


def summarize(dist: list[float] | None, parsed: float | None, scale_min: int) -> dict:
    """Expected and argmax score of a distribution, else the parsed score for both."""
    if dist is None:
        value = math.nan if parsed is None else float(parsed)
        return {"score": value, "score_argmax": value}
    total = sum(dist)
    expected = sum((scale_min + k) * p for k, p in enumerate(dist)) / total
    argmax = scale_min + max(range(len(dist)), key=lambda k: dist[k])
    return {"score": expected, "score_argmax": float(argmax)}


def judge_responses(
    items: Sequence[ScoreItem],
    backend: Backend,
    template: PointwiseTemplate,
    *,
    judge: str | None = None,
    chat: bool | None = None,
    params: GenerationParams | None = None,
    chunk_size: int = 256,
    progress: Progress | None = None,
) -> JudgeResult:
    """Score every item once; rows follow ``judgebias.tables.pointwise``."""
    judge = judge or backend.name
    chat = uses_chat(backend, chat)
    tag = template.tag(chat)
    runner = for_template(backend, tag)
    prompts = [
        template.build(it.prompt, it.response, it.reference, criterion=it.criterion, chat=chat)
        for it in items
    ]
    params = params or GenerationParams(max_new_tokens=512)
    total, done = 2 * len(items), 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(min(done, total), total)

    if template.explain_first:
        gens = generate_all(runner, prompts, params, chunk_size, tick)
    else:  # the answer is forced to start with the template's prefix
        gens = [Generation(text=template.answer_prefix) for _ in prompts]
        tick(len(prompts))
    reads = [ScoreRead(raw=g.text) for g in gens]
    prefixed: dict[int, Prompt] = {}
    for i, g in enumerate(gens):
        if g.error:
            reads[i].error = g.error
            continue
        pos, parsed, error = find_score(g.text, template.marker, template.labels)
        if parsed is not None and template.labels:  # the k-th ID is the k-th score of the scale
            parsed += template.scale_min - 1
        reads[i].parsed = parsed
        if error:
            reads[i].error = error
            continue
        p = prompts[i]
        prefixed[i] = Prompt(
            messages=p.messages, text=p.text, assistant_prefix=p.assistant_prefix + g.text[:pos]
        )
    keys = list(prefixed)
    firsts = score_all(runner, [prefixed[i] for i in keys], digit_options(template), chunk_size, None)
    tens: list[OptionScores | None] = [None] * len(keys)
    if template.scale_max >= 10 and not template.labels and keys:
        # "0" against a stand-in: a second option keeps both backends' option checks satisfied, and
        # only the raw probability of "0" is used.
        second = [
            Prompt(
                messages=prefixed[i].messages,
                text=prefixed[i].text,
                assistant_prefix=prefixed[i].assistant_prefix.rstrip() + "1",
            )
            for i in keys
        ]
        tens = list(score_all(runner, second, ("0", "9"), chunk_size, None))
    tick(len(items))
    for k, i in enumerate(keys):
        dist, mass, reason = combine(template, firsts[k], tens[k])
        read = reads[i]
        read.mass = mass
        if not template.explain_first:
            read.raw = template.answer_prefix + firsts[k].raw  # the most probable next token
        if dist is not None:
            read.dist, read.source = dist, "probabilities"
        elif read.parsed is not None and template.scale_min <= read.parsed <= template.scale_max:
            read.source, read.reason = "parsed", reason
        else:
            read.error = (
                f"{reason}; no score in {template.scale_min}..{template.scale_max} in the text"
                if reason
                else "off-format: no score in the text"
            )
    return _rows(items, reads, judge, tag, template)


def _rows(
    items: Sequence[ScoreItem], reads: list[ScoreRead], judge: str, tag: str, template: PointwiseTemplate
) -> JudgeResult:
    exclusions = Exclusions()
    rows = []
    for it, read in zip(items, reads, strict=True):
        if read.error:
            exclusions.add(re.sub(r"\d+", "N", read.error)[:100], example=it.item_id)
        elif read.reason:
            exclusions.add(read.reason, example=it.item_id)
        scores = summarize(
            None if read.error else read.dist, None if read.error else read.parsed, template.scale_min
        )
        rows.append(
            {
                "item_id": it.item_id,
                "prompt": it.prompt,
                "response": it.response,
                "generator": it.generator or "",
                "judge": judge,
                **scores,
                "score_parsed": math.nan if read.parsed is None else float(read.parsed),
                "score_dist": read.dist,
                "score_source": None if read.error else read.source,
                "scale_min": template.scale_min,
                "scale_max": template.scale_max,
                "criterion": it.criterion or template.criterion.split("\n", 1)[0],
                "human_scores": list(it.human_scores),
                "reference": it.reference,
                "template_version": tag,
                "mass": read.mass,
                "judge_error": read.error,
                "raw_output": read.raw,
            }
        )
    return JudgeResult(judgments=[], rows=rows, exclusions=exclusions)


def items_from_frame(df: pd.DataFrame) -> list[ScoreItem]:
    """The responses to score: a pointwise table's (prompt, response) rows, or both responses of
    every pair of a pairwise table, each response once (the first row it appears in). A pointwise
    table that scores one item on several criteria gives one item per (item, criterion): each
    criterion is its own judgment (``criteria-5``)."""
    from judgebias.tables.pointwise import as_score_list, is_pointwise

    out: dict[object, ScoreItem] = {}

    def text(v: object) -> str | None:
        return (
            None if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == "" else str(v)
        )

    def add(row: dict, item_id: str, prompt: str, response: str, generator_key: str, **extra) -> None:
        generator, reference = text(row.get(generator_key)), text(row.get("reference"))
        item = ScoreItem(item_id=item_id, prompt=prompt, response=response, generator=generator,
                         reference=reference, **extra)
        out.setdefault((item_id, item.criterion), item)  # one judgment per item and criterion

    if is_pointwise(df):
        for i, row in enumerate(df.to_dict(orient="records")):
            prompt, response = text(row.get("prompt")), text(row.get("response"))
            if prompt is None or response is None:
                raise ValueError(
                    f"row {i + 1}: field {'prompt' if prompt is None else 'response'!r} is empty"
                )
            add(row, text(row.get("item_id")) or ScoreItem.make_id(prompt, response), prompt, response,
                "generator", criterion=text(row.get("criterion")),
                human_scores=tuple(as_score_list(row.get("human_scores"), f"row {i + 1}")))
        return list(out.values())
    for column in ("prompt", "response_a", "response_b"):
        if column not in df.columns:
            raise ValueError(
                f"the table has neither a 'response' column (pointwise) nor '{column}' (pairwise)"
            )
    for row in df.to_dict(orient="records"):
        for side in ("a", "b"):
            prompt, response = str(row["prompt"]), str(row[f"response_{side}"])
            add(row, ScoreItem.make_id(prompt, response), prompt, response, f"generator_{side}")
    return list(out.values())


def with_criteria(items: Sequence[ScoreItem], criteria: Sequence[str]) -> list[ScoreItem]:
    """Each item once per criterion (one judgment, one row each), replacing the items' own criterion."""
    from dataclasses import replace

    names = [c.strip() for c in criteria]
    if not names or any(not c for c in names) or len(set(names)) != len(names):
        raise ValueError(f"criteria must be distinct non-empty texts, got {list(criteria)!r}")
    firsts: dict[str, ScoreItem] = {}
    for it in items:
        firsts.setdefault(it.item_id, it)
    return [replace(it, criterion=c) for it in firsts.values() for c in names]
