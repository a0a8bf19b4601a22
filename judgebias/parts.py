"""The experiment's parts, declared once: each ablation, probe and judging mode that writes a
variant folder of the run.

A ``Part`` says what the part is called, the prefix of its run-folder variant (and which config
section keys that folder), the words the console and the experiment summary use for it, and, for a
probe, the figures its stage writes per judge (key, label, meaning, source, sign) and the config
fields its MLflow run records. The run layout (``judgebias.runs.layout.RunLayout.of``), the stage lines
(``judgebias.tasks.stage_lines``), the experiment summary's stage groups and probe index
(``judgebias.reporting.experiment_summary``), the probes' MLflow runs (``judgebias.tracking.probes``),
the report card's probe rows (``judgebias.reporting.report_card``) and the figure registry's probe
figures (``judgebias.metrics.registry.PROBE_FIGURES``) all read ``PARTS``; a new probe is one entry
in ``_CATALOGUE`` below (docs/architecture.md, "Adding a probe").

A probe on the main run's pairs also says how it runs (``PairwiseProbe``: the functions building its
pairs and its result, by dotted name): one generic subflow (``judgebias.flows.experiment``) and two
generic stages (``judgebias.stages.probes``) run every such probe, and a probe without a config class
gets the generic section ``probes.<name>`` (``judgebias.config.stages.ProbeConfig``).

Plain data only: the run layout at the bottom of the package reads it, so this module imports nothing
of judgebias (the probes' functions are named, and imported only when the probe runs).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

PartKind = Literal["ablation", "probe", "mode"]
# Which judges a probe's figures describe: the pairwise judges' report-card section or the
# pointwise judges' own (``judgebias.reporting.trust_pointwise``).
JudgeKind = Literal["pairwise", "pointwise"]


@dataclass(frozen=True)
class PartFigure:
    """One figure a probe's stage writes per judge (``result["judges"][judge][key]``, or under each
    variant's tag when the part ``per_variant``). ``label`` and ``meaning`` may say ``{variant}``
    (the tag before its ``@``) and ``{what}`` (the variant's description in the result), ``source``
    may be ``{source}`` (the variant's own source in the result)."""

    key: str
    label: str
    meaning: str
    source: str
    signed: bool  # a shift around 0 (printed with its sign) rather than a share
    pct: bool = False  # printed as a percentage

    def __post_init__(self) -> None:
        if not self.key.isidentifier():
            raise ValueError(f"probe figure key {self.key!r} is not an identifier")


# A probe's pairs may hold a column of this name: then each judge is asked only the rows naming it
# (self-recognition asks each judge about the pairs holding its own answer).
PROBE_JUDGE = "probe_judge"


@dataclass(frozen=True)
class PairwiseProbe:
    """How a probe on the main run's pairs runs: its pairs derived from the main run's pairs,
    judged again by every pairwise judge in the probe's folder, then its result computed from the
    judgments before and after. Functions by dotted name ``"module:function"``:

    - ``pairs(main_pairs, ctx: ProbeContext) -> DataFrame``: the probe's pairs (each with its own
      ``pair_id``; a ``PROBE_JUDGE`` column restricts a row to that judge), written as the folder's
      ``pairs.parquet``;
    - ``result(before, after, probe_pairs, ctx) -> dict``: the folder's ``probe.json``, per judge
      the declared figures (``Part.figures``); ``before``/``after``: the judgment tables of the main
      run / of the probe's pairs by judge; the stage is timed under the function's name;
    - ``plot(result) -> Figure | None`` (optional): saved as ``plots/<probe name>.png``."""

    pairs: str
    result: str
    template: str = ""  # the judges' template while judging the probe's pairs ("": their own)
    plot: str = ""

    def __post_init__(self) -> None:
        for what in (self.pairs, self.result, *([self.plot] if self.plot else [])):
            module, _, name = what.partition(":")
            if not (module and name.isidentifier()):
                raise ValueError(f"probe function {what!r} must be 'module:function'")


@dataclass(frozen=True)
class ProbeContext:
    """What a ``PairwiseProbe``'s functions get besides the frames."""

    name: str
    section: Any  # its config section (``ProbeConfig``: enabled, sample, seed, options; or its own class)
    judges: tuple[str, ...]  # the pairwise judges, in config order
    own: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # judge -> its own generators


def function(dotted: str) -> Callable[..., Any]:
    """The function a declaration names as ``"module:function"``."""
    module, _, name = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"probe function {dotted!r} cannot be imported: {exc}") from None


@dataclass(frozen=True)
class Part:
    """An experiment part: its variant folder is ``{prefix}-{key}/`` (``{prefix}/{key}/`` with
    ``sep="/"``) where ``key`` is ``cfg.<keyed_by[0]>(*keyed_by[1:])``, or a value the caller
    passes (``keyed_by`` empty: a table digest, a dataset's name)."""

    name: str  # the key of its figures in the probe results and of its MLflow run ("probe:<name>")
    kind: PartKind
    prefix: str
    words: str  # the console's and the summary's name for it
    keyed_by: tuple[str, ...] = ()  # config method and its arguments giving the folder's key
    block: tuple[str, ...] = ()  # the config section: attribute path from the ExperimentConfig
    judges: JudgeKind = "pairwise"
    per_variant: bool = False  # figures per judge under each variant's tag (a perturbation)
    variants_at: str = ""  # the result's key describing each variant (description, source)
    figures: tuple[PartFigure, ...] = ()
    params: tuple[tuple[str, str], ...] = ()  # MLflow param name, field of the config section
    summary: str = ""  # the experiment summary's heading over its figures (none: no summary lines)
    # What turns it on where its config section has no ``enabled``: a config method that returns
    # something non-empty (the pointwise judges).
    enabled_by: str = ""
    sep: str = "-"
    runs: PairwiseProbe | None = None  # a probe on the main run's pairs, run by the generic subflow

    def __post_init__(self) -> None:
        if not self.prefix or not self.prefix.replace("_", "").isalnum():
            raise ValueError(f"part {self.name!r}: prefix {self.prefix!r} must be letters and digits")
        if self.sep not in ("-", "/"):
            raise ValueError(f"part {self.name!r}: sep must be '-' or '/'")
        if self.kind == "probe" and not (self.block and self.keyed_by):
            raise ValueError(f"part {self.name!r}: a probe names its config section and key")
        if self.runs is not None and (self.kind, self.judges) != ("probe", "pairwise"):
            raise ValueError(f"part {self.name!r}: only a pairwise probe runs on the main run's pairs")
        keys = [f.key for f in self.figures]
        if len(set(keys)) != len(keys):
            raise ValueError(f"part {self.name!r}: a figure is declared twice")

    def folder(self, key: str) -> str:
        """The variant's folder (a ``RunLayout`` prefix) for the key of its settings."""
        if not key or "/" in key:
            raise ValueError(f"part {self.name!r}: folder key {key!r} must be non-empty without '/'")
        return f"{self.prefix}{self.sep}{key}/"

    def key(self, cfg: Any) -> str:
        """The folder's key for an ``ExperimentConfig``: the hash of the settings it depends on."""
        if not self.keyed_by:
            raise ValueError(f"part {self.name!r} is keyed by a value the caller passes, not the config")
        method, *args = self.keyed_by
        return getattr(cfg, method)(*args)

    def section(self, cfg: Any) -> Any:
        """The part's config section (``cfg.probes.perturbations``)."""
        out = cfg
        for attr in self.block:
            out = getattr(out, attr)
        return out

    def enabled(self, cfg: Any) -> bool:
        """Whether an experiment with config ``cfg`` runs this part."""
        if self.enabled_by:
            return bool(getattr(cfg, self.enabled_by)())
        return bool(self.block) and bool(getattr(self.section(cfg), "enabled", False))

    def judge_figures(self, result: Mapping[str, Any] | None, judge: str
                      ) -> list[tuple[str, PartFigure, str, str, str, Mapping[str, Any]]]:
        """A judge's figures in a result this part's stage wrote, in declaration order: (variant
        tag or "", figure, label, meaning, source, estimate), estimates without a value left out."""
        result = result or {}
        mine = ((result.get("judges") or {}).get(judge)) or {}
        variants = result.get(self.variants_at) or {} if self.variants_at else {}
        entries = mine.items() if self.per_variant else [("", mine)]
        out = []
        for tag, entry in entries:
            about = variants.get(tag) or {}
            words = {"variant": tag.split("@")[0], "what": about.get("description", tag),
                     "source": about.get("source", "")}
            for fig in self.figures:
                est = (entry or {}).get(fig.key) or {}
                if est.get("value") is not None:
                    out.append((tag, fig, fig.label.format(**words), fig.meaning.format(**words),
                                fig.source.format(**words), est))
        return out

    def mlflow_metrics_of(self, result: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
        """Every judge's figures as MLflow metric base names (``<judge>.<variant>.<key>``, the
        variant's tag before its ``@``; ``<judge>.<key>`` without variants) with their estimates."""
        out = {}
        for judge in ((result or {}).get("judges") or {}):
            for tag, fig, *_, est in self.judge_figures(result, judge):
                where = f"{judge}.{tag.split('@')[0]}" if self.per_variant else judge
                out[f"{where}.{fig.key}"] = est
        return out

    def mlflow_params(self, cfg: Any) -> dict[str, str]:
        """The config fields its MLflow run records, as strings (a list joined with commas)."""
        section = self.section(cfg)
        out = {}
        for param, attr in self.params:
            value = getattr(section, attr)
            out[param] = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        return out


CALM = "Ye et al. 2024 (CALM)"
PANICKSSERY = "Panickssery et al. 2024"

_CATALOGUE: tuple[Part, ...] = (
    Part("style_rewrite", "ablation", "style", "style ablation", ("ablation_hash", "style_rewrite"),
         ("ablations", "style_rewrite")),
    Part("finetune", "ablation", "finetune", "fine-tune ablation", ("ablation_hash", "finetune"),
         ("ablations", "finetune")),
    Part("perturbations", "probe", "perturb", "perturbation probe", ("probe_hash", "perturbations"),
         ("probes", "perturbations"), per_variant=True, variants_at="perturbations",
         figures=(PartFigure("robustness_rate", "robust to {variant}",
                             "share of verdicts unchanged when one side gets {what}", CALM, False),
                  PartFigure("shift", "shift toward {variant}",
                             "P(perturbed side) after - before; 0 = not moved", CALM, True)),
         params=(("perturbations", "names"), ("sample", "sample"), ("seed", "seed")),
         runs=PairwiseProbe("judgebias.stages.probes:perturbation_pairs",
                            "judgebias.stages.probes:perturbation_report",
                            plot="judgebias.stages.probes:perturbation_plot")),
    Part("self_recognition", "probe", "recognition", "self-recognition probe",
         ("probe_hash", "self_recognition"), ("probes", "self_recognition"),
         figures=(PartFigure("self_recognition", "self-recognition accuracy",
                             "picks its own answer when asked which it wrote; 0.5 = chance", PANICKSSERY,
                             False),
                  PartFigure("recognition_preference", "recognition vs self-preference (r)",
                             "per pair: confidence it wrote its answer against its preference for it",
                             PANICKSSERY, True)),
         params=(("sample", "sample"),),
         # The judges asked which answer they wrote (judgebias.prompts.recognition).
         runs=PairwiseProbe("judgebias.stages.probes:recognition_pairs",
                            "judgebias.stages.probes:recognition_report", template="self-recognition")),
    Part("pointwise", "mode", "pointwise", "pointwise judges", ("pointwise_hash",),
         enabled_by="pointwise_judges"),
    Part("pointwise_probes", "probe", "pwprobe", "pointwise probes", ("probe_hash", "pointwise"),
         ("probes", "pointwise"), judges="pointwise", per_variant=True, variants_at="probes",
         figures=(PartFigure("unchanged_rate", "unchanged under {variant}",
                             "share of most probable scores unchanged: {what}", "{source}", False, pct=True),
                  PartFigure("score_shift", "score shift under {variant}",
                             "mean score variant - baseline (baseline's scale); 0 = not moved", "{source}",
                             True)),
         params=(("probes", "names"), ("sample", "sample"), ("seed", "seed"))),
    Part("annotated", "mode", "annotated", "with human labels"),
    Part("imported", "mode", "imported", "imported data", sep="/"),
)


def index_parts(parts: Sequence[Part]) -> Mapping[str, Part]:
    """Parts by name, read-only; a name or a prefix declared twice fails at import."""
    out: dict[str, Part] = {}
    prefixes: set[str] = set()
    for part in parts:
        if part.name in out:
            raise ValueError(f"part registry: {part.name!r} is declared twice")
        if part.prefix in prefixes:
            raise ValueError(f"part registry: prefix {part.prefix!r} is declared twice")
        out[part.name] = part
        prefixes.add(part.prefix)
    return MappingProxyType(out)


PARTS: Mapping[str, Part] = index_parts(_CATALOGUE)


def declared(name: str) -> Part:
    """The part called ``name``; a ``ValueError`` naming the declared ones otherwise."""
    if name not in PARTS:
        raise ValueError(f"unknown experiment part {name!r}; use one of {', '.join(PARTS)}")
    return PARTS[name]


def part_of(label: str) -> Part | None:
    """The part whose variant folder a label or stage name is in ("perturb-3f2a/...",
    "imported/x"); None for the main run's."""
    head = label.partition("/")[0]
    for part in PARTS.values():
        if (head == part.prefix and part.sep == "/" and "/" in label) or head.startswith(f"{part.prefix}-"):
            return part
    return None


def probes(judges: JudgeKind | None = None) -> tuple[Part, ...]:
    """The probes, in declaration order (of one judge kind when given)."""
    return tuple(p for p in PARTS.values() if p.kind == "probe" and judges in (None, p.judges))


def ablations() -> tuple[Part, ...]:
    """The ablations, in declaration order."""
    return tuple(p for p in PARTS.values() if p.kind == "ablation")


def probe_sections() -> tuple[str, ...]:
    """The config sections under ``probes:`` of the declared probes (``probes.<name>``)."""
    return tuple(p.block[1] for p in probes() if len(p.block) == 2 and p.block[0] == "probes")
