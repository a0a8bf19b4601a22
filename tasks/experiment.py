"""Prefect tasks of the experiment: each calls exactly one function of ``judgebias.stages`` (or of
``tracking.experiment`` for MLflow) and logs one line of progress.

Caching policy: NONE at the Prefect level (``NO_CACHE``), on purpose. Resumability comes from two
content-addressed layers that survive a killed process: every stage's output in the run folder
(keyed by the config hash) and every model call in the ``CachedBackend``'s SQLite file. Prefect's
own result cache would pickle large frames a second time and key them on task inputs, which are
the same objects these layers already key precisely. No task is retried automatically: a model
failure is recorded per item (excluded and counted), and a crash should be seen, then resumed.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from judgebias import stages


def _log(message: str) -> None:
    get_run_logger().info(message)


def stage_task(fn):
    """A Prefect task named after the stage function; no caching, no retries."""
    return task(fn, name=fn.__name__, cache_policy=NO_CACHE, retries=0, log_prints=False)


@stage_task
def load_instructions(cfg, store):
    df = stages.load_instructions(cfg, store)
    _log(f"{len(df)} instructions from {cfg.dataset.source}")
    return df


@task(name="generate_responses", cache_policy=NO_CACHE, task_run_name="generate_responses[{generator}]")
def generate_responses(cfg, store, generator: str, instructions, prefix: str = "", adapter: Any = None):
    return stages.generate_responses(
        cfg, store, generator, instructions, prefix=prefix, adapter=adapter, progress=_log
    )


@stage_task
def build_pairs(cfg, store, responses: dict, prefix: str = ""):
    return stages.build_pairs(cfg, store, responses, prefix=prefix, progress=_log)


@task(name="judge_pairs", cache_policy=NO_CACHE, task_run_name="judge_pairs[{judge}]")
def judge_pairs(cfg, store, judge: str, pairs, prefix: str = "", adapter: Any = None,
                template: str | None = None):
    return stages.judge_pairs(cfg, store, judge, pairs, prefix=prefix, adapter=adapter, template=template,
                              progress=_log)


@task(name="dtype_fidelity", cache_policy=NO_CACHE, task_run_name="dtype_fidelity[{judge}]")
def dtype_fidelity(cfg, store, judge: str, judgments):
    return stages.dtype_fidelity(cfg, store, judge, judgments, progress=_log)


@task(name="perplexity_analysis", cache_policy=NO_CACHE, task_run_name="perplexity_analysis[{judge}]")
def perplexity_analysis(cfg, store, judge: str, pairs):
    return stages.perplexity_analysis(cfg, store, judge, pairs, progress=_log)


@task(name="attention_analysis", cache_policy=NO_CACHE, task_run_name="attention_analysis[{judge}]")
def attention_analysis(cfg, store, judge: str, pairs):
    return stages.attention_analysis(cfg, store, judge, pairs, progress=_log)


@stage_task
def assemble_table(cfg, store, judgments: dict, perplexity: dict | None = None, prefix: str = ""):
    return stages.assemble_table(cfg, store, judgments, perplexity, prefix=prefix, progress=_log)


@stage_task
def aggregate_gold(cfg, store, table, prefix: str = "", exclude: tuple[str, ...] = ()):
    return stages.aggregate_gold(cfg, store, table, prefix=prefix, exclude=exclude, progress=_log)


@stage_task
def compute_metrics(cfg, store, table, prefix: str = "", exclude: tuple[str, ...] = ()):
    return stages.compute_metrics(cfg, store, table, prefix=prefix, exclude=exclude, progress=_log)


@task(name="rewrite_style", cache_policy=NO_CACHE, task_run_name="rewrite_style[{style}]")
def rewrite_style(cfg, store, style: str, responses: dict):
    return stages.rewrite_style(cfg, store, style, responses, progress=_log)


@stage_task
def semantic_preservation(cfg, store, rewrites: dict):
    return stages.semantic_preservation(cfg, store, rewrites, progress=_log)


@stage_task
def compare_style(cfg, store, before_table, after_tables: dict):
    return stages.compare_style(cfg, store, before_table, after_tables, progress=_log)


@task(name="finetune_generator", cache_policy=NO_CACHE, task_run_name="finetune_generator[{generator}]")
def finetune_generator(cfg, store, generator: str):
    return stages.finetune_generator(cfg, store, generator, progress=_log)


@stage_task
def finetune_instructions(cfg, instructions):
    return stages.finetune_instructions(cfg, instructions)


@stage_task
def compare_finetune(cfg, store, before_table, after_table):
    return stages.compare_finetune(cfg, store, before_table, after_table, progress=_log)


@stage_task
def log_to_mlflow(cfg, store, config_source: str, started_at: float | None = None):
    from tracking.experiment import log_experiment

    result = log_experiment(cfg, store, config_source=config_source, started_at=started_at)
    _log(
        f"MLflow run {result['run_id']} in experiment {cfg.tracking.experiment!r} ({result['tracking_uri']})"
    )
    return result


@stage_task
def publish_summary(cfg, store, tracking: dict):
    from prefect.artifacts import create_markdown_artifact

    from judgebias.report import summary_markdown

    markdown = summary_markdown(cfg, store, tracking)
    create_markdown_artifact(
        markdown=markdown,
        key=f"judgebias-{cfg.name.lower()}"[:60].replace("_", "-").replace(".", "-"),
        description=f"judgebias experiment {cfg.name}",
    )
    return markdown


@stage_task
def sync_annotations(cfg, store, push: bool = True):
    from annotation.experiment import sync_annotations as sync

    return sync(cfg, store, push=push, progress=_log)


@stage_task
def annotated_metrics(cfg, store, merged_table: str):
    return stages.annotated_metrics(cfg, store, merged_table, progress=_log)


@stage_task
def perturbed_pairs(cfg, store, pairs):
    return stages.perturbed_pairs(cfg, store, pairs)


@stage_task
def perturbation_report(cfg, store, before: dict, after: dict, perturbed):
    return stages.perturbation_report(cfg, store, before, after, perturbed, progress=_log)


@stage_task
def recognition_report(cfg, store, recognised: dict, judgments: dict):
    return stages.recognition_report(cfg, store, recognised, judgments, progress=_log)
