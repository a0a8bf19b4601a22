"""MLflow record of one experiment, built from its run folder.

One parent run per experiment invocation; nested runs per judge (its metrics without the judge in
the name, so runs of different judges compare column by column) and per ablation. Metric names are
fixed by the metric, the judge and the condition, never by time or hash, so the MLflow UI lines up
runs of the same config. Every estimate is logged with its interval: ``<metric>``,
``<metric>.ci_low``, ``<metric>.ci_high``, ``<metric>.n``.

Params: the flattened config (names of secret-holding environment variables dropped; values never
appear in a config), the data hash, package versions and the git commit.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from judgebias.config import ExperimentConfig, flatten
from judgebias.runstore import RunStore

PACKAGES = ("judgebias", "torch", "transformers", "peft", "prefect", "mlflow", "pandas", "numpy")
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
_PARAM_MAX = 6000


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit(path: str | os.PathLike | None = None) -> str:
    """HEAD of the project checkout (suffix ``-dirty`` with uncommitted changes); "unknown" outside git."""
    cwd = Path(path or Path(__file__).resolve().parent.parent)
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def estimate_metrics(name: str, est: dict | None) -> dict[str, float]:
    """``name``, ``name.ci_low``, ``name.ci_high``, ``name.n`` of one estimate (finite values only)."""
    out: dict[str, float] = {}
    if not est or est.get("value") is None:
        return out
    for suffix, key in (("", "value"), (".ci_low", "ci_low"), (".ci_high", "ci_high"), (".n", "n")):
        v = est.get(key)
        if isinstance(v, int | float) and math.isfinite(v):
            out[name + suffix] = float(v)
    return out


def judge_metrics(per_judge: dict) -> dict[str, float]:
    """Every estimate of one judge in ``analyze``'s output, flattened with intervals."""
    out: dict[str, float] = {}
    for metric, est in per_judge.items():
        if metric == "skipped" or not isinstance(est, dict):
            continue
        out.update(estimate_metrics(metric, est))
    return out


def comparison_metrics(comp: dict) -> dict[str, float]:
    """``dbg.<judge>.<condition>`` (+ intervals) of an ablation's before/after comparison."""
    out: dict[str, float] = {}
    for judge, row in comp.get("judges", {}).items():
        for cond, est in row.items():
            out.update(estimate_metrics(f"dbg.{judge}.{cond}", est))
    return out


def _resolve_uri(cfg: ExperimentConfig) -> str:
    return cfg.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _log_params(mlflow, params: dict[str, Any]) -> None:
    clean = {
        k[:250]: (str(v) if len(str(v)) <= _PARAM_MAX else str(v)[: _PARAM_MAX - 3] + "...")
        for k, v in params.items()
    }
    items = list(clean.items())
    for i in range(0, len(items), 90):  # the REST API takes at most 100 params per batch
        mlflow.log_params(dict(items[i : i + 90]))


def _log_plots(mlflow, folder: Path, artifact_path: str) -> int:
    n = 0
    if folder.is_dir():
        for png in sorted(folder.glob("*.png")):
            mlflow.log_artifact(str(png), artifact_path=artifact_path)
            n += 1
    return n


def log_experiment(cfg: ExperimentConfig, store: RunStore, *, config_source: str) -> dict[str, Any]:
    """Log the run folder's results to MLflow; returns ``run_id``, ``experiment_id``, ``tracking_uri``."""
    import mlflow

    uri = _resolve_uri(cfg)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.set_experiment(cfg.tracking.experiment)
    metrics = store.read_json("metrics.json")
    instructions = store.read_frame("instructions.parquet")
    from judgebias.stages import data_hash

    tags = {
        "judgebias.config_hash": cfg.config_hash(),
        "judgebias.run_folder": str(store.root.resolve()),
        "judgebias.config_source": config_source,
        "judgebias.kind": "experiment",
    }
    with mlflow.start_run(run_name=f"{cfg.name}-{cfg.config_hash()}", tags=tags) as parent:
        params = {f"config.{k}": v for k, v in flatten(cfg).items()}
        params.update(
            {
                "data_hash": data_hash(instructions),
                "n_instructions": len(instructions),
                "config_hash": cfg.config_hash(),
                "git_commit": git_commit(),
            }
        )
        params.update({f"version.{k}": v for k, v in package_versions().items()})
        _log_params(mlflow, params)
        summary: dict[str, float] = {}
        for judge, per in metrics.get("judges", {}).items():
            summary.update({f"{k}.{judge}": v for k, v in judge_metrics(per).items()})
        ds = metrics.get("dataset", {})
        summary.update({"pairs": float(ds.get("pairs", 0)), "rows": float(ds.get("rows", 0))})
        summary.update(
            {f"seconds.{k}".replace("[", ".").replace("]", ""): v for k, v in store.stage_seconds().items()}
        )
        summary.update(_attention_metrics(cfg, store))
        mlflow.log_metrics(_mlflow_safe(summary))
        mlflow.log_artifact(str(store.path("table.parquet")), artifact_path="table")
        mlflow.log_artifact(str(store.path("metrics.json")), artifact_path="metrics")
        _log_text(
            mlflow,
            Path(config_source).read_text(encoding="utf-8")
            if Path(config_source).is_file()
            else json.dumps(cfg.model_dump(mode="json"), indent=2),
            "config/experiment.yaml",
        )
        _log_plots(mlflow, store.path("plots"), "plots")

        for judge, per in metrics.get("judges", {}).items():
            with mlflow.start_run(
                run_name=f"judge:{judge}",
                nested=True,
                tags={**tags, "judgebias.kind": "judge", "judgebias.judge": judge},
            ):
                j = cfg.judge(judge) if judge in {x.name for x in cfg.judges} else None
                mlflow.log_params(
                    {
                        "judge": judge,
                        "model": j.model if j else "",
                        "template": j.template if j else "",
                        "self_generator": cfg.self_map.get(judge, ""),
                    }
                )
                mlflow.log_metrics(_mlflow_safe(judge_metrics(per)))
                skipped = per.get("skipped", {})
                if skipped:
                    mlflow.log_dict(skipped, "skipped_metrics.json")

        if cfg.ablations.style_rewrite.enabled:
            _log_style(mlflow, cfg, store, tags)
        if cfg.ablations.finetune.enabled:
            _log_finetune(mlflow, cfg, store, tags)
        run_id = parent.info.run_id
    result = {"run_id": run_id, "experiment_id": experiment.experiment_id, "tracking_uri": uri}
    store.write_json("mlflow.json", result)  # the nightly annotation sync links its runs to this one
    return result


def _attention_metrics(cfg: ExperimentConfig, store: RunStore) -> dict[str, float]:
    """``attention_own_minus_other.<judge>`` (mean over layers and pairs) and its per-layer values."""
    from judgebias.stages import attention_own_minus_other

    out: dict[str, float] = {}
    for judge, own in cfg.self_map.items():
        name = f"attention/{judge}.parquet"
        if store.has(name):
            values = attention_own_minus_other(store.read_frame(name), own)
            out.update({f"attention_own_minus_other.{judge}.{k}": v for k, v in values.items()})
    return out


def _mlflow_safe(metrics: dict[str, float]) -> dict[str, float]:
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-. /")
    return {"".join(c if c in allowed else "_" for c in k): v for k, v in metrics.items()}


def _log_text(mlflow, text: str, artifact_file: str) -> None:
    mlflow.log_text(text, artifact_file)


def _log_style(mlflow, cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    base = f"style-{cfg.ablation_hash('style_rewrite')}/"
    if not store.has(f"{base}comparison.json"):
        return
    comp = store.read_json(f"{base}comparison.json")
    rw = cfg.ablations.style_rewrite
    with mlflow.start_run(
        run_name="ablation:style_rewrite",
        nested=True,
        tags={**tags, "judgebias.kind": "ablation", "judgebias.ablation": "style_rewrite"},
    ):
        mlflow.log_params(
            {
                "rewriter": rw.model,
                "styles": ",".join(rw.styles),
                "embedder": rw.embedder,
                "sample": str(rw.sample),
                "excluded_from_gold": ",".join(comp["excluded_from_gold"]),
                "ablation_hash": cfg.ablation_hash("style_rewrite"),
            }
        )
        values = comparison_metrics(comp)
        if store.has(f"{base}semantic.parquet"):
            sem = store.read_frame(f"{base}semantic.parquet")
            for style, part in sem.groupby("style"):
                values[f"semantic_cosine.{style}.mean"] = float(part["cosine"].mean())
                values[f"semantic_cosine.{style}.min"] = float(part["cosine"].min())
                values[f"semantic_cosine.{style}.n"] = float(len(part))
            mlflow.log_artifact(str(store.path(f"{base}semantic.parquet")), artifact_path="semantic")
        mlflow.log_metrics(_mlflow_safe(values))
        mlflow.log_dict(comp, "comparison.json")
        _log_plots(mlflow, store.path(f"{base}plots"), "plots")
        for style in rw.styles:
            prefix = f"{base}{style}/"
            if store.has(f"{prefix}table.parquet"):
                mlflow.log_artifact(
                    str(store.path(f"{prefix}table.parquet")), artifact_path=f"tables/{style}"
                )
            _log_plots(mlflow, store.path(f"{prefix}plots"), f"plots/{style}")


def _log_finetune(mlflow, cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    base = f"finetune-{cfg.ablation_hash('finetune')}/"
    if not store.has(f"{base}comparison.json"):
        return
    comp = store.read_json(f"{base}comparison.json")
    ft = cfg.ablations.finetune
    with mlflow.start_run(
        run_name="ablation:finetune",
        nested=True,
        tags={**tags, "judgebias.kind": "ablation", "judgebias.ablation": "finetune"},
    ):
        mlflow.log_params(
            {
                "generators": ",".join(cfg.finetune_generators),
                "data": ft.data,
                "steps": ft.steps,
                "lr": ft.lr,
                "lora_r": ft.lora.r,
                "lora_alpha": ft.lora.alpha,
                "batch_size": ft.batch_size,
                "max_length": ft.max_length,
                "ablation_hash": cfg.ablation_hash("finetune"),
            }
        )
        mlflow.log_metrics(_mlflow_safe(comparison_metrics(comp)))
        for gen in cfg.finetune_generators:
            name = f"{base}adapters/{gen}.json"
            if not store.has(name):
                continue
            info = store.read_json(name)
            for step, loss in enumerate(info.get("losses", []), 1):
                mlflow.log_metric(f"train_loss.{gen}", loss, step=step)
            mlflow.log_metric(f"trainable_params.{gen}", float(info.get("trainable_params", 0)))
            mlflow.log_artifacts(info["adapter_dir"], artifact_path=f"adapters/{gen}")
        if store.has(f"{base}table.parquet"):
            mlflow.log_artifact(str(store.path(f"{base}table.parquet")), artifact_path="table")
        mlflow.log_dict(comp, "comparison.json")
        _log_plots(mlflow, store.path(f"{base}plots"), "plots")
