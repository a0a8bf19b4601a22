"""A judgment table judged in chunks on a thread pool or a Dask cluster (the chunk tasks and their
plumbing are ``judgebias.tasks.chunks``; the work itself ``judgebias.engine.chunks`` and
``judgebias.engine.workers``).

    python -m judgebias.flows.distributed_judging TABLE OUT --model DIR_OR_ALIAS --runner dask --workers 2

From code: ``judgebias.tasks.chunks.judge_in_chunks(pairs, spec, chunk_size=..., task_runner=...)``
and ``generate_in_chunks(prompts, spec, params, ...)`` with a runner from
``judgebias.flows.runtime.task_runners.task_runner_from_config(cfg.task_runner)``. Finished chunks are kept
under ``store_dir`` and every model call is cached by content, so a rerun (or a chunk rescheduled
after a worker died) repeats no finished work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger

from judgebias.backends.builder import JudgeSpec
from judgebias.flows.runtime.task_runners import make_task_runner
from judgebias.tasks.chunks import judge_in_chunks


@flow(name="distributed-judging", log_prints=True)
def distributed_judging(table: str, out: str, model: str, judge: str | None = None,
                        template: str = "dbg-ab", chunk_size: int = 16, runner: str = "thread",
                        workers: int = 1, address: str | None = None, chat: bool | None = None,
                        batch_size: int = 8, cache_dir: str | None = None,
                        store_dir: str | None = None) -> dict:
    """Judge every pair of the judgment table ``table`` with local model ``model`` and write the
    judgment table ``out``. ``runner``: "thread" or "dask" (``workers`` local processes, or the
    cluster at ``address``). ``store_dir`` (default: ``<out>.chunks``) keeps finished chunks."""
    from judgebias.engine.pairwise import pairs_from_table
    from judgebias.tables.files import read_table, write_table

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
