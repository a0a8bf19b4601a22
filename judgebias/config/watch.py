"""A watched judge (``judgebias watch CONFIG``, ``judgebias serve --watch CONFIG``): a fixed audit
table pinned by its SHA-256, a judge that may change behind the same name, and how each scheduled
look is compared with the reference (docs/watch.md).

```yaml
watch:
  name: my-judge                      # the watch's name: MLflow run names, the history folder
  audit: {table: audit.parquet, sha256: 3f0c...}   # pairs with human labels; refused if it changed
  judge: {model: gpt-4o-mini, backend: openai, base_url: https://api.openai.com/v1,
          template: mtbench-pair, temperature: 0}
  reference: first                    # or "rolling": the look `window` looks back
  looks: 12                           # declared number of looks the error is spent over
  spending: obrien-fleming            # or pocock
  cron: "0 4 * * 1"
```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from judgebias.config.base import ModelRef, Name, Strict
from judgebias.multiplicity import SPENDING
from judgebias.runs.store import sha256_file


class WatchConfigError(ValueError):
    """A watch config that cannot be used: one line naming the file and the key."""


class AuditRef(Strict):
    table: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class WatchedJudge(ModelRef):
    template: str = "dbg-ab"
    # The judge's name in the judgment table and MLflow (stable across looks, whatever model is behind).
    name: Name = "watched"
    temperature: float = Field(0.0, ge=0)
    max_new_tokens: int = Field(512, ge=1)
    batch_size: int = Field(64, ge=1)
    # An endpoint judge: "fresh" asks every pair again at every look (its answers are keyed by the
    # look too), so a provider that swaps weights without a new model name or fingerprint is seen in
    # the figures; "reuse" reads the cache while the served model and fingerprint are unchanged.
    cache: Literal["fresh", "reuse"] = "fresh"


class WatchSettings(Strict):
    name: Name = "watch"
    audit: AuditRef
    judge: WatchedJudge
    reference: Literal["first", "rolling"] = "first"
    window: int = Field(4, ge=1)
    looks: int = Field(12, ge=1)
    alpha: float = Field(0.05, gt=0, lt=1)
    spending: Literal[SPENDING] = "obrien-fleming"  # type: ignore[valid-type]
    figures: list[str] | None = None
    reps: int = Field(1000, ge=100)
    history: str = "watch-history"
    cron: str = "0 4 * * 1"

    @model_validator(mode="after")
    def _figures(self):
        if self.figures:
            from judgebias.metrics.registry import FIGURES

            unknown = [f for f in self.figures if f not in FIGURES]
            if unknown:
                raise ValueError(f"unknown figure(s) {unknown}")
        return self


class WatchConfig(Strict):
    watch: WatchSettings


def load_watch(path: str | os.PathLike) -> tuple[WatchSettings, Path]:
    """The watch section of ``path`` and the folder its relative paths are read from."""
    path = Path(path)
    if not path.is_file():
        raise WatchConfigError(f"{path}: watch config does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return WatchConfig.model_validate(data).watch, path.resolve().parent
    except yaml.YAMLError as exc:
        raise WatchConfigError(f"{path}: not valid YAML ({exc})") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "<top>"
        raise WatchConfigError(f"{path}: {where}: {err['msg']}") from None


def pinned_table(settings: WatchSettings, base: Path) -> Path:
    """The audit table's path, or WatchConfigError in one line when its SHA-256 is not the pinned one."""
    table = (base / settings.audit.table).resolve()
    if not table.is_file():
        raise WatchConfigError(f"watch.audit.table: {table} does not exist")
    digest = sha256_file(table)
    if digest != settings.audit.sha256:
        raise WatchConfigError(
            f"watch.audit.table: {table} changed (sha256 {digest[:12]}..., "
            f"pinned {settings.audit.sha256[:12]}...): "
            "an audit set is fixed; pin a new one under a new watch name"
        )
    return table
