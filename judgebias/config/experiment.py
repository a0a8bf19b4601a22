"""One experiment, described in one YAML file and validated before anything runs.

Every section is a frozen pydantic model that rejects unknown keys, so a typo ("judgs:", "bach_size")
is an error naming the key path (``judges[1].batch_size: ...``) instead of a silently ignored
setting. Cross-references (gold panel, self mapping, rewriter, fine-tuned generators) are checked
against the declared names.

``config_hash`` fingerprints everything that determines the experiment's *results* (data, models,
prompts, decoding, ablations); where results are tracked, how many workers run them and where the
cache lives are left out, so changing them reuses the same run folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_serializer, field_validator, model_validator

from judgebias import parts
from judgebias.backends.kinds import Capability
from judgebias.config.base import ModelRef, Name, Strict
from judgebias.config.models import GeneratorConfig, JudgeConfig
from judgebias.config.overrides import LOCAL_DTYPE, deep_merge, with_local_dtype
from judgebias.config.stages import BUNDLED_SFT_DATA, STYLES, AblationsConfig, ProbesConfig
from judgebias.redaction import redact_uri

__all__ = ["BUNDLED_SFT_DATA", "STYLES", "AblationsConfig", "ConfigError", "ExperimentConfig",
           "GeneratorConfig", "JudgeConfig", "Name", "ProbesConfig"]

BUNDLED_DATASETS = {"mt-bench-40": "mt_bench_40.jsonl"}
DEMO_CONFIG = "demo.yaml"



class ConfigError(ValueError):
    """An experiment config that cannot be used; one line per problem, each naming its key path."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid experiment config\n  " + "\n  ".join(problems))


class DatasetConfig(Strict):
    """Instructions to answer: a bundled set by name or a JSONL file with an ``instruction`` field."""

    source: str = "mt-bench-40"
    sample: int | None = Field(None, ge=1, description="number of instructions drawn (all when empty)")
    seed: int = 0

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if v in BUNDLED_DATASETS:
            return v
        if not v.endswith((".jsonl", ".json")):
            raise ValueError(
                f"{v!r} is neither a bundled dataset ({', '.join(BUNDLED_DATASETS)}) nor a .jsonl/.json file"
            )
        return v


def _known(name: str, known, kind: str) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(known)}")
    return name


class GoldConfig(Strict):
    """The gold judgment of the DBG score: the panel's mean P(A), the measured judge left out."""

    panel: list[Name] | Literal["all-others"] = "all-others"
    human_as_gold: bool = False


class PromptsConfig(Strict):
    """Generation template by name (judgebias.prompts); each has a chat and a few-shot variant, chosen
    by the generator's ``prompt_kind``. Judge templates are set per judge."""

    generation: str = Field("dbg-generate", min_length=1)

    @field_validator("generation")
    @classmethod
    def _known_template(cls, v: str) -> str:
        from judgebias.prompts import GENERATION_TEMPLATES

        return _known(v, GENERATION_TEMPLATES, "generation template")


class AnalysesConfig(Strict):
    perplexity: bool = True
    attention: bool = True
    # One forward pass per pair and order with eager attention, uncached: sample to bound its cost.
    attention_sample: int | None = Field(None, ge=1, description="pairs used for attention (all when empty)")
    # The unit whose rows are not independent (analyze --cluster-by): a column of the judgment table,
    # or "none"; empty: the prompt.
    cluster_by: str | None = Field(None, min_length=1,
                                   description="cluster column of the intervals (default: the prompt)")


class AnnotationConfig(Strict):
    url_env: str = Field("LABEL_STUDIO_URL", pattern=r"^[A-Z_][A-Z0-9_]*$")
    api_key_env: str = Field("LABEL_STUDIO_API_KEY", pattern=r"^[A-Z_][A-Z0-9_]*$")
    budget: int = Field(50, ge=0, description="pairs sent to annotators per sync")
    # Label Studio takes titles of 3 to 50 characters.
    project_title: str = Field("judgebias pairwise preferences", min_length=3, max_length=50)
    # The probability design of each batch (docs/annotation.md): every pair's inclusion probability
    # is recorded, so the human-label figures are population estimates, not contested-pair averages.
    design: Literal["stratified", "uniform", "poisson"] = "poisson"
    population: Literal["all", "own"] = "all"
    min_prob: float | None = Field(None, gt=0, le=1, description="poisson design: probability floor")
    target_figure: str = Field("eo", description="figure whose interval decides when to stop")
    target_half_width: float | None = Field(None, gt=0, description="stop pushing once reached")


class TrackingConfig(Strict):
    experiment: str = Field("judgebias", min_length=1)
    tracking_uri: str | None = None
    traces: bool = Field(False, description="also log every judgment as an MLflow trace with its "
                                            "assessments (docs/mlflow-genai.md)")

    @field_serializer("tracking_uri", when_used="json")
    def _uri_without_password(self, uri: str | None) -> str | None:
        # As a model's base_url (config.base.ModelRef): no password in any JSON form of the config.
        return redact_uri(uri) if uri else uri


class TaskRunnerConfig(Strict):
    kind: Literal["thread", "dask"] = "thread"
    max_workers: int = Field(1, ge=1, le=256)
    address: str | None = Field(None, description="scheduler address of an existing Dask cluster")

    @model_validator(mode="after")
    def _address_for_dask(self):
        if self.kind == "thread" and self.address:
            raise ValueError("address only applies to kind 'dask'")
        return self


class ExperimentConfig(Strict):
    name: Name = "experiment"
    dataset: DatasetConfig = DatasetConfig()
    generators: list[GeneratorConfig] = Field(min_length=2)
    judges: list[JudgeConfig] = Field(min_length=1)
    gold: GoldConfig = GoldConfig()
    self_map: dict[str, str] = Field(default_factory=dict, description="judge name -> its own generator")
    prompts: PromptsConfig = PromptsConfig()
    analyses: AnalysesConfig = AnalysesConfig()
    ablations: AblationsConfig = AblationsConfig()
    probes: ProbesConfig = ProbesConfig()
    annotation: AnnotationConfig = AnnotationConfig()
    tracking: TrackingConfig = TrackingConfig()
    cache_dir: str | None = Field(None, description="model-call cache (default $JUDGEBIAS_CACHE_DIR)")
    run_dir: str = Field("runs", description="stage outputs go to <run_dir>/<name>-<config hash>/")
    task_runner: TaskRunnerConfig = TaskRunnerConfig()

    @model_validator(mode="after")
    def _cross_references(self):
        from judgebias.prompts.pointwise import POINTWISE_TEMPLATES

        problems = []
        gens = [g.name for g in self.generators]
        judges = [j.name for j in self.judges]
        for what, names in (("generators", gens), ("judges", judges)):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                problems.append(f"{what}: duplicate name(s) {dup}")
        for i, j in enumerate(self.judges):
            problems += j.mode_problems(f"judges[{i}]")
        if not self.pairwise_judges():
            problems.append("judges: every judge has mode 'pointwise'; the experiment's pairs need at "
                            "least one pairwise judge")
        for judge, gen in self.self_map.items():
            if judge not in judges:
                problems.append(f"self_map.{judge}: no judge named {judge!r} (judges: {judges})")
            if gen not in gens:
                problems.append(f"self_map.{judge}: no generator named {gen!r} (generators: {gens})")
        if isinstance(self.gold.panel, list):
            pairwise = [j.name for j in self.pairwise_judges()]
            for i, name in enumerate(self.gold.panel):
                if name not in judges:
                    problems.append(f"gold.panel[{i}]: no judge named {name!r}")
                elif name not in pairwise:
                    problems.append(f"gold.panel[{i}]: judge {name!r} is pointwise; the gold panel "
                                    "judges pairs")
        for i, name in enumerate(self.ablations.finetune.generators):
            if name not in gens:
                problems.append(f"ablations.finetune.generators[{i}]: no generator named {name!r}")
        if self.ablations.finetune.enabled and len(self.finetune_generators) < 2:
            problems.append(
                "ablations.finetune.generators: the ablation fine-tunes two different base "
                "models on the same data; name at least two generators"
            )
        if self.probes.pointwise.enabled and not any(
                POINTWISE_TEMPLATES.get(j.template) and POINTWISE_TEMPLATES[j.template].has_rubric
                for j in self.pointwise_judges()):
            problems.append("probes.pointwise: the pointwise probes vary a rubric; name at least one judge "
                            "with mode 'pointwise' and a rubric template ("
                            + ", ".join(n for n, t in POINTWISE_TEMPLATES.items() if t.has_rubric) + ")")
        if problems:
            # One line per problem, each starting with its own key path (see ``_problems``).
            raise ValueError("\n".join(problems))
        return self

    @property
    def finetune_generators(self) -> list[str]:
        return list(self.ablations.finetune.generators) or [g.name for g in self.generators]

    def local_models(self) -> list[str]:
        """Every in-process model (capability ``in_process``), in the order the stages first use it
        (generators, judges, then the style rewriter when that ablation is on), each once."""
        refs: list[ModelRef] = [*self.generators, *self.judges]
        if self.ablations.style_rewrite.enabled:
            refs.append(self.ablations.style_rewrite)
        return list(dict.fromkeys(r.model for r in refs if r.can("in_process")))

    def pairwise_judges_that_can(self, capability: Capability) -> list[str]:
        """The pairwise judges whose backend can do ``capability``, by name, in the config's order."""
        return [j.name for j in self.pairwise_judges() if j.can(capability)]

    def pairwise_judges(self) -> list[JudgeConfig]:
        """The judges of the pairs: every stage of the main run, the ablations and the CALM probes."""
        return [j for j in self.judges if j.mode == "pairwise"]

    def pointwise_judges(self) -> list[JudgeConfig]:
        """The judges that score each generated response alone (``judgebias.stages.pointwise``)."""
        return [j for j in self.judges if j.mode == "pointwise"]

    def pairwise_twin(self, judge: str) -> str | None:
        """The pairwise judge running the same model as the pointwise ``judge`` (the comparison of
        ``pointwise_pairwise_consistency``), or None."""
        j = self.judge(judge)
        return next((p.name for p in self.pairwise_judges()
                     if (p.model, p.backend, p.base_url) == (j.model, j.backend, j.base_url)), None)

    def judge(self, name: str) -> JudgeConfig:
        return next(j for j in self.judges if j.name == name)

    def generator(self, name: str) -> GeneratorConfig:
        return next(g for g in self.generators if g.name == name)

    def gold_panel(self, measured: str, exclude: tuple[str, ...] = ()) -> list[str]:
        """Judges whose mean forms the gold for ``measured`` (never itself, never ``exclude``)."""
        from judgebias.metrics.dbg import panel_rule

        return panel_rule([j.name for j in self.pairwise_judges()], measured, self.configured_gold(), exclude)

    def own_generators(self) -> dict[str, tuple[str, ...]]:
        """``self_map`` in the one shape every metric reads (``metrics.origin.parse_self_map``)."""
        from judgebias.metrics.origin import parse_self_map

        return parse_self_map(self.self_map)

    def configured_gold(self) -> list[str] | None:
        """The configured gold panel, or None for "all-others" (every other judge)."""
        return None if self.gold.panel == "all-others" else list(self.gold.panel)

    def results_part(self) -> dict:
        """The part of the config that determines the main stages' results (``config_hash``).
        Ablations have their own hashes (``ablation_hash``): switching one off or retuning it
        leaves the main run folder's outputs valid."""
        doc = self.model_dump(
            mode="json",
            exclude={"tracking", "annotation", "task_runner", "cache_dir", "run_dir", "ablations", "probes"},
        )
        # Pointwise judges have their own hash (``pointwise_hash``): adding one keeps the main run.
        doc["judges"] = [j for j in doc["judges"] if j.get("mode") != "pointwise"]
        if doc["analyses"].get("cluster_by") is None:  # the default: run folders from before keep their hash
            del doc["analyses"]["cluster_by"]
        return doc

    def config_hash(self) -> str:
        return _digest(self.results_part())

    def ablation_hash(self, kind: Literal["style_rewrite", "finetune"]) -> str:
        section = getattr(self.ablations, kind).model_dump(mode="json", exclude={"enabled"})
        return _digest({"main": self.config_hash(), kind: section})

    def probe_hash(self, kind: str) -> str:
        """The folder key of the probe whose section is ``probes.<kind>`` (``judgebias.parts``)."""
        if kind not in parts.probe_sections():
            raise ValueError(f"unknown probe {kind!r}; declared probes: {', '.join(parts.probe_sections())}")
        section = getattr(self.probes, kind).model_dump(mode="json", exclude={"enabled"})
        # The pointwise probes re-score with the pointwise judges: their settings are part of it.
        main = self.pointwise_hash() if kind == "pointwise" else self.config_hash()
        return _digest({"main": main, kind: section})

    def pointwise_hash(self) -> str:
        """The pointwise judges' folder: the main run's hash and their own settings."""
        judges = [j.model_dump(mode="json") for j in self.pointwise_judges()]
        return _digest({"main": self.config_hash(), "pointwise_judges": judges})

    def run_path(self, base: str | os.PathLike | None = None) -> Path:
        return Path(base or self.run_dir) / f"{self.name}-{self.config_hash()}"


# Fields added after run folders existed, omitted from the hashes while at their default: a config
# that does not set them keeps its run folder (and its cached stage outputs).
_LATER_DEFAULTS = {"quantize": "none", "mode": "pairwise", "scale": None, "max_new_tokens": None}
# How a model entry's requests are sent, never what they answer: out of every hash.
_HOW_SENT = frozenset({"concurrency", "rpm", "tpm"})


def _without_later_defaults(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_later_defaults(v) for k, v in doc.items()
                if not (k in _LATER_DEFAULTS and v == _LATER_DEFAULTS[k]) and k not in _HOW_SENT}
    if isinstance(doc, list):
        return [_without_later_defaults(v) for v in doc]
    return doc


def _digest(doc: Any) -> str:
    text = json.dumps(_without_later_defaults(doc), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _problems(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's union-branch tags ("list[...]", "literal[...]") from the path.
        loc = tuple(
            p
            for p in err["loc"]
            if isinstance(p, int) or not str(p).startswith(("list[", "literal[", "function-"))
        )
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not part of the experiment config)"
        if not loc:
            lines.extend(msg.split("\n"))  # cross-reference problems carry their own key paths
        else:
            lines.append(f"{_loc(loc) or '<top>'}: {msg}")
    return list(dict.fromkeys(lines))


def parse_config(data: Any, source: str = "<config>") -> ExperimentConfig:
    """Validate a config mapping; raises ``ConfigError`` whose lines name each bad key path."""
    if not isinstance(data, dict):
        raise ConfigError(source, [f"<top>: expected a mapping of settings, got {type(data).__name__}"])
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc)) from None


def load_config(path: str | os.PathLike, overrides: dict | None = None) -> ExperimentConfig:
    """Read and validate a YAML experiment config; ``overrides`` (nested mapping) win over the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), ["file does not exist"])
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"not valid YAML: {exc}"]) from None
    if overrides:
        overrides = dict(overrides)
        local_dtype = overrides.pop(LOCAL_DTYPE, None)
        data = deep_merge(data or {}, overrides)
        if local_dtype is not None:
            data = with_local_dtype(data, local_dtype)
    return parse_config(data, str(path))


def bundled_file(name: str) -> Path:
    """Path of a file shipped in ``judgebias/data`` (works from an installed package too)."""
    path = Path(str(resources.files("judgebias") / "data" / name))
    if not path.is_file():
        raise FileNotFoundError(f"bundled file {name!r} is missing from {path.parent}")
    return path


def demo_config_path() -> Path:
    return bundled_file(DEMO_CONFIG)
