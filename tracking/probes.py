"""MLflow child runs of the probes (``judgebias.stages.probes``, ``judgebias.stages.pointwise_probes``):
one per probe, its figures as ``<judge>.<perturbation>.robustness_rate`` / ``.shift``,
``<judge>.self_recognition`` / ``.recognition_preference`` and ``<judge>.<pointwise probe>.unchanged_rate``
/ ``.score_shift`` (each with ``.ci_low``, ``.ci_high``, ``.n``), the JSON and the plots. The pointwise
judges' own figures are logged by ``judgebias.tracking.log_pointwise.log_experiment_pointwise``."""

from __future__ import annotations

from judgebias.config.experiment import ExperimentConfig
from judgebias.reporting.experiment_summary import probe_results
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tracking.log_analysis import estimate_metrics, log_files, log_metrics_dict, log_params_dict


def probe_metrics(result: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for judge, figures in (result.get("judges") or {}).items():
        for name, entry in figures.items():
            # a perturbation or a pointwise probe: its two figures
            if {"robustness_rate", "shift", "unchanged_rate", "score_shift"} & set(entry):
                for key, est in entry.items():
                    if est.get("value") is not None:
                        out.update(estimate_metrics(f"{judge}.{name.split('@')[0]}.{key}", est))
            elif entry.get("value") is not None:
                out.update(estimate_metrics(f"{judge}.{name}", entry))
    return out


def log_probes(cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    """Inside the experiment's parent run: one nested run per probe that has its figures."""
    import mlflow

    from judgebias.tracking.mlflow_run import mlflow_run

    pert = cfg.probes.perturbations
    params = {
        "perturbations": {"perturbations": ",".join(pert.names), "sample": str(pert.sample),
                          "seed": pert.seed},
        "self_recognition": {"sample": str(cfg.probes.self_recognition.sample)},
        "pointwise_probes": {"probes": ",".join(cfg.probes.pointwise.names),
                             "sample": str(cfg.probes.pointwise.sample), "seed": cfg.probes.pointwise.seed},
    }
    layouts = {"perturbations": RunLayout.perturbation(cfg), "self_recognition": RunLayout.recognition(cfg),
               "pointwise_probes": RunLayout.pointwise_probes(cfg)}
    for kind, result in probe_results(cfg, store).items():
        if kind not in params:  # the pointwise judges' figures: a run of their own (log_pointwise)
            continue
        with mlflow_run(f"probe:{kind}", tags={**tags, "judgebias.kind": "probe", "judgebias.probe": kind}):
            log_params_dict({**params[kind], "probe_hash": cfg.probe_hash(kind.removesuffix("_probes"))})
            log_metrics_dict(probe_metrics(result))
            mlflow.log_dict(result, "probe.json")
            plots = store.path(layouts[kind].plots)
            log_files(sorted(plots.glob("*.png")) if plots.is_dir() else [], "plots")
