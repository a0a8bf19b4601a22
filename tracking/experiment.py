"""MLflow record of one experiment, built from its run folder.

One parent run per experiment invocation; nested runs per judge (its metrics without the judge in
the name, so runs of different judges compare column by column) and per ablation. Metric names are
those of ``judgebias.tracking.log_analysis`` (``<judge>.<metric>`` with ``.ci_low``, ``.ci_high``, ``.n``,
``.p_value``), fixed by metric, judge and condition, never by time or hash, so the MLflow UI lines
up runs of the same config.

Params: the flattened config (names of secret-holding environment variables dropped; values never
appear in a config), the data hash, package versions and the git commit.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import socket
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from judgebias.config.experiment import ExperimentConfig
from judgebias.redaction import redact_uri, redact_uris
from judgebias.reporting.experiment_summary import headline_rows, headline_table, summary_markdown
from judgebias.reporting.judges_table import per_thousand
from judgebias.reporting.plots import judge_figures
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tracking.experiment_traces import log_run_traces, open_experiment_on, traces_links
from judgebias.tracking.judgment_traces import run_url
from judgebias.tracking.log_analysis import (
    COMPARE_JUDGES,
    JUDGE_TAG,
    estimate_metrics,
    judge_figure_metrics,
    judge_run_name,
    log_analysis,
    log_files,
    log_linked_pages,
    log_metrics_dict,
    log_params_dict,
    name_key,
    safe_params,
)
from judgebias.tracking.log_pointwise import log_experiment_pointwise
from judgebias.tracking.mlflow_run import mlflow_run
from judgebias.tracking.params import flatten, template_digest
from judgebias.tracking.probes import log_probes
from judgebias.tracking.settings import TrackingSettings, settings_for

PACKAGES = ("judgebias", "torch", "transformers", "peft", "prefect", "mlflow", "pandas", "numpy")


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


def comparison_metrics(comp: dict) -> dict[str, float]:
    """``<judge>.dbg.<condition>`` (+ intervals) of an ablation's before/after comparison."""
    out: dict[str, float] = {}
    for judge, row in comp.get("judges", {}).items():
        for cond, est in row.items():
            out.update(estimate_metrics(f"{name_key(judge)}.dbg.{cond}", est))
    return out


def _log_pngs(folder: Path, artifact_dir: str, *, only: Iterable[str] | None = None,
              skip: Iterable[str] = ()) -> int:
    """Log the folder's PNGs (``only`` / ``skip``: file stems) as artifacts; returns how many."""
    pngs = sorted(folder.glob("*.png")) if folder.is_dir() else []
    wanted, unwanted = (set(only) if only is not None else None), set(skip)
    pngs = [p for p in pngs if (wanted is None or p.stem in wanted) and p.stem not in unwanted]
    log_files(pngs, artifact_dir)
    return len(pngs)


def _alive(host: str | None, pid: str | None) -> bool:
    """Whether the process that opened a run may still be logging to it. Untagged runs (older
    versions) count as gone; another machine's process cannot be checked and counts as alive."""
    if host is None or not (pid or "").isdigit():
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def retire_interrupted(settings: TrackingSettings, tags: dict[str, str]) -> list[str]:
    """End (KILLED) and delete the runs a killed process left RUNNING for the same run folder and
    config, with their nested runs, so a rerun leaves one parent run instead of a second one beside
    a run that stays RUNNING forever. Returns the retired run ids (deleted runs can be restored)."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=settings.resolved_uri())
    experiment = client.get_experiment_by_name(settings.experiment_name)
    if experiment is None:
        return []
    ids = [experiment.experiment_id]
    stale = [r for r in client.search_runs(
        ids, filter_string=f"tags.`judgebias.config_hash` = '{tags['judgebias.config_hash']}' "
                           "and attributes.status = 'RUNNING'")
        if r.data.tags.get("judgebias.run_folder") == tags["judgebias.run_folder"]
        and not _alive(r.data.tags.get("judgebias.host"), r.data.tags.get("judgebias.pid"))]
    retired = []
    for parent in stale:
        children = client.search_runs(
            ids, filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        for run in (*children, parent):
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, "KILLED")
            client.delete_run(run.info.run_id)
            retired.append(run.info.run_id)
    return retired


def _usage_metrics(store: RunStore) -> dict[str, float]:
    """An API judge's tokens and dollars per judging stage (``usage.<stage>.<part>``), where the
    stage recorded them."""
    out: dict[str, float] = {}
    for stage, info in store.manifest().get("stages", {}).items():
        for part, value in (info.get("usage") or {}).items():
            if isinstance(value, (int, float)) and value == value:
                out[f"usage.{stage}.{part}".replace("[", ".").replace("]", "")] = float(value)
    return out


def log_experiment(cfg: ExperimentConfig, store: RunStore, *, config_source: str,
                   started_at: float | None = None) -> dict[str, Any]:
    """Log the run folder's results to MLflow; returns ``run_id``, ``experiment_id``, ``tracking_uri``
    (also written to the run folder's ``mlflow.json``). ``started_at`` (epoch seconds) is when the
    flow began: the run is logged at the end but its duration in the UI is the flow's."""
    import mlflow

    from judgebias.stages import data_hash

    settings = settings_for(cfg)
    metrics = store.read_json(RunLayout().metrics)
    instructions = store.read_frame(RunLayout.instructions)
    tags = {
        "judgebias.config_hash": cfg.config_hash(),
        "judgebias.run_folder": str(store.root.resolve()),
        "judgebias.config_source": config_source,
        "judgebias.kind": "experiment",
    }
    # Which process logs: a rerun retires this run only when that process is gone.
    owner = {"judgebias.host": socket.gethostname(), "judgebias.pid": str(os.getpid())}
    with mlflow_run(f"{cfg.name}-{cfg.config_hash()}", settings=settings, tags={**tags, **owner},
                    start_time=started_at) as parent:
        retire_interrupted(settings, tags)  # this run's process is alive: it is never among them
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
        _log_params(params)
        pages = [store.path(p) for p in (RunLayout().report_html, RunLayout().report_md) if store.has(p)]
        log_analysis(metrics, table_path=store.path(RunLayout().table), reports=pages)
        log_linked_pages(pages, store.root)  # the ablations' and imported data's pages it links
        traces = log_run_traces(cfg, store)
        extra = {
            f"seconds.{k}".replace("[", ".").replace("]", ""): v for k, v in store.stage_seconds().items()
        }
        extra.update(_attention_metrics(cfg, store))
        extra.update(_usage_metrics(store))
        log_metrics_dict(extra)
        config_text = (
            Path(config_source).read_text(encoding="utf-8")
            if Path(config_source).is_file()
            else json.dumps(cfg.model_dump(mode="json"), indent=2)
        )
        # A model's base_url may carry a password: the logged copy has it masked, like the params.
        mlflow.log_text(redact_uris(config_text), "config/experiment.yaml")
        plots = store.path(RunLayout().plots)
        stems = [p.stem for p in plots.glob("*.png")] if plots.is_dir() else []
        per_judge = {j: judge_figures(stems, j) for j in metrics.get("judges", {})}
        # The parent keeps the figures across judges; each judge's own go to its nested run.
        _log_pngs(plots, "plots", skip=[s for names in per_judge.values() for s in names])

        stages = store.manifest().get("stages", {})
        mlflow.set_tags({"judgebias.dataset_digest": params["data_hash"],
                         "judgebias.judges": ",".join(metrics.get("judges", {}))})
        for judge, per in metrics.get("judges", {}).items():
            j = next((x for x in cfg.judges if x.name == judge), None)
            # The same names in every judge's run (MLflow's compare view lines judges up by them),
            # with what identifies the judge as tags: its name, the data, the template's words.
            ident = {"judgebias.kind": "judge", JUDGE_TAG: judge,
                     "judgebias.dataset_digest": params["data_hash"],
                     "judgebias.template_digest": (template_digest(j.template) if j else "") or "n/a"}
            cost = per_thousand(stages.get(f"judge_pairs[{judge}]") or {})
            log_metrics_dict({f"{name_key(judge)}.{k}": v for k, v in cost.items()})
            with mlflow_run(judge_run_name(judge), tags={**tags, **ident}):
                log_params_dict(
                    {
                        "judge": judge,
                        "model": j.model if j else "",
                        "template": j.template if j else "",
                        "self_generator": cfg.self_map.get(judge, ""),
                    }
                )
                log_metrics_dict({**judge_figure_metrics(metrics, judge), **cost})
                # Each judge's page leads with its own figures, not only its parent's.
                mine = [row for row in headline_rows(metrics) if row[0] == judge]
                mlflow.set_tag("mlflow.note.content", "\n".join(headline_table(mine)) + "\n")
                _log_pngs(plots, "plots", only=per_judge[judge])
                if per.get("skipped"):
                    mlflow.log_dict(per["skipped"], "skipped_metrics.json")

        if cfg.ablations.style_rewrite.enabled:
            _log_style(cfg, store, tags)
        if cfg.ablations.finetune.enabled:
            _log_finetune(cfg, store, tags)
        log_probes(cfg, store, tags)
        log_experiment_pointwise(cfg, store, tags)
        _log_leaderboard(store, tags)
        run_id = parent.info.run_id
        experiment_id = parent.info.experiment_id
        uri = mlflow.get_tracking_uri()
        # The run folder, its page and the console show the URI without a password it may carry.
        result = {"run_id": run_id, "experiment_id": experiment_id, "tracking_uri": redact_uri(uri)}
        result["run_url"] = run_url(uri, experiment_id, run_id)
        if traces and traces["rows"]:  # the run's page links the judgments and the usual questions
            from judgebias.tracking.judgment_traces import trace_questions, traces_page

            page = traces_page(uri, experiment_id)
            result["traces"] = {"rows": int(traces["rows"]), "page": page,
                                "questions": trace_questions(traces, page)}
        # The run's description in the UI: the headline figures with their intervals, not 160 rows.
        mlflow.set_tag("mlflow.note.content", summary_markdown(cfg, store, result) + traces_links(traces)
                       + "\n\n" + COMPARE_JUDGES + "\n")
        open_experiment_on(experiment_id, traces=bool(traces and traces["rows"]))
    store.write_json(RunLayout.mlflow_link, result)  # the nightly annotation sync links its runs to this one
    return result


def _attention_metrics(cfg: ExperimentConfig, store: RunStore) -> dict[str, float]:
    """``<judge>.attention_own_minus_other.mean`` (over layers and pairs), ``.pairs`` and ``.layer_<k>``."""
    from judgebias.stages import attention_own_minus_other

    out: dict[str, float] = {}
    for judge, own in cfg.self_map.items():
        name = RunLayout.attention(judge)
        if store.has(name):
            values = attention_own_minus_other(store.read_frame(name), own)
            out.update({f"{judge}.attention_own_minus_other.{k}": v for k, v in values.items()})
    return out


def _log_leaderboard(store: RunStore, tags: dict) -> None:
    """The generators' leaderboard (when the run has one) in its own nested run: its numbers, JSON
    and plots under the names ``judgebias leaderboard`` logs."""
    from judgebias.tracking.log_leaderboard import log_leaderboard

    layout = RunLayout()
    if not store.has(layout.leaderboard):
        return
    with mlflow_run("leaderboard", tags={**tags, "judgebias.kind": "leaderboard"}):
        log_leaderboard(store.read_json(layout.leaderboard))
        _log_pngs(store.path(layout.leaderboard_plots), "plots")


def _log_ablation(cfg: ExperimentConfig, store: RunStore, tags: dict, name: str, base: RunLayout,
                  params: Callable[[dict], dict[str, Any]], body: Callable[[dict], None]) -> None:
    """One ablation's MLflow run, when its comparison was written: its params (``params`` of the
    comparison, then the config hash its folder is keyed by), what ``body`` logs of the comparison,
    the comparison itself and the ablation's plots."""
    import mlflow

    if not store.has(base.comparison):
        return
    comp = store.read_json(base.comparison)
    run_tags = {**tags, "judgebias.kind": "ablation", "judgebias.ablation": name}
    with mlflow_run(f"ablation:{name}", tags=run_tags):
        log_params_dict({**params(comp), "ablation_hash": cfg.ablation_hash(name)})
        body(comp)
        mlflow.log_dict(comp, "comparison.json")
        _log_pngs(store.path(base.plots), "plots")


def _log_style(cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    base, rw = RunLayout.style(cfg), cfg.ablations.style_rewrite

    def params(comp: dict) -> dict[str, Any]:
        return {"rewriter": rw.model, "styles": ",".join(rw.styles), "embedder": rw.embedder,
                "sample": str(rw.sample), "excluded_from_gold": ",".join(comp["excluded_from_gold"])}

    def body(comp: dict) -> None:
        values = comparison_metrics(comp)
        if store.has(base.semantic):
            sem = store.read_frame(base.semantic)
            for style, part in sem.groupby("style"):
                values[f"semantic_cosine.{style}.mean"] = float(part["cosine"].mean())
                values[f"semantic_cosine.{style}.min"] = float(part["cosine"].min())
                values[f"semantic_cosine.{style}.n"] = float(len(part))
            log_files([store.path(base.semantic)], "semantic")
        log_metrics_dict(values)
        for style in rw.styles:
            variant = RunLayout.style(cfg, style)
            if store.has(variant.table):
                log_files([store.path(variant.table)], f"tables/{style}")
            _log_pngs(store.path(variant.plots), f"plots/{style}")

    _log_ablation(cfg, store, tags, "style_rewrite", base, params, body)


def _log_finetune(cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    import mlflow

    base, ft = RunLayout.finetune(cfg), cfg.ablations.finetune

    def params(comp: dict) -> dict[str, Any]:
        return {"generators": ",".join(cfg.finetune_generators), "data": ft.data, "steps": ft.steps,
                "lr": ft.lr, "lora_r": ft.lora.r, "lora_alpha": ft.lora.alpha,
                "target_modules": ",".join(ft.lora.target_modules), "batch_size": ft.batch_size,
                "max_length": ft.max_length}

    def body(comp: dict) -> None:
        log_metrics_dict(comparison_metrics(comp))
        for gen in cfg.finetune_generators:
            name = base.adapter_record(gen)
            if not store.has(name):
                continue
            info = store.read_json(name)
            for step, loss in enumerate(info.get("losses", []), 1):
                log_metrics_dict({f"{gen}.train_loss": loss}, step=step)
            log_metrics_dict({f"{gen}.trainable_params": float(info.get("trainable_params", 0))})
            mlflow.log_artifacts(info["adapter_dir"], artifact_path=f"adapters/{gen}")
        if store.has(base.table):
            log_files([store.path(base.table)], "table")

    _log_ablation(cfg, store, tags, "finetune", base, params, body)


def _log_params(params: dict[str, Any]) -> None:
    import mlflow

    items = list(safe_params(params).items())
    for i in range(0, len(items), 90):  # a REST batch takes at most 100 params
        mlflow.log_params(dict(items[i : i + 90]))
