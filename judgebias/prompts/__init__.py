"""Prompt templates by name: judging (``JUDGE_TEMPLATES``) and generation (``GENERATION_TEMPLATES``)."""

from __future__ import annotations

from judgebias.prompts.base import GenerationTemplate, JudgeTemplate
from judgebias.prompts.dbg import DBG_AB, DBG_GENERATE, DBG_TRUTHFUL
from judgebias.prompts.mtbench import MTBENCH_PAIR
from judgebias.prompts.recognition import SELF_RECOGNITION

JUDGE_TEMPLATES: dict[str, JudgeTemplate] = {
    t.name: t for t in (DBG_AB, DBG_TRUTHFUL, MTBENCH_PAIR, SELF_RECOGNITION)
}
GENERATION_TEMPLATES: dict[str, GenerationTemplate] = {t.name: t for t in (DBG_GENERATE,)}


def judge_template(name: str) -> JudgeTemplate:
    try:
        return JUDGE_TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown judge template {name!r}; known: {', '.join(JUDGE_TEMPLATES)}") from None


def generation_template(name: str) -> GenerationTemplate:
    try:
        return GENERATION_TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown generation template {name!r}; known: {', '.join(GENERATION_TEMPLATES)}"
                         ) from None


__all__ = [
    "DBG_AB",
    "DBG_GENERATE",
    "DBG_TRUTHFUL",
    "GENERATION_TEMPLATES",
    "JUDGE_TEMPLATES",
    "MTBENCH_PAIR",
    "SELF_RECOGNITION",
    "GenerationTemplate",
    "JudgeTemplate",
    "generation_template",
    "judge_template",
]
