"""Chunked judging and generation on a thread pool or a Dask cluster (wiring around
``judgebias.chunks`` and ``judgebias.workers``).

    python -m judgebias.flows.distributed_judging TABLE OUT --model DIR_OR_ALIAS --runner dask --workers 2

or, from another flow or stage, ``judge_in_chunks(pairs, spec, chunk_size=..., task_runner=...)``
and ``generate_in_chunks(prompts, spec, params, ...)`` with a runner from
``judgebias.flows.runtime.task_runners.task_runner_from_config(cfg.task_runner)``. Finished chunks are kept
under ``store_dir`` and every model call is cached by content, so a rerun (or a chunk rescheduled
after a worker died) repeats no finished work.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from judgebias.flows.runtime.task_runners import make_task_runner
from prefect import flow, get_run_logger, task

from judgebias.backends.builder import JudgeSpec, ModelSpec
from judgebias.backends.protocol import Generation, GenerationParams, Prompt
from judgebias.chunks import Chunk, ChunkStore, merge, merge_aligned, shard, shard_prompts
from judgebias.records import Pair
from judgebias.workers import ChunkResult, RunSummary, generate_chunk, generations, judge_chunk, summarize


@task(name="judge-chunk", retries=1, retry_delay_seconds=2)
def judge_chunk_task(chunk: Chunk, spec: JudgeSpec, store_dir: str | None) -> ChunkResult:
    return judge_chunk(chunk, spec, store_dir)


@task(name="generate-chunk", retries=1, retry_delay_seconds=2)
def generate_chunk_task(chunk: Chunk, spec: ModelSpec, params: GenerationParams, template_tag: str,
                        store_dir: str | None) -> ChunkResult:
    return generate_chunk(chunk, spec, params, template_tag, store_dir)


def _run(chunks: list[Chunk], store_dir: str | None, task_runner, task_fn, **kwargs) -> list[ChunkResult]:
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
        runner = task_runner if task_runner is not None else make_task_runner("thread", 1)
        # The runner is used directly, not as a subflow's: a subflow would send every chunk's texts
        # to the Prefect API as flow-run parameters.
        with runner:
            futures = [runner.submit(task_fn, {"chunk": c, **kwargs, "store_dir": store_dir}) for c in todo]
            for f in futures:
                r = f.result()
                done[r.chunk_id] = r
    return [done[c.chunk_id] for c in chunks]


def judge_in_chunks(pairs: Sequence[Pair], spec: JudgeSpec, *, chunk_size: int = 16,
                    task_runner=None, store_dir: str | None = None) -> tuple[list[dict], RunSummary]:
    """Judge ``pairs`` in both orders, ``chunk_size`` pairs per task, on ``task_runner`` (default:
    one thread). Returns the judgment-table rows in the order of ``pairs`` and the run's totals."""
    chunks = shard(list(pairs), chunk_size, spec.task_key())
    results = _run(chunks, store_dir, task_runner, judge_chunk_task, spec=spec)
    return merge(chunks, {r.chunk_id: r.rows for r in results}), summarize(results)


def generate_in_chunks(prompts: Sequence[Prompt], spec: ModelSpec, params: GenerationParams, *,
                       template_tag: str = "", chunk_size: int = 32, task_runner=None,
                       store_dir: str | None = None) -> tuple[list[Generation], RunSummary]:
    """One ``Generation`` per prompt, in order, ``chunk_size`` prompts per task on ``task_runner``.
    ``template_tag`` (the generation template's version) joins the call-cache key."""
    task_key = json.dumps({"model": spec.model_key(), "params": params.key(), "template": template_tag},
                          sort_keys=True)
    chunks = shard_prompts(list(prompts), chunk_size, task_key)
    results = _run(chunks, store_dir, task_runner, generate_chunk_task, spec=spec, params=params,
                   template_tag=template_tag)
    return generations(merge_aligned(chunks, {r.chunk_id: r.rows for r in results})), summarize(results)


@flow(name="distributed-judging", log_prints=True)
def distributed_judging(table: str, out: str, model: str, judge: str | None = None,
                        template: str = "dbg-ab", chunk_size: int = 16, runner: str = "thread",
                        workers: int = 1, address: str | None = None, chat: bool | None = None,
                        batch_size: int = 8, cache_dir: str | None = None,
                        store_dir: str | None = None) -> dict:
    """Judge every pair of the judgment table ``table`` with local model ``model`` and write the
    judgment table ``out``. ``runner``: "thread" or "dask" (``workers`` local processes, or the
    cluster at ``address``). ``store_dir`` (default: ``<out>.chunks``) keeps finished chunks."""
    from judgebias.io import read_table, write_table
    from judgebias.judging import pairs_from_table

    df, exclusions = read_table(table, skip_invalid=True)
    pairs = pairs_from_table(df)
    spec = JudgeSpec(name=judge or Path(model).name, model=model, template=template, chat=chat,
                     batch_size=batch_size, cache_dir=cache_dir)
    store_dir = store_dir or str(Path(out).with_suffix(".chunks"))
    rows, summary = judge_in_chunks(pairs, spec, chunk_size=chunk_size, store_dir=store_dir,
                                    task_runner=make_task_runner(runner, workers, address))
    import pandas as pd

    write_table(pd.DataFrame(rows), out)
    get_run_logger().info(
        "%d pairs in %d chunks (%d already finished): %d model calls, %d cached, %d model loads on "
        "%d process(es), %.2f pairs/s; input exclusions %s, judging exclusions %s", summary.items,
        summary.chunks, summary.chunks_from_store, summary.calls, summary.hits, summary.model_loads,
        len(summary.worker_pids), summary.items_per_second, exclusions, summary.exclusions or "none")
    return {"out": out, **asdict(summary), "pairs_per_second": summary.items_per_second,
            "input_exclusions": exclusions.to_dict()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m judgebias.flows.distributed_judging",
                                description="Judge a judgment table's pairs in chunks on threads or Dask.")
    p.add_argument("table", help="judgment table with the pairs (.jsonl/.parquet/.csv)")
    p.add_argument("out", help="judgment table to write (.jsonl/.parquet)")
    p.add_argument("--model", required=True, help="local model: packaged alias, folder or .gguf")
    p.add_argument("--judge", help="judge name in the table (default: the model's name)")
    p.add_argument("--template", default="dbg-ab")
    p.add_argument("--chunk-size", type=int, default=16, help="pairs per task")
    p.add_argument("--runner", choices=("thread", "dask"), default="thread")
    p.add_argument("--workers", type=int, default=1, help="threads, or local Dask worker processes")
    p.add_argument("--address", help="scheduler address of an existing Dask cluster")
    p.add_argument("--store-dir", help="finished chunks (default: OUT with suffix .chunks)")
    args = p.parse_args(argv)
    summary = distributed_judging(args.table, args.out, args.model, judge=args.judge, template=args.template,
                                  chunk_size=args.chunk_size, runner=args.runner, workers=args.workers,
                                  address=args.address, store_dir=args.store_dir)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
