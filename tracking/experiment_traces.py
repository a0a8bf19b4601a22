"""An experiment's judgments in MLflow's GenAI pages: the run folder's judgment table logged as
traces of the experiment's run, the run page's paragraph that links them, and which tab the
experiment opens on (Traces once judgebias logged some, else Runs). The trace layout itself is
``judgebias.tracking.judgment_traces``; the experiment's other MLflow records are
``judgebias.tracking.experiment``."""

from __future__ import annotations

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore


def log_run_traces(cfg: ExperimentConfig, store: RunStore) -> dict[str, int] | None:
    """With ``tracking.traces`` on, the run folder's judgments as traces of the active run (its
    Traces tab lists them); the run's ``judgebias.traces`` tag says how many. None when off."""
    if not cfg.tracking.traces:
        return None
    import mlflow

    from judgebias.tracking.judgment_traces import log_judgment_traces

    counts = log_judgment_traces(store.read_frame(RunLayout().table), self_map=cfg.own_generators())
    mlflow.set_tag("judgebias.traces", str(counts["rows"]))
    return counts


def traces_links(counts: dict[str, int] | None) -> str:
    """The run page's paragraph on its traces: a link to the experiment's Traces page and, per
    question ("6 judgments where the judge flips with the order"), the filter that finds them;
    empty when no traces were logged. Called inside the run."""
    if not counts:
        return ""
    from judgebias.tracking.judgment_traces import traces_note

    return "\n" + traces_note(counts)


# MLflow 3's UI opens an experiment on the tab its kind says (this experiment tag): Traces for GenAI
# development, Runs for model development. Set only where nobody chose, so a user's choice stands.
KIND_TAG, KIND_SET_BY = "mlflow.experimentKind", "judgebias.experiment_kind"


def open_experiment_on(experiment_id: str, *, traces: bool) -> str:
    """Make the experiment open on its traces where judgebias logged some, else on its runs; a kind
    someone else set is left as it is. Returns the kind the experiment has afterwards."""
    from mlflow import MlflowClient

    client = MlflowClient()
    tags = client.get_experiment(experiment_id).tags
    current = tags.get(KIND_TAG)
    if current is not None and tags.get(KIND_SET_BY) != current:
        return current  # chosen by the user (or MLflow's own inference they confirmed)
    wanted = "genai_development" if traces else "custom_model_development"
    if current == "genai_development" and not traces:
        return current  # a run without traces keeps the earlier runs' traces in view
    if current != wanted:
        client.set_experiment_tag(experiment_id, KIND_TAG, wanted)
        client.set_experiment_tag(experiment_id, KIND_SET_BY, wanted)
    return wanted
