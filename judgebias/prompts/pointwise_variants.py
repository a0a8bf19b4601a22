"""The pointwise probes' template variants, declared once: each probe turns a rubric template
(``PointwiseTemplate.has_rubric``) into a baseline and a variant that should score the same response
the same, and says how a variant's score maps onto the baseline's scale.

- ``rubric_reversed``: the rubric lists Score 5 first, down to Score 1 (order of the rubric).
- ``score_ids_letters``: the scores are written A..E instead of 1..5 (score-ID format).
- ``reference_score``: a reference answer is shown, said to score 5 (baseline) or 2 (variant): the
  stated score of a reference should not move the score of another response (Li et al. 2025).
- ``rubric_permuted``: the rubric's five lines in a fixed shuffled order (``PERMUTATION``), the
  position of score options (Xu et al. 2026).
- ``scale_1_10``: the same five descriptions over a 1-10 scale ("Score 1-2: ..."), the variant's
  score mapped linearly onto 1..5 (1 -> 1, 10 -> 5).

Every variant is a template of its own version (``<base version>+<probe>@<version>``), so the call
cache keys its prompts apart; changing a variant's wording means a new probe version here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from judgebias.prompts.pointwise import PointwiseTemplate, RubricWords, rubric_prompt

LI_2025 = "Li et al. 2025 (Evaluating Scoring Bias in LLM-as-a-Judge)"
XU_2026 = "Xu et al. 2026 (score option position)"

_LINE = re.compile(r"^Score (\S+): (.*)$")
# Rubric line order of ``rubric_permuted``: no line stays in its place, and it is not the reversal.
PERMUTATION = (2, 4, 1, 5, 3)
LETTERS = ("A", "B", "C", "D", "E")
REFERENCE_BASE, REFERENCE_VARIANT = "5", "2"


def split_rubric(rubric: str) -> tuple[str, list[tuple[str, str]]]:
    """(the question line, [(score ID, description)]) of a rubric in ``Score k: ...`` lines;
    ValueError naming what is missing."""
    head, *rest = rubric.strip().split("\n")
    lines = [_LINE.match(x.strip()) for x in rest]
    if not lines or any(m is None for m in lines):
        raise ValueError("the rubric must be a question line then one 'Score k: description' line per score")
    return head, [(m.group(1), m.group(2)) for m in lines if m is not None]


def _join(head: str, lines: list[tuple[str, str]]) -> str:
    return "\n".join([head, *(f"Score {k}: {d}" for k, d in lines)])


@dataclass(frozen=True)
class PointwiseProbe:
    """One scoring perturbation: ``rubric`` rewrites the rubric text, ``words`` the prompt's score
    wording; ``reference`` (baseline, variant) the stated score of a shown reference answer (None:
    no reference); ``to_base`` maps a variant score onto the baseline's scale."""

    name: str
    version: str
    description: str
    source: str
    rubric: Callable[[str], str] = lambda r: r
    words: RubricWords = dataclasses.field(default_factory=RubricWords)
    labels: tuple[str, ...] = ()
    scale_max: int = 5
    reference: tuple[str, str] | None = None

    @property
    def tag(self) -> str:
        return f"{self.name}@{self.version}"

    def to_base(self, score: float) -> float:
        """A variant score on the baseline's 1..5 scale (linear; the identity on the same scale)."""
        return 1.0 + (score - 1.0) * 4.0 / (self.scale_max - 1)

    def templates(self, base: PointwiseTemplate) -> tuple[PointwiseTemplate, PointwiseTemplate]:
        """(baseline, variant) of ``base``; ValueError for a template without a 1-5 rubric."""
        if not base.has_rubric or (base.scale_min, base.scale_max) != (1, 5):
            raise ValueError(f"template {base.name!r} has no 1-5 score rubric for probe {self.name!r}")
        baseline_ref = self.reference[0] if self.reference else ("5" if base.needs_reference else None)
        variant_ref = self.reference[1] if self.reference else baseline_ref
        baseline = (
            base
            if (self.reference is None)
            else _variant(
                base, f"ref{baseline_ref}", lambda r: r, RubricWords(reference_score=baseline_ref), (), 5
            )
        )
        words = dataclasses.replace(self.words, reference_score=variant_ref)
        variant = _variant(base, self.tag, self.rubric, words, self.labels, self.scale_max)
        return baseline, variant


def _variant(
    base: PointwiseTemplate,
    tag: str,
    rubric: Callable[[str], str],
    words: RubricWords,
    labels: tuple[str, ...],
    scale_max: int,
) -> PointwiseTemplate:
    def build(query: str, response: str, reference: str | None, criterion: str):
        return rubric_prompt(query, response, reference, rubric(criterion), words)

    return dataclasses.replace(
        base,
        name=f"{base.name}+{tag.split('@')[0]}",
        version=f"{base.version}+{tag}",
        builder=build,
        labels=labels,
        scale_max=scale_max,
        needs_reference=words.reference_score is not None,
        description=f"{base.name} varied by the pointwise probe {tag}",
    )


def _reversed(rubric: str) -> str:
    head, lines = split_rubric(rubric)
    return _join(head, lines[::-1])


def _permuted(rubric: str) -> str:
    head, lines = split_rubric(rubric)
    if len(lines) != len(PERMUTATION):
        raise ValueError(f"rubric_permuted needs {len(PERMUTATION)} rubric lines, got {len(lines)}")
    return _join(head, [lines[k - 1] for k in PERMUTATION])


def _letters(rubric: str) -> str:
    head, lines = split_rubric(rubric)
    return _join(head, [(LETTERS[i], d) for i, (_, d) in enumerate(lines)])


def _ten(rubric: str) -> str:
    head, lines = split_rubric(rubric)
    return _join(head, [(f"{2 * i + 1}-{2 * i + 2}", d) for i, (_, d) in enumerate(lines)])


POINTWISE_PROBES: dict[str, PointwiseProbe] = {
    p.name: p
    for p in (
        PointwiseProbe(
            "rubric_reversed",
            "1",
            "the rubric listed from Score 5 down to Score 1",
            LI_2025,
            rubric=_reversed,
        ),
        PointwiseProbe(
            "score_ids_letters",
            "1",
            "scores written A-E instead of 1-5",
            LI_2025,
            rubric=_letters,
            words=RubricWords(score="a letter score", one="a letter", low="A", high="E"),
            labels=LETTERS,
        ),
        PointwiseProbe(
            "reference_score",
            "1",
            f"a reference answer said to score {REFERENCE_VARIANT} instead of {REFERENCE_BASE}",
            LI_2025,
            reference=(REFERENCE_BASE, REFERENCE_VARIANT),
        ),
        PointwiseProbe(
            "rubric_permuted",
            "1",
            f"the rubric's lines in a shuffled order ({', '.join(map(str, PERMUTATION))})",
            XU_2026,
            rubric=_permuted,
        ),
        PointwiseProbe(
            "scale_1_10",
            "1",
            "a 1-10 scale (two points per rubric line), mapped back to 1-5",
            LI_2025,
            rubric=_ten,
            words=RubricWords(high="10"),
            scale_max=10,
        ),
    )
}


def pointwise_probe(name: str) -> PointwiseProbe:
    try:
        return POINTWISE_PROBES[name]
    except KeyError:
        raise ValueError(f"unknown pointwise probe {name!r}; known: {', '.join(POINTWISE_PROBES)}") from None
