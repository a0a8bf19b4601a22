"""Throughput of chunked judging on different task runners: in-process threads vs local Dask clusters.

    python benchmarks/bench_distributed.py                       # SmolLM2-135M, 24 PandaLM pairs
    python benchmarks/bench_distributed.py --configs thread:1,dask:1,dask:2 --pairs 24 --chunk-size 4
    python benchmarks/bench_distributed.py --markdown docs/scaling-figures.md

Every configuration judges the same real pairs (the PandaLM sample in tests/data) in both orders
with a fresh, empty call cache, so every call reaches the model. Printed per configuration:
wall time of the whole run (cluster start and model loads included), the busy window (first
chunk start to last chunk end), pairs/s and prompt tokens/s over that window, model loads, worker
processes, the largest difference in P(A) from the first configuration (results must not depend
on placement) and the machine's load average when it ended (other work on the machine skews
everything).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pairs(n: int):
    from judgebias.engine.pairwise import pairs_from_table
    from judgebias.importers import import_dataset

    table, _ = import_dataset("pandalm", ROOT / "tests" / "data" / "pandalm")
    pairs = pairs_from_table(table)
    if n > len(pairs):
        raise SystemExit(f"--pairs {n}: the sample has {len(pairs)} pairs")
    return pairs[:n]


def _prompt_tokens(folder: str, template: str, pairs) -> int:
    """Tokens of every judging prompt (both orders), as the model reads them."""
    from transformers import AutoTokenizer

    from judgebias.prompts import judge_template

    tok = AutoTokenizer.from_pretrained(folder)
    t = judge_template(template)
    chat = bool(getattr(tok, "chat_template", None))
    total = 0
    for p in pairs:
        for order in ("ab", "ba"):
            prompt = t.build(p.prompt, *p.shown(order), chat=chat)
            if prompt.text is not None:
                text = prompt.text + prompt.assistant_prefix
            else:
                messages = [{"role": m.role, "content": m.content} for m in prompt.messages]
                text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                text += prompt.assistant_prefix
            total += len(tok(text, add_special_tokens=prompt.text is not None).input_ids)
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="local judge (alias, folder, .gguf)")
    p.add_argument("--template", default="dbg-ab")
    p.add_argument("--pairs", type=int, default=24)
    p.add_argument("--chunk-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--configs", default="thread:1,dask:1,dask:2",
                   help="comma-separated KIND:WORKERS (thread = in this process, dask = local processes)")
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args(argv)

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from prefect import flow

    from judgebias.backends import loading as models
    from judgebias.backends.builder import JudgeSpec
    from judgebias.engine.workers import release_worker_backends
    from judgebias.flows.runtime.task_runners import make_task_runner
    from judgebias.tasks.chunks import judge_in_chunks

    pairs = _pairs(args.pairs)
    # Dequantize/resolve once up front so no configuration pays for it.
    _, folder = models.local_folder(args.model)
    tokens = _prompt_tokens(folder, args.template, pairs)
    configs = [(kind, int(n)) for kind, n in (c.split(":") for c in args.configs.split(","))]

    @flow(name="bench-distributed")
    def run(kind: str, workers: int, cache_dir: str):
        spec = JudgeSpec(name="bench-judge", model=folder, template=args.template,
                         batch_size=args.batch_size, cache_dir=cache_dir)
        return judge_in_chunks(pairs, spec, chunk_size=args.chunk_size,
                               task_runner=make_task_runner(kind, workers))

    lines = [
        f"model `{args.model}`, {len(pairs)} pairs x 2 orders, chunk size {args.chunk_size}, "
        f"batch size {args.batch_size}, {tokens} prompt tokens in all, {os.cpu_count()} CPU cores, "
        f"load average at start {os.getloadavg()[0]:.1f}",
        "",
        "| runner | workers | wall s | busy s | pairs/s (busy) | prompt tok/s (busy) | model loads "
        "| processes | max abs diff P(A) | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    reference = None
    for kind, workers in configs:
        release_worker_backends()  # an in-process run must load its model like the others
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache_dir:
            start = time.perf_counter()
            rows, summary = run(kind, workers, cache_dir)
            wall = time.perf_counter() - start
        p_a = [r["p_a"] for r in rows]
        if reference is None:
            reference = p_a
        diff = max((abs(a - b) for a, b in zip(p_a, reference, strict=True)
                    if not (math.isnan(a) or math.isnan(b))), default=math.nan)
        line = (f"| {kind} | {workers} | {wall:.1f} | {summary.busy_seconds:.1f} | "
                f"{summary.items_per_second:.2f} | {tokens / summary.busy_seconds:.0f} | "
                f"{summary.model_loads} | {len(summary.worker_pids)} | {diff:.1e} | "
                f"{os.getloadavg()[0]:.1f} |")
        lines.append(line)
        print(line, flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
