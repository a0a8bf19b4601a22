"""Prefect tasks of the chunked route: one chunk of pairs judged, or one chunk of prompts generated,
by a worker that keeps its model loaded (``judgebias.engine.workers``), and the plumbing that cuts the
work (``judgebias.engine.chunks``), runs the unfinished chunks on a task runner and merges them back.

Two ways to place the chunks:

- ``judge_in_chunks`` / ``generate_in_chunks`` with ``task_runner`` (default: one thread): the
  runner is entered here, as ``judgebias.flows.distributed_judging`` does;
- ``FlowChunks``: the chunks are submitted to the task runner of the flow run they are called
  from. The experiment hands it to its generation and judging stages when its task runner is Dask
  (``judgebias.tasks.experiment``), so one stage spreads its chunks over every worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from prefect import task

from judgebias.backends.builder import JudgeSpec, ModelSpec
from judgebias.backends.protocol import Generation, GenerationParams, Prompt
from judgebias.engine.chunks import Chunk, ChunkStore, merge, merge_aligned, shard, shard_prompts
from judgebias.engine.workers import (
    ChunkResult,
    RunSummary,
    generate_chunk,
    generations,
    judge_chunk,
    summarize,
)
from judgebias.tables.records import Pair


@task(name="judge-chunk", retries=1, retry_delay_seconds=2)
def judge_chunk_task(chunk: Chunk, spec: JudgeSpec, store_dir: str | None) -> ChunkResult:
    return judge_chunk(chunk, spec, store_dir)


@task(name="generate-chunk", retries=1, retry_delay_seconds=2)
def generate_chunk_task(chunk: Chunk, spec: ModelSpec, params: GenerationParams, template_tag: str,
                        store_dir: str | None) -> ChunkResult:
    return generate_chunk(chunk, spec, params, template_tag, store_dir)


# Runs the unfinished chunks (with the task's other arguments) and gives back their results.
Submit = Callable[[list[Chunk], dict], list[ChunkResult]]


def on_runner(task_runner, task_fn) -> Submit:
    """Chunks submitted to ``task_runner`` (default: one thread), entered for this call only. The
    runner is used directly, not as a subflow's: a subflow would send every chunk's texts to the
    Prefect API as flow-run parameters."""
    from prefect.task_runners import ThreadPoolTaskRunner

    def submit(todo: list[Chunk], kwargs: dict) -> list[ChunkResult]:
        runner = task_runner if task_runner is not None else ThreadPoolTaskRunner(max_workers=1)
        with runner:
            futures = [runner.submit(task_fn, {"chunk": c, **kwargs}) for c in todo]
            return [f.result() for f in futures]

    return submit


def on_flow_runner(task_fn) -> Submit:
    """Chunks submitted to the task runner of the flow run this is called from (also from a task
    that runs inline in it): on a Dask runner they spread over the flow's workers."""

    def submit(todo: list[Chunk], kwargs: dict) -> list[ChunkResult]:
        futures = [task_fn.submit(chunk=c, **kwargs) for c in todo]
        return [f.result() for f in futures]

    return submit


def run_chunks(chunks: list[Chunk], store_dir: str | None, submit: Submit, **kwargs) -> list[ChunkResult]:
    """Every chunk's result, in chunk order: finished ones from the store, the rest computed."""
    store = ChunkStore(store_dir) if store_dir else None
    done: dict[str, ChunkResult] = {}
    if store is not None:  # finished chunks are not even shipped to a worker
        for c in chunks:
            rows = store.get(c.chunk_id)
            if rows is not None:
                done[c.chunk_id] = ChunkResult(c.chunk_id, rows, from_store=True)
    todo = [c for c in chunks if c.chunk_id not in done]
    if todo:
        for r in submit(todo, {**kwargs, "store_dir": store_dir}):
            done[r.chunk_id] = r
    return [done[c.chunk_id] for c in chunks]


def judge_in_chunks(pairs: Sequence[Pair], spec: JudgeSpec, *, chunk_size: int = 16,
                    task_runner=None, store_dir: str | None = None,
                    submit: Submit | None = None) -> tuple[list[dict], RunSummary]:
    """Judge ``pairs`` in both orders, ``chunk_size`` pairs per task, on ``task_runner`` (default:
    one thread) or by ``submit``. Returns the judgment-table rows in the order of ``pairs`` and the
    run's totals."""
    chunks = shard(list(pairs), chunk_size, spec.task_key())
    results = run_chunks(chunks, store_dir, submit or on_runner(task_runner, judge_chunk_task), spec=spec)
    return merge(chunks, {r.chunk_id: r.rows for r in results}), summarize(results)


def generate_in_chunks(prompts: Sequence[Prompt], spec: ModelSpec, params: GenerationParams, *,
                       template_tag: str = "", chunk_size: int = 32, task_runner=None,
                       store_dir: str | None = None,
                       submit: Submit | None = None) -> tuple[list[Generation], RunSummary]:
    """One ``Generation`` per prompt, in order, ``chunk_size`` prompts per task on ``task_runner``
    or by ``submit``. ``template_tag`` (the generation template's version) joins the call-cache key."""
    task_key = json.dumps({"model": spec.model_key(), "params": params.key(), "template": template_tag},
                          sort_keys=True)
    chunks = shard_prompts(list(prompts), chunk_size, task_key)
    results = run_chunks(chunks, store_dir, submit or on_runner(task_runner, generate_chunk_task),
                         spec=spec, params=params, template_tag=template_tag)
    return generations(merge_aligned(chunks, {r.chunk_id: r.rows for r in results})), summarize(results)


class FlowChunks:
    """The chunk route of the experiment's stages (``judgebias.engine.workers.ChunkRoute``): every chunk a
    Prefect task on the calling flow's task runner. No chunk store: the run folder and the call
    cache already make a rerun repeat no finished work."""

    def judge(self, pairs: Sequence[Pair], spec: JudgeSpec, chunk_size: int) -> tuple[list[dict], RunSummary]:
        return judge_in_chunks(pairs, spec, chunk_size=chunk_size, submit=on_flow_runner(judge_chunk_task))

    def generate(self, prompts: Sequence[Prompt], spec: ModelSpec, params: GenerationParams,
                 template_tag: str, chunk_size: int) -> tuple[list[Generation], RunSummary]:
        return generate_in_chunks(prompts, spec, params, template_tag=template_tag, chunk_size=chunk_size,
                                  submit=on_flow_runner(generate_chunk_task))
