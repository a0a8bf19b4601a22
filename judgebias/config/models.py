"""The experiment's models: who answers (generators) and who judges (judges, pairwise or pointwise),
each a model entry (``config.base.ModelRef``) with the settings of its role."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from judgebias.backends.kinds import GenerationPromptKind, PromptKind, chat_for
from judgebias.config.base import ModelRef, Name

if TYPE_CHECKING:
    from judgebias.backends.builder import JudgeSpec


class GeneratorConfig(ModelRef):
    name: Name
    # "chat" uses the model's chat template; "few-shot" is the DBG paper's prompt for base models.
    prompt_kind: GenerationPromptKind = "chat"
    max_new_tokens: int = Field(128, ge=1, le=8192)
    batch_size: int = Field(8, ge=1, le=512)


class JudgeConfig(ModelRef):
    name: Name
    # "pairwise": judges the pairs (every figure of the main run); "pointwise": scores each generated
    # response alone on its template's scale (judgebias.stages.pointwise), figures of its own.
    mode: Literal["pairwise", "pointwise"] = "pairwise"
    template: str = Field("dbg-ab", min_length=1, description="judge template (judgebias.prompts; "
                          "a pointwise judge names one of judgebias.prompts.pointwise)")
    # Pointwise judges only: [min, max] of the scores, checked against the template's own scale;
    # the length of the explanation an explain-first template generates before its score.
    scale: tuple[int, int] | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=8192, description="pointwise explain-first "
                                       "templates: tokens generated before the score (default 512)")
    # "auto": the chat variant when the model has a chat template (API models: always chat).
    prompt_kind: PromptKind = "auto"
    batch_size: int = Field(8, ge=1, le=512)

    def to_spec(self, cache_dir: str | None = None, **extra: Any) -> JudgeSpec:
        """The builder's judge spec: the model entry's fields, the template and the prompt kind."""
        from judgebias.backends.builder import JudgeSpec

        extra = {"template": self.template, "chat": chat_for(self.prompt_kind), **extra}
        return JudgeSpec(**self._spec_fields(cache_dir, extra))

    def mode_problems(self, where: str) -> list[str]:
        """What is wrong with this judge's template and scale for its mode, each line naming its
        key path under ``where`` (``judges[2]``)."""
        from judgebias.prompts import JUDGE_TEMPLATES
        from judgebias.prompts.pointwise import POINTWISE_TEMPLATES

        if self.mode == "pairwise":
            out = []
            if self.template not in JUDGE_TEMPLATES:
                pointwise = self.template in POINTWISE_TEMPLATES
                hint = " (a pointwise template: set mode: pointwise)" if pointwise else ""
                out.append(f"{where}.template: unknown judge template {self.template!r}{hint}; "
                           f"known pairwise: {', '.join(JUDGE_TEMPLATES)}")
            for key in ("scale", "max_new_tokens"):
                if getattr(self, key) is not None:
                    out.append(f"{where}.{key}: only applies to mode 'pointwise'")
            return out
        if self.template not in POINTWISE_TEMPLATES:
            return [f"{where}.template: {self.template!r} is not a pointwise template; a judge with "
                    f"mode 'pointwise' names one of: {', '.join(POINTWISE_TEMPLATES)}"]
        t = POINTWISE_TEMPLATES[self.template]
        out = []
        if self.scale is not None and tuple(self.scale) != (t.scale_min, t.scale_max):
            out.append(f"{where}.scale: template {self.template!r} scores {t.scale_min}..{t.scale_max}, "
                       f"not {self.scale[0]}..{self.scale[1]} (set the scale of the template, or leave "
                       "scale out)")
        if t.needs_reference:
            out.append(f"{where}.template: {self.template!r} needs a reference answer, which an experiment's "
                       "generated responses do not have; use one without '-ref'")
        if self.prompt_kind == "few-shot":
            out.append(f"{where}.prompt_kind: the pointwise templates have no few-shot variant; use "
                       "'auto' or 'chat'")
        return out
