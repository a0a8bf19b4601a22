"""MLflow child runs of the probes (``judgebias.stages.probes``, ``judgebias.stages.pointwise_probes``;
every probe ``judgebias.parts`` declares): one per probe, its declared config fields as params, its
figures as ``<judge>.<perturbation>.robustness_rate`` / ``.shift``, ``<judge>.self_recognition`` /
``.recognition_preference`` and ``<judge>.<pointwise probe>.unchanged_rate`` / ``.score_shift`` (each
with ``.ci_low``, ``.ci_high``, ``.n``), the JSON and the plots. The pointwise judges' own figures are
logged by ``judgebias.tracking.log_pointwise.log_experiment_pointwise``."""

from __future__ import annotations

from judgebias import parts
from judgebias.config.experiment import ExperimentConfig
from judgebias.parts import Part
from judgebias.reporting.experiment_summary import probe_results
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.tracking.log_analysis import estimate_metrics, log_files, log_metrics_dict, log_params_dict


def probe_metrics(part: Part, result: dict) -> dict[str, float]:
    """A probe's figures as MLflow metrics, named by its declaration (``judgebias.parts``)."""
    out: dict[str, float] = {}
    for name, est in part.mlflow_metrics_of(result).items():
        out.update(estimate_metrics(name, est))
    return out


def log_probes(cfg: ExperimentConfig, store: RunStore, tags: dict) -> None:
    """Inside the experiment's parent run: one nested run per probe that has its figures."""
    import mlflow

    from judgebias.tracking.mlflow_run import mlflow_run

    for kind, result in probe_results(cfg, store).items():
        part = parts.PARTS.get(kind)
        if part is None or part.kind != "probe":  # the pointwise judges' figures: log_pointwise
            continue
        with mlflow_run(f"probe:{kind}", tags={**tags, "judgebias.kind": "probe", "judgebias.probe": kind}):
            log_params_dict({**part.mlflow_params(cfg), "probe_hash": part.key(cfg)})
            log_metrics_dict(probe_metrics(part, result))
            mlflow.log_dict(result, "probe.json")
            plots = store.path(RunLayout.of(kind, cfg).plots)
            log_files(sorted(plots.glob("*.png")) if plots.is_dir() else [], "plots")
