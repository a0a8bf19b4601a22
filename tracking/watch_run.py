"""MLflow's side of a watched judge: one run per look, with the figures (the registry's stable
names), what the endpoint served, the decision as tags and the history plot (docs/watch.md)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from judgebias.tracking.settings import TrackingSettings

TAG = "judgebias.watch."
MAX_TAG_CHARS = 5000


def log_look(record: Mapping[str, Any], settings: TrackingSettings | None = None) -> str:
    """One MLflow run for the look ``record`` (``stages.watch.look``); returns its run id. A changed
    judge sets ``judgebias.watch.changed`` to the changed figures (comma-separated) and
    ``judgebias.watch.status`` to ``changed``; otherwise ``status`` is ``unchanged`` (or
    ``reference`` for the first look)."""
    from judgebias.metrics.registry import FIGURES

    settings = settings or TrackingSettings()
    settings.check_reachable()
    settings.apply()
    import mlflow

    mlflow.set_experiment(settings.experiment_name)
    decision = record.get("decision")
    changed = list((decision or {}).get("changed") or [])
    status = "reference" if decision is None else "changed" if changed else "unchanged"
    judge = record["judge"]
    tags = {
        f"{TAG}name": record["watch"],
        f"{TAG}index": str(record["index"]),
        f"{TAG}status": status,
        f"{TAG}audit_sha256": record["audit"]["sha256"],
        f"{TAG}served_model": (record.get("served") or {}).get("served_model", ""),
        f"{TAG}system_fingerprint": (record.get("served") or {}).get("system_fingerprint", ""),
        "judgebias.judge": judge["name"],
        "judgebias.judge.model": judge["model"],
        "judgebias.judge.template": judge["template"],
    }
    if decision is not None:
        tags[f"{TAG}changed"] = ",".join(changed)[:MAX_TAG_CHARS]
        tags[f"{TAG}look"] = f"{decision['look']}/{decision['looks']}"
        tags[f"{TAG}level"] = f"{decision['level']:.6g}"
        tags[f"{TAG}method"] = decision["method"][:MAX_TAG_CHARS]
        tags[f"{TAG}reference_index"] = str(record["reference"]["index"])
    metrics: dict[str, float] = {}
    for key, est in (record.get("figures") or {}).items():
        base = f"{judge['name']}.{FIGURES[key].mlflow_name}" if key in FIGURES else f"{judge['name']}.{key}"
        for field, suffix in (("value", ""), ("ci_low", ".ci_low"), ("ci_high", ".ci_high"), ("n", ".n")):
            if est.get(field) is not None:
                metrics[base + suffix] = float(est[field])
    with mlflow.start_run(run_name=f"watch {record['watch']} look {record['index']}", tags=tags) as run:
        mlflow.log_metrics(metrics)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "watch_look.json"
            path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
            mlflow.log_artifact(str(path), "watch")
        if record.get("plot"):
            mlflow.log_artifact(str(record["plot"]), "watch")
        return run.info.run_id
