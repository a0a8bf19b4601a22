"""Every path of a run folder, named once.

A run folder holds the main experiment at its root and each variant (a style rewrite, the
fine-tuned generators, the table with human labels merged in) in a subfolder with the same files.
``RunLayout()`` is the root; ``RunLayout.style(h, "humorous")`` a variant, each variant's folder
named by its part's declaration (``judgebias.parts``, ``RunLayout.of``). Paths are relative to
the run folder (``RunStore`` resolves them); no other module spells a run-folder file name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from judgebias.parts import declared


def slug(name: str) -> str:
    """A model or judge name as a file name: other characters than ``[A-Za-z0-9-_.]`` become ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class _File:
    """A file (or folder) every variant of a run has: ``layout.NAME`` is its path under the
    variant's prefix, named (and documented) once here."""

    def __init__(self, name: str, doc: str | None = None) -> None:
        self.name, self.__doc__ = name, doc

    @overload
    def __get__(self, layout: None, owner: type | None = None) -> _File: ...

    @overload
    def __get__(self, layout: RunLayout, owner: type | None = None) -> str: ...

    def __get__(self, layout: RunLayout | None, owner: type | None = None) -> str | _File:
        return self if layout is None else layout._at(self.name)


@dataclass(frozen=True)
class RunLayout:
    """The files of one variant of a run; ``prefix`` is its subfolder ("" for the main run)."""

    prefix: str = ""

    def __post_init__(self) -> None:
        if self.prefix and not self.prefix.endswith("/"):
            raise ValueError(f"a variant prefix ends with '/': {self.prefix!r}")

    # --- variants: each part's folder (judgebias.parts), keyed by the hash of the config it depends on
    @staticmethod
    def of(part: str, cfg=None, key: str | None = None) -> RunLayout:
        """The variant folder of the experiment part ``part`` (``judgebias.parts.PARTS``): keyed by
        the config's hash of its settings (``cfg``: an ``ExperimentConfig``), or by ``key``."""
        of = declared(part)
        return RunLayout(of.folder(key if key is not None else of.key(cfg)))

    @staticmethod
    def style(cfg, style: str | None = None) -> RunLayout:
        """The style-rewrite ablation's folder (its comparison and semantic shift), or with ``style``
        the pairs rewritten into that style, judged again. ``cfg``: an ``ExperimentConfig``."""
        root = RunLayout.of("style_rewrite", cfg).prefix
        return RunLayout(f"{root}{style}/" if style else root)

    @staticmethod
    def finetune(cfg) -> RunLayout:
        """The fine-tuned generators' folder. ``cfg``: an ``ExperimentConfig``."""
        return RunLayout.of("finetune", cfg)

    @staticmethod
    def annotated(table_digest: str) -> RunLayout:
        """The metrics of the table with human labels merged in (one folder per merged table)."""
        return RunLayout.of("annotated", key=table_digest)

    @staticmethod
    def perturbation(cfg) -> RunLayout:
        """The perturbation probe's perturbed pairs (every perturbation in one table), their
        judgments and the figures. ``cfg``: an ``ExperimentConfig``."""
        return RunLayout.of("perturbations", cfg)

    @staticmethod
    def recognition(cfg) -> RunLayout:
        """The self-recognition probe's pairs, judgments and figures."""
        return RunLayout.of("self_recognition", cfg)

    @staticmethod
    def pointwise(cfg) -> RunLayout:
        """The pointwise judges' scores of the generated responses, their figures and plots."""
        return RunLayout.of("pointwise", cfg)

    @staticmethod
    def pointwise_probes(cfg) -> RunLayout:
        """The pointwise probes: each variant's scores per judge and the figures."""
        return RunLayout.of("pointwise_probes", cfg)

    @staticmethod
    def imported(name: str) -> RunLayout:
        """A bundled real dataset's figures and report card (``judgebias.bundled``): imported
        judgments, kept apart from the run's own."""
        return RunLayout.of("imported", key=slug(name))

    def _at(self, name: str) -> str:
        return f"{self.prefix}{name}"

    @property
    def label(self) -> str:
        """The variant's name in titles and logs ("" for the main run)."""
        return self.prefix.strip("/")

    # --- files of the main run only ---------------------------------------------------------------
    manifest = "manifest.json"  # stage timings, shared by all variants
    instructions = "instructions.parquet"
    mlflow_link = "mlflow.json"  # the MLflow run the experiment was logged to (for the sync flow)
    # Which probe folders the run's page was last built from: the probe folders are keyed by the
    # config's hash, which `judgebias report RUN_FOLDER` does not have.
    probes_index = "probes.json"

    @staticmethod
    def perplexity(judge: str) -> str:
        return f"perplexity/{slug(judge)}.parquet"

    @staticmethod
    def attention(judge: str) -> str:
        return f"attention/{slug(judge)}.parquet"

    @staticmethod
    def fidelity(judge: str) -> str:
        """A reduced-precision judge re-scored in float32 on a few pairs: what its dtype costs."""
        return f"fidelity/{slug(judge)}.json"

    # --- files of every variant: each a _File (its path under the variant's prefix) or a method ----
    def responses(self, generator: str) -> str:
        return self._at(f"responses/{slug(generator)}.parquet")

    def judgments(self, judge: str) -> str:
        return self._at(f"judgments/{slug(judge)}.parquet")

    pairs = _File("pairs.parquet")
    pairs_exclusions = _File("pairs_exclusions.json")
    table = _File("table.parquet")
    gold = _File("gold.parquet")
    metrics = _File("metrics.json")
    leaderboard = _File("leaderboard.json", "The generators' bias-corrected leaderboard and its "
                        "recommendation (judgebias.reporting.leaderboard).")
    leaderboard_plots = _File("leaderboard_plots", "The leaderboard's forest plot and rank-change charts: "
                              "apart from ``plots`` so the report card shows them in its leaderboard "
                              "section, not among the judges' plots.")
    report_html = _File("report.html", "The run's report card, one self-contained page "
                        "(judgebias.reporting.report_card).")
    report_md = _File("report.md")
    probe_result = _File("probe.json", "A probe's figures per judge (robustness per perturbation, or "
                         "self-recognition).")
    comparison = _File("comparison.json", "An ablation's before/after figures.")
    semantic = _File("semantic.parquet", "The style rewrite's semantic shift per response.")
    plots = _File("plots")

    def adapter(self, generator: str) -> str:
        """The fine-tuned generator's LoRA adapter folder."""
        return self._at(f"adapters/{slug(generator)}")

    def adapter_record(self, generator: str) -> str:
        return self._at(f"adapters/{slug(generator)}.json")

    def plot(self, name: str) -> str:
        return self._at(f"plots/{name}.png")

    def stage(self, name: str) -> str:
        """A stage's key in the manifest."""
        return self._at(name)


ADAPTER_RESULT = "result.json"  # inside an adapter folder: the fine-tuning run's figures
