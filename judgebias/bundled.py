"""Real third-party judgments shipped with the package, so the demo ends on findings.

The tiny local models of the demo show the workflow, not a judge worth measuring. These tables are
judgments real judges made on public data with human labels, imported by ``judgebias import``
(``scripts/bundle_real_data.sh`` rebuilds them from the upstream files; licences in
``judgebias/data/README.md``). Whatever reads them says they are imported, never produced by the
run that reports them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgebias.config.experiment import bundled_file


@dataclass(frozen=True)
class BundledTable:
    """One imported judgment table in ``judgebias/data``."""

    name: str
    file: str
    title: str
    source: str
    licence: str
    who: str  # the judges and what they are read against, in one line
    family: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def path(self) -> Path:
        return bundled_file(self.file)

    def digest(self) -> str:
        return hashlib.sha256(self.path().read_bytes()).hexdigest()[:16]

    def command(self) -> str:
        """The ``analyze`` call that reproduces the figures from the bundled file."""
        fam = "".join(f" --family {j}={','.join(g)}" for j, g in self.family.items())
        return f"judgebias analyze {self.path()} --out {self.name}.json{fam}"

    def provenance(self) -> list[str]:
        return [
            f"IMPORTED DATA, not produced by this run: {self.who}",
            f"source: {self.source} ({self.licence}), bundled as {self.file}",
            f"reproduce: {self.command()}",
        ]


BUNDLED: tuple[BundledTable, ...] = (
    BundledTable(
        name="pandalm",
        file="pandalm_testset.parquet",
        title="PandaLM test set",
        source="WeOpenML/PandaLM data/testset-v1.json and its two judges' verdict files",
        licence="Apache-2.0",
        who="GPT-3.5-Turbo and PandaLM-7B (a LLaMA-7B fine-tune) on 939 pairs of 7B models' responses, "
        "against three human annotators per pair",
        family={"pandalm-7b": ("llama-7b",)},
    ),
    BundledTable(
        name="llmbar-natural",
        file="llmbar_natural.parquet",
        title="LLMBar Natural",
        source="princeton-nlp/LLMBar Dataset/Natural",
        licence="MIT",
        who="GPT-4 and ChatGPT, each with LLMBar's Vanilla and Swap prompting and in both presentation "
        "orders, on 100 pairs against LLMBar's expert label (the table's human label)",
    ),
)


def analyze_bundled(entry: BundledTable, *, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``analyze`` of one bundled table, with where it came from under ``source``."""
    from judgebias.reporting.analysis import analyze
    from judgebias.tables.files import read_table

    table, exclusions = read_table(entry.path())
    result = analyze(table, family_map=entry.family, exclusions=exclusions, reps=reps, seed=seed)
    result["source"] = {
        "imported": True,
        "name": entry.name,
        "title": entry.title,
        "file": entry.file,
        "sha256": entry.digest(),
        "origin": entry.source,
        "licence": entry.licence,
        "judges": entry.who,
    }
    return result
