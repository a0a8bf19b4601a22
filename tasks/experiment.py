"""Prefect tasks of the experiment: the functions of ``judgebias.stages`` themselves, made tasks by
``stage_task`` (which hands them this task's logger as their progress callback); the few tasks
written out below call MLflow, Label Studio or Prefect's artifacts.

Caching policy: NONE at the Prefect level (``NO_CACHE``), on purpose. Resumability comes from two
content-addressed layers that survive a killed process: every stage's output in the run folder
(keyed by the config hash) and every model call in the ``CachedBackend``'s SQLite file. Prefect's
own result cache would pickle large frames a second time and key them on task inputs, which are
the same objects these layers already key precisely. No task is retried automatically: a model
failure is recorded per item (excluded and counted), and a crash should be seen, then resumed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

from judgebias import stages
from judgebias.runs import interrupts
from judgebias.runs.store import watch
from judgebias.tasks.stage_lines import report_stage


def _log(message: str) -> None:
    with contextlib.suppress(MissingContextError):  # a stage called as a plain function (``task.fn``)
        get_run_logger().info(message)


# Names of the stages that take a chunk route (generation and judging): on a Dask task runner they
# run in the flow's process and spread their chunks over the workers (``sharded``).
_SHARDABLE: set[str] = set()


def chunk_route(cfg):
    """Where a shardable stage's chunks run under ``cfg``: tasks on the flow's Dask runner, or None
    (the stage calls its model itself, in its own task)."""
    from judgebias.tasks.chunks import FlowChunks

    return FlowChunks() if cfg.task_runner.kind == "dask" else None


def sharded(task_obj, cfg) -> bool:
    """Whether ``task_obj`` spreads its chunks over the workers under ``cfg``: then the flow calls
    it in its own process (a task submitted to a Dask worker cannot submit its chunks to the others)."""
    return task_obj.name in _SHARDABLE and cfg.task_runner.kind == "dask"


# A stage about one generator, judge, style or probe takes it third; its task runs are named after it.
SUBJECTS = ("generator", "judge", "style", "probe")


def stage_task(fn, run_name: str | None = None, *, resumable: bool = True):
    """``fn`` as a Prefect task named after it (``run_name``: per-run name from its parameters;
    by default "judge_pairs[{judge}]" for a stage about one of ``SUBJECTS``); no caching, no
    retries. A stage that takes ``progress`` gets the task's logger, one that takes ``chunks`` the
    config's chunk route (``chunk_route``); Prefect sees the stage's parameters without them. When
    it ends, one console line says whether it ran or read its output back from the run folder
    (``judgebias.tasks.stage_lines``); ``resumable=False``: a task that always runs (MLflow, the
    summary, Label Studio)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters)
    if run_name is None and len(params) > 2 and params[2] in SUBJECTS:
        run_name = f"{fn.__name__}[{{{params[2]}}}]"
    takes_progress = "progress" in sig.parameters
    takes_chunks = "chunks" in sig.parameters
    if takes_chunks:
        _SHARDABLE.add(fn.__name__)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        said: list[str] = []

        def progress(message: str) -> None:
            said.append(message)
            _log(message)

        bound = sig.bind_partial(*args, **kwargs).arguments
        if takes_progress:
            kwargs = {**kwargs, "progress": progress}
        if takes_chunks:
            kwargs = {**kwargs, "chunks": chunk_route(args[0] if args else kwargs["cfg"])}
        interrupts.check()  # a Ctrl-C the interpreter swallowed stops the run before this stage
        start = time.perf_counter()
        with watch() as seen:
            out = fn(*args, **kwargs)
        interrupts.check()
        outcome = seen.outcome if resumable else "ran"
        if outcome is not None:
            name = (run_name or fn.__name__).format(**bound)
            report_stage(outcome, name, bound.get("variant"), time.perf_counter() - start,
                         said[-1] if said else "")
        return out

    # Annotations dropped: they are strings naming the stages' own imports, which Prefect would
    # try to resolve here.
    run.__signature__ = sig.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for n, p in sig.parameters.items()
                    if n not in ("progress", "chunks")],
        return_annotation=inspect.Signature.empty)
    return task(run, name=fn.__name__, task_run_name=run_name, cache_policy=NO_CACHE, retries=0,
                log_prints=False)


# The stages the flows run, each a task of the same name (a declaration per line, written out so
# that `t.judge_pairs` is found where it is defined; run names follow from the stage's subject).
generate_responses = stage_task(stages.generate_responses)
build_pairs = stage_task(stages.build_pairs)
judge_pairs = stage_task(stages.judge_pairs)
dtype_fidelity = stage_task(stages.dtype_fidelity)
perplexity_analysis = stage_task(stages.perplexity_analysis)
attention_analysis = stage_task(stages.attention_analysis)
assemble_table = stage_task(stages.assemble_table)
aggregate_gold = stage_task(stages.aggregate_gold)
compute_metrics = stage_task(stages.compute_metrics)
compute_leaderboard = stage_task(stages.compute_leaderboard)
rewrite_style = stage_task(stages.rewrite_style)
semantic_preservation = stage_task(stages.semantic_preservation)
compare_style = stage_task(stages.compare_style)
finetune_generator = stage_task(stages.finetune_generator)
finetune_instructions = stage_task(stages.finetune_instructions)
compare_finetune = stage_task(stages.compare_finetune)
annotated_metrics = stage_task(stages.annotated_metrics)
probe_pairs = stage_task(stages.probe_pairs)
probe_result = stage_task(stages.probe_result)
judge_responses = stage_task(stages.judge_responses)
pointwise_report = stage_task(stages.pointwise_report)
pointwise_probe_judgments = stage_task(stages.pointwise_probe_judgments)
pointwise_probe_report = stage_task(stages.pointwise_probe_report)


@stage_task
def load_instructions(cfg, store):
    df = stages.load_instructions(cfg, store)
    _log(f"{len(df)} instructions from {cfg.dataset.source}")
    return df


@functools.partial(stage_task, resumable=False)
def log_to_mlflow(cfg, store, config_source: str, started_at: float | None = None):
    from judgebias.tracking.experiment import log_experiment

    result = log_experiment(cfg, store, config_source=config_source, started_at=started_at)
    _log(
        f"MLflow run {result['run_id']} in experiment {cfg.tracking.experiment!r} ({result['tracking_uri']})"
    )
    return result


@functools.partial(stage_task, resumable=False)
def publish_summary(cfg, store, tracking: dict):
    from prefect.artifacts import create_markdown_artifact

    from judgebias.reporting.experiment_summary import summary_markdown
    from judgebias.stages.results import refresh_report

    refresh_report(cfg, store)  # the run's page links its MLflow run (mlflow.json is written now)
    markdown = summary_markdown(cfg, store, tracking)
    create_markdown_artifact(
        markdown=markdown,
        key=f"judgebias-{cfg.name.lower()}"[:60].replace("_", "-").replace(".", "-"),
        description=f"judgebias experiment {cfg.name}",
    )
    return markdown


@functools.partial(stage_task, resumable=False)
def sync_annotations(cfg, store, push: bool = True):
    from judgebias.annotation.experiment import sync_annotations as sync

    return sync(cfg, store, push=push, progress=_log)
