"""The judging engine: pairs x both presentation orders -> ``Judgment`` records -> table rows.

Works with any ``Backend`` (local model, API, ``CachedBackend`` around either). Two kinds of
templates:

- option-letter templates (DBG A-or-B): one ``score_options`` call per (pair, order); P(A), P(B)
  are read at the answer's first token;
- explain-first templates (MT-bench ``pair-v2``): the judge generates an explanation and a verdict
  ``[[A]]``/``[[B]]``/``[[C]]``; the option distribution is then read at the token after the last
  ``[[`` by scoring the prompt with the generated text up to ``[[`` as the answer prefix. P(A) is
  normalized over A and B (as the self-preference paper does); the tie option's share is kept in
  ``usage["p_tie"]``. An answer without ``[[`` is an exclusion with its reason, never a 0.5.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from judgebias.backends.kinds import uses_chat
from judgebias.backends.protocol import Backend, Generation, GenerationParams, OptionScores, Prompt
from judgebias.prompts.base import JudgeTemplate
from judgebias.tables.pairwise import Exclusions
from judgebias.tables.records import Judgment, Order, Pair, combine_orders

ORDERS: tuple[Order, Order] = ("ab", "ba")
OFF_FORMAT = "off-format: no [[A]]/[[B]] verdict"
_VERDICT = re.compile(r"\[\[\s*([ABC])\s*\]\]")
_LETTER_TO_LABEL = {"A": "a", "B": "b", "C": "tie"}

Progress = Callable[[int, int], None]  # (items done, items total)


@dataclass
class JudgeResult:
    """Everything a judging run produced: per-order records, table rows, exclusions by reason."""

    judgments: list[Judgment]
    rows: list[dict]
    exclusions: Exclusions = field(default_factory=Exclusions)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def for_template(backend: Backend, tag: str) -> Backend:
    """``backend`` answering for template version ``tag``: a CachedBackend keys its entries by it;
    other backends need nothing."""
    with_template = getattr(backend, "with_template", None)
    return with_template(tag) if callable(with_template) else backend


def batches(n: int, size: int) -> Iterable[range]:
    """The indices ``0..n-1`` in consecutive runs of ``size`` (the last one shorter)."""
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def in_batches(call: Callable[[list[Prompt]], list], prompts: Sequence[Prompt], chunk: int,
               progress: Callable[[int], None] | None = None) -> list:
    """``call`` over ``prompts``, ``chunk`` per call (a cached backend commits each call: a kill loses
    at most one), results in order; ``progress(n)`` after each call."""
    out: list = []
    for r in batches(len(prompts), chunk):
        out.extend(call([prompts[i] for i in r]))
        if progress:
            progress(len(r))
    return out


def score_all(backend: Backend, prompts: Sequence[Prompt], options: Sequence[str], chunk: int,
              progress: Callable[[int], None] | None = None) -> list[OptionScores]:
    """``backend.score_options`` over ``prompts`` in batches (``in_batches``)."""
    return in_batches(lambda part: backend.score_options(part, options), prompts, chunk, progress)


def generate_all(backend: Backend, prompts: Sequence[Prompt], params: GenerationParams, chunk: int,
                 progress: Callable[[int], None] | None = None) -> list[Generation]:
    """``backend.generate`` over ``prompts`` in batches: every stage, worker and ablation that
    generates goes through here."""
    return in_batches(lambda part: backend.generate(part, params), prompts, chunk, progress)


def strip_think(text: str) -> tuple[str, int, str | None]:
    """(text after a reasoning block, its offset in ``text``, error). Reasoning models write
    ``<think>...</think>`` first; a verdict inside it is not the answer."""
    end = text.rfind("</think>")
    if end >= 0:
        offset = end + len("</think>")
        return text[offset:], offset, None
    if "<think>" in text:
        return "", len(text), "off-format: unfinished <think> block"
    return text, 0, None


def find_verdict(text: str) -> tuple[int | None, str | None, str | None]:
    """(position just after the final verdict's "[[", its letter or None, error).

    The last well-formed ``[[X]]`` wins (an explanation may quote the format first); failing
    that, the last bare ``[[``, whose letter is then read from the probabilities.
    """
    body, offset, error = strip_think(text)
    if error:
        return None, None, error
    matches = list(_VERDICT.finditer(body))
    if matches:
        m = matches[-1]
        return offset + m.start() + 2, m.group(1), None
    pos = body.rfind("[[")
    if pos < 0:
        return None, None, OFF_FORMAT
    return offset + pos + 2, None, None


def _shown_label(p_first: float, p_second: float) -> str | None:
    if math.isnan(p_first) or math.isnan(p_second):
        return None
    return "a" if p_first > p_second else "b" if p_first < p_second else "tie"


def shown_verdict(scores: OptionScores, first: str, second: str) -> str | None:
    """The verdict in shown terms ("a" = the option shown first) of one answer, whether it came as
    probabilities, a bare verdict or bounds (decided only where they lie on one side of 0.5)."""
    if scores.error:
        return None
    if scores.bounds:
        low, high = scores.bounds[first]
        return "a" if low > 0.5 else "b" if high < 0.5 else None
    return _shown_label(scores.probs.get(first, math.nan), scores.probs.get(second, math.nan))


def judgment_from_scores(pair: Pair, order: Order, judge: str, tag: str, scores: OptionScores,
                         options: Sequence[str]) -> Judgment:
    """One option-letter judgment (options[0] is the first shown response, options[1] the second)."""
    first, second = options[0], options[1]
    usage = {} if math.isnan(scores.mass) else {"mass": scores.mass}
    if scores.error:
        return Judgment(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag,
                        raw_output=scores.raw, error=scores.error, usage=usage)
    if scores.bounds:
        return _bounded_judgment(pair, order, judge, tag, scores, options, usage)
    p1, p2 = scores.probs.get(first, math.nan), scores.probs.get(second, math.nan)
    if math.isnan(p1) or math.isnan(p2):
        return Judgment(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag,
                        raw_output=scores.raw, usage=usage,
                        error=f"off-format: neither {first} nor {second} among the answer's first tokens")
    if scores.verdict_only:
        return Judgment(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag,
                        raw_output=scores.raw, verdict_shown=_shown_label(p1, p2), usage=usage)
    return Judgment(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag,
                    raw_output=scores.raw, p_first=p1, p_second=p2, verdict_shown=_shown_label(p1, p2),
                    usage=usage)


def _bounded_judgment(pair: Pair, order: Order, judge: str, tag: str, scores: OptionScores,
                      options: Sequence[str], usage: dict[str, float]) -> Judgment:
    """An option outside the endpoint's top log-probs: P(first) is only an interval. The verdict
    is kept where the interval lies on one side of 0.5; the probability is left out (NaN), so no
    metric averages a bound as a value, and the interval goes to ``usage`` for the table."""
    low, high = scores.bounds[options[0]]
    usage = {**usage, "p_first_low": low, "p_first_high": high}
    base = dict(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag,
                raw_output=scores.raw, usage=usage)
    verdict = shown_verdict(scores, options[0], options[1])
    if verdict is not None:
        return Judgment(**base, verdict_shown=verdict)
    return Judgment(**base, error=f"P(first) only bounded in [{low:.3f}, {high:.3f}] (an option outside "
                                  "the top log-probs), which spans 0.5: no verdict")


def _explain_judgment(pair: Pair, order: Order, judge: str, tag: str, text: str, letter: str | None,
                      scores: OptionScores) -> Judgment:
    base = dict(pair_id=pair.pair_id, order=order, judge=judge, template_version=tag, raw_output=text)
    if scores.error:
        return Judgment(**base, error=scores.error)
    pa, pb, pc = (scores.probs.get(o, math.nan) for o in ("A", "B", "C"))
    verdict = _LETTER_TO_LABEL[letter] if letter else None
    usage = {} if math.isnan(scores.mass) else {"mass": scores.mass}
    if scores.verdict_only or math.isnan(pa) or math.isnan(pb) or pa + pb <= 0:
        if verdict is None:
            return Judgment(**base, usage=usage, error=OFF_FORMAT)
        return Judgment(**base, usage=usage, verdict_shown=verdict)
    p_first = pa / (pa + pb)
    if not math.isnan(pc):
        usage["p_tie"] = pc
    if verdict is None:
        verdict = max(zip((pa, pb, -1.0 if math.isnan(pc) else pc), ("a", "b", "tie"), strict=True))[1]
    return Judgment(**base, p_first=p_first, p_second=1.0 - p_first, verdict_shown=verdict, usage=usage)


def _prompts(items: Sequence[tuple[Pair, Order]], template: JudgeTemplate, chat: bool) -> list[Prompt]:
    return [template.build(pair.prompt, *pair.shown(order), chat=chat) for pair, order in items]


@dataclass(frozen=True)
class JudgingPlan:
    """The first calls a judging run will send (the prompts not in the call cache, each once) and
    how many it will not (in the cache, or repeating another). An explain-first template makes a
    second call per answer with a verdict: the prompt again with the explanation as the answer's
    start."""

    prompts: list[Prompt]
    cached: int
    explain_first: bool


def judging_plan(pairs: Sequence[Pair], backend: Backend, template: JudgeTemplate, *,
                 chat: bool | None = None, params: GenerationParams | None = None) -> JudgingPlan:
    """What ``judge_pairs`` with the same arguments would send, without sending it."""
    chat = uses_chat(backend, chat)
    runner = for_template(backend, template.tag(chat))
    prompts = _prompts([(pair, order) for pair in pairs for order in ORDERS], template, chat)
    missing = getattr(runner, "missing", None)
    if missing is None:  # no call cache: every prompt goes out
        todo = list(range(len(prompts)))
    elif template.explain_first:
        params = params or GenerationParams(max_new_tokens=512)
        todo = missing("generate", runner.generate_payloads(prompts, params))
    else:
        todo = missing("score_options", runner.score_payloads(prompts, template.options))
    return JudgingPlan([prompts[i] for i in todo], len(prompts) - len(todo), template.explain_first)


def plan_cost(plan: JudgingPlan, *, score_max_tokens: int, max_new_tokens: int, tokenizer=None,
              counted_with: str, price=None):
    """The ``pricing.CostEstimate`` of ``plan``: its prompts' tokens (``pricing.count_prompt_tokens``)
    and the most output tokens the calls may produce (``score_max_tokens`` a scoring call; with an
    explain-first template, ``max_new_tokens`` of explanation and a scoring call whose prompt is the
    prompt plus that explanation at its longest: an upper bound)."""
    from judgebias.backends import pricing

    tokens = pricing.count_prompt_tokens(plan.prompts, tokenizer)
    if not plan.explain_first:
        return pricing.estimate(tokens, score_max_tokens, cached=plan.cached, counted_with=counted_with,
                                price=price)
    calls = [*tokens, *(t + max_new_tokens for t in tokens)]
    est = pricing.estimate(calls, 0, cached=plan.cached, counted_with=counted_with, price=price)
    return replace(est, max_completion_tokens=len(tokens) * (max_new_tokens + score_max_tokens))


def judge_pairs(pairs: Sequence[Pair], backend: Backend, template: JudgeTemplate, *,
                judge: str | None = None, chat: bool | None = None,
                params: GenerationParams | None = None, chunk_size: int = 256,
                progress: Progress | None = None) -> JudgeResult:
    """Judge every pair in both orders and fold each pair's two judgments into a table row."""
    judge = judge or backend.name
    chat = uses_chat(backend, chat)
    tag = template.tag(chat)
    runner = for_template(backend, tag)
    items = [(pair, order) for pair in pairs for order in ORDERS]
    prompts = _prompts(items, template, chat)
    total = len(items) * (2 if template.explain_first else 1)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    judgments: list[Judgment] = []
    if not template.explain_first:
        scores = score_all(runner, prompts, template.options, chunk_size, tick)
        judgments = [judgment_from_scores(pair, order, judge, tag, s, template.options)
                     for (pair, order), s in zip(items, scores, strict=True)]
    else:
        params = params or GenerationParams(max_new_tokens=512)
        gens = generate_all(runner, prompts, params, chunk_size, tick)
        pending: dict[int, tuple[Prompt, str | None]] = {}
        errors: dict[int, str] = {}
        for i, g in enumerate(gens):
            if g.error:
                errors[i] = g.error
                continue
            pos, letter, error = find_verdict(g.text)
            if error:
                errors[i] = error
            else:
                p = prompts[i]
                pending[i] = (Prompt(messages=p.messages, text=p.text,
                                     assistant_prefix=p.assistant_prefix + g.text[:pos]), letter)
        keys = list(pending)
        scored = score_all(runner, [pending[i][0] for i in keys], template.options, chunk_size, None)
        tick(len(items))
        by_index = dict(zip(keys, scored, strict=True))
        for i, ((pair, order), g) in enumerate(zip(items, gens, strict=True)):
            if i in errors:
                judgments.append(Judgment(pair_id=pair.pair_id, order=order, judge=judge,
                                          template_version=tag, raw_output=g.text, error=errors[i]))
            else:
                judgments.append(_explain_judgment(pair, order, judge, tag, g.text, pending[i][1],
                                                   by_index[i]))
    return _fold(pairs, judgments)


def _fold(pairs: Sequence[Pair], judgments: list[Judgment]) -> JudgeResult:
    exclusions = Exclusions()
    by_pair: dict[str, list[Judgment]] = {}
    for j in judgments:
        by_pair.setdefault(j.pair_id, []).append(j)
        if j.error:
            # Numbers (token counts) vary per item; the reason is the message without them.
            exclusions.add(re.sub(r"\d+", "N", j.error)[:100], example=f"{j.pair_id} ({j.order})")
    rows = [combine_orders(pair, by_pair[pair.pair_id]) for pair in pairs]
    bounded = [j for j in judgments if "p_first_low" in j.usage]
    for pair, row in zip(pairs, rows, strict=True):
        for j in by_pair[pair.pair_id]:
            row[f"mass_{j.order}"] = j.usage.get("mass", math.nan)
            row[f"p_tie_{j.order}"] = j.usage.get("p_tie", math.nan)
            if bounded:  # the table says which P(A) is an interval, in original terms
                row[f"p_a_low_{j.order}"], row[f"p_a_high_{j.order}"] = _p_a_bounds(j)
    for j in bounded:
        if not j.error:
            exclusions.add("probability left out, verdict kept: an option outside the endpoint's top "
                           "log-probs (P(A) only bounded; table columns p_a_low_*/p_a_high_*)",
                           example=f"{j.pair_id} ({j.order})")
    return JudgeResult(judgments=judgments, rows=rows, exclusions=exclusions)


def _p_a_bounds(j: Judgment) -> tuple[float, float]:
    low, high = j.usage.get("p_first_low", math.nan), j.usage.get("p_first_high", math.nan)
    if "p_first_low" not in j.usage and j.ok and not math.isnan(j.p_a):
        return j.p_a, j.p_a  # a measured value is its own interval
    return (low, high) if j.order == "ab" else (1.0 - high, 1.0 - low)


def pairs_from_table(df: pd.DataFrame) -> list[Pair]:
    """The unique pairs of a (validated) judgment table, in first-appearance order."""
    from judgebias.tables.pairwise import pairs as unique_pairs

    out = []
    for row in unique_pairs(df).itertuples(index=False):
        human = tuple(row.human) if isinstance(row.human, (list, tuple)) else ()
        out.append(Pair(pair_id=str(row.pair_id), prompt=row.prompt, response_a=row.response_a,
                        response_b=row.response_b, generator_a=row.generator_a or None,
                        generator_b=row.generator_b or None, human=human))
    return out
