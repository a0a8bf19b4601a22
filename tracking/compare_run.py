"""MLflow's side of ``judgebias compare``: fetch a run's figures and judgment table, and mark the
later run with what changed since the earlier one (tags, a link, the comparison's JSON and page)."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgebias.tracking.settings import TrackingSettings

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
TAG = "judgebias.compare."
MAX_TAG_CHARS = 5000  # MLflow's limit for a tag value is 8000; the JSON artifact holds everything


def looks_like_run_id(text: str) -> bool:
    return bool(RUN_ID.match(str(text)))


def _client(settings: TrackingSettings | None):
    settings = settings or TrackingSettings()
    settings.apply()
    import mlflow

    return mlflow.MlflowClient()


def fetch_run(
    run_id: str, dest: str | Path, settings: TrackingSettings | None = None
) -> tuple[Path, Path | None]:
    """(metrics.json, the judgment table or None) of an analyze or experiment run, downloaded into
    ``dest``. The table is there when the run logged a copy of it (``table/``); a large table logged
    only by reference gives None (its comparison is then independent). ValueError naming the run
    when it holds no metrics.json."""
    import mlflow

    client = _client(settings)
    names = {a.path for a in client.list_artifacts(run_id)}
    if "metrics.json" not in names:
        raise ValueError(f"MLflow run {run_id} has no metrics.json artifact (artifacts: {sorted(names)})")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    metrics = Path(
        mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="metrics.json", dst_path=str(dest))
    )
    table = None
    if "table" in names:
        files = [a.path for a in client.list_artifacts(run_id, "table") if not a.is_dir]
        if files and not any(f.endswith("reference.json") for f in files):
            table = Path(
                mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=files[0], dst_path=str(dest))
            )
    return metrics, table


def tag_later_run(
    after_run: str,
    before_run: str,
    result: Mapping[str, Any],
    pages: Sequence[str | Path] = (),
    settings: TrackingSettings | None = None,
) -> dict[str, str]:
    """On ``after_run``: tags naming the earlier run (its id and UI link) and what changed, and the
    comparison's JSON and pages under ``compare/<before_run>/``. Returns the tags set."""
    from judgebias.tracking.judgment_traces import run_url

    client = _client(settings)
    before = client.get_run(before_run)
    uri = (settings or TrackingSettings()).resolved_uri()
    changed = list(result.get("changed") or [])
    tags = {
        TAG + "baseline_run": before_run,
        TAG + "baseline_url": run_url(uri, before.info.experiment_id, before_run),
        TAG + "changed_count": str(len(changed)),
        TAG + "changed": (", ".join(changed) or "nothing")[:MAX_TAG_CHARS],
        TAG + "tests": f"{result['multiplicity']['tests']} ({result['multiplicity']['method']})",
    }
    for key, value in tags.items():
        client.set_tag(after_run, key, value)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compare.json"
        path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        client.log_artifact(after_run, str(path), f"compare/{before_run}")
    for page in pages:
        client.log_artifact(after_run, str(page), f"compare/{before_run}")
    return tags
