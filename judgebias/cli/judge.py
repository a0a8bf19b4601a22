"""``judgebias judge``: fill a judgment table's p_a / verdict / perplexity columns with one judge."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from judgebias.cli.progress import counter as _progress
from judgebias.cli.progress import ended_line


def judge_spec(judge: str, backend: str, *, base_url: str | None, name: str | None, gguf_file: str | None,
               device: str | None, batch_size: int, token_budget: int | None, prefix_mode: str = "none",
               dtype: str = "auto", template: str = "dbg-ab", cache_dir: Path | None = None,
               quantize: str = "none", chat: bool | None = None, option_tokenizer: str | None = None,
               concurrency: str = "adaptive", rpm: float | None = None, tpm: float | None = None):
    """The judge the options describe, as the one spec every command builds backends from."""
    from judgebias.backends.builder import JudgeSpec

    try:
        return JudgeSpec(name=name or "", model=judge, backend=backend, base_url=base_url,
                         gguf_file=gguf_file, device=device, batch_size=batch_size, max_batch=batch_size,
                         token_budget=token_budget, prefix_mode=prefix_mode, dtype=dtype, template=template,
                         cache_dir=str(cache_dir) if cache_dir else None, quantize=quantize, chat=chat,
                         option_tokenizer=option_tokenizer, concurrency=_concurrency(concurrency),
                         rpm=rpm, tpm=tpm)
    except ValueError as exc:
        message = str(exc).replace("model '': ", "").replace("dtype", "--dtype")
        raise typer.BadParameter(message.replace("unknown quantization", "unknown --quantize")) from None


def _concurrency(value: str) -> int | str:
    from judgebias.backends.rate_control import parse_concurrency

    try:
        return parse_concurrency(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--concurrency") from None


# Most requests in one Batch API job (OpenAI's limit per input file).
BATCH_API_ITEMS = 50_000
# Items per call-cache batch with --backend openai: each batch waits for its slowest call, so a
# batch of a few hundred keeps the requests in flight that the provider allows.
OPENAI_BATCH = 512


def judge_table(df, backend, template_name: str, *, judge_name: str, chat: bool | None = None,
                perplexity: bool = False,
                ppl_context: str = "auto", max_new_tokens: int = 512, keep_other_judges: bool = False,
                progress: bool = True, chunk_size: int = 256, temperature: float = 0.0, repeats: int = 1):
    """The judged table (pure of I/O): one row per unique pair of ``df`` for ``judge_name``; with
    ``repeats`` > 1 also each pair's K verdicts (``judgebias.engine.repeats``: the table, and the
    check a log-probability read's repeats get)."""
    import pandas as pd

    from judgebias.backends.protocol import GenerationParams
    from judgebias.engine.pairwise import judge_pairs, pairs_from_table
    from judgebias.engine.perplexity import fill_perplexity
    from judgebias.prompts import judge_template
    from judgebias.tables.pairwise import CANONICAL

    template = judge_template(template_name)
    pairs = pairs_from_table(df)
    result = judge_pairs(pairs, backend, template, judge=judge_name, chat=chat,
                         params=GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature),
                         chunk_size=chunk_size,
                         progress=_progress(f"judging {len(pairs)} pairs x 2 orders") if progress else None)
    out = result.table()
    check = None
    if repeats > 1:
        from judgebias.engine.repeats import repeated

        out, check = repeated(out, pairs, backend, template, judge=judge_name, chat=chat, repeats=repeats,
                              params=GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature),
                              chunk_size=chunk_size)
    # Pair-level extra columns of the input (categories, sources) travel with the pair.
    extras = [c for c in df.columns if c not in CANONICAL and c not in out.columns]
    if extras:
        first = df.drop_duplicates("pair_id").set_index("pair_id")[extras]
        out = out.join(first, on="pair_id")
    if perplexity:
        n = len(out)
        report = _progress(f"perplexity of {2 * n} responses") if progress else None
        done = [0]

        def tick(k: int) -> None:
            done[0] += k
            if report:
                report(done[0], 2 * n)
        out = fill_perplexity(out, backend, context=ppl_context, chunk_size=chunk_size, progress=tick)
    if keep_other_judges:
        others = df[df["judge"].fillna("") != judge_name]
        out = pd.concat([others, out], ignore_index=True)
    if check is not None:
        return out, result.exclusions, check
    return out, result.exclusions


def register(app: typer.Typer) -> None:
    @app.command("judge")
    def judge_cmd(
        table: Annotated[Path, typer.Argument(
            help="Judgment table (.jsonl/.parquet/.csv) whose pairs to judge.", exists=True, dir_okay=False)],
        judge: Annotated[str, typer.Option(
            "--judge", help="Model: alias (smollm2-135m-instruct, gemma-3-270m), local folder, .gguf file, "
            "hub id; or the API model name.")],
        out: Annotated[Path, typer.Option("--out", help="Output table (.jsonl or .parquet).")],
        template: Annotated[str | None, typer.Option(
            help="Pairwise: dbg-ab (default) | dbg-truthful (answer A or B) or mtbench-pair (explain, then "
                 "[[A]]/[[B]]/[[C]]). Pointwise: mtbench-single (default; 1-10, [[rating]]), "
                 "mtbench-single-ref, rubric-5 or rubric-5-ref (1-5, [RESULT] k), criteria-5 or "
                 "criteria-5-direct (1-5, one criterion per call).")] = None,
        mode: Annotated[str, typer.Option(
            help="pairwise (both responses of each pair, both orders) or pointwise (one score per "
                 "response: a pointwise table from a pointwise or a pairwise input).")] = "pairwise",
        backend: Annotated[str, typer.Option(help="local (transformers), vllm (vLLM in its own environment: "
                                             "scripts/install.sh --vllm) or openai (OpenAI-compatible API).")
                           ] = "local",
        base_url: Annotated[str | None, typer.Option(help="API base URL for --backend openai.")] = None,
        name: Annotated[str | None, typer.Option(help="Judge name in the table (default: the model's).")
                        ] = None,
        gguf_file: Annotated[str | None, typer.Option(help="GGUF file name inside the --judge folder.")
                             ] = None,
        device: Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available).")
                          ] = None,
        batch_size: Annotated[int | None, typer.Option(
            help="Most prompts per forward pass (default 64); --backend openai: items per call-cache "
                 f"batch, each waiting for its slowest call (default {OPENAI_BATCH}).")] = None,
        token_budget: Annotated[int | None, typer.Option(help="Most tokens (rows x longest) per forward pass "
                                                         "(default 1024 on CPU, 65536 on GPU).")] = None,
        dtype: Annotated[str, typer.Option(help="Local weights and activations: auto (bf16 on GPU, exact "
                                           "fp32 on CPU), float32, bfloat16 (~3x faster on CPUs with "
                                           "AVX512-BF16/AMX; see docs/benchmarks.md) or float16.")] = "auto",
        quantize: Annotated[str, typer.Option(help="Local: none, or int8 (linear weights stored as int8 "
                                              "with torchao, the `quant` extra: a larger judge in about "
                                              "half the memory of bf16; docs/benchmarks.md).")] = "none",
        prompt_kind: Annotated[str, typer.Option(
            help="auto (chat, unless a local model has no chat template), chat, or few-shot (a base "
                 "model's few-shot text; with --backend openai it goes to the /completions route).")
                               ] = "auto",
        max_new_tokens: Annotated[int, typer.Option(
            help="Explanation length limit (mtbench-pair and the explain-first pointwise templates).")] = 512,
        prefix_mode: Annotated[str, typer.Option(
            help="--backend openai: how an answer prefix (the text up to '[[' in mtbench-pair) is sent: "
                 "none, continue or message.")] = "none",
        option_tokenizer: Annotated[str | None, typer.Option(
            help="--backend openai: the served model's tokenizer (alias, folder, hub id); a server that "
                 "returns named token ids (vLLM) then gives exact P(A), others their top-20 bounds.")
                                    ] = None,
        concurrency: Annotated[str, typer.Option(
            help="--backend openai: requests in flight, 'adaptive' (raised until the provider's 429s, "
                 "rate-limit headers or latency say stop) or a number.")] = "adaptive",
        rpm: Annotated[float | None, typer.Option(
            help="--backend openai: the most requests sent in any minute (your account's limit).")] = None,
        tpm: Annotated[float | None, typer.Option(
            help="--backend openai: the most tokens sent in any minute (prompt at 4 characters per "
                 "token plus the longest answer allowed).")] = None,
        price_per_mtok: Annotated[str | None, typer.Option(
            metavar="IN,OUT", help="--backend openai: USD per million input and output tokens, for the "
            "estimate before judging and the cost recorded after (default: --prices, else the packaged "
            "table of list prices).")] = None,
        prices: Annotated[Path | None, typer.Option(
            help="--backend openai: a YAML price table {model: [input, output]} in USD per million tokens.",
            exists=True, dir_okay=False)] = None,
        max_cost: Annotated[float | None, typer.Option(
            metavar="USD", help="--backend openai: send nothing when the estimate is above this, and no "
            "further request once the answered calls cost this much.")] = None,
        tokenizer: Annotated[str | None, typer.Option(
            help="--backend openai: the judge's tokenizer (alias, folder, hub id) for counting the "
                 "estimate's tokens (default: --option-tokenizer; without either, 4 characters a "
                 "token).")] = None,
        batch_api: Annotated[bool, typer.Option(
            "--batch-api", help="--backend openai: send the calls as one Batch API job (OpenAI's format; "
            "about half the price, answered within a day). Its state is kept in OUT.batch/: a rerun "
            "after a kill polls the same batch, never submits it twice.")] = False,
        batch_poll: Annotated[float, typer.Option(
            help="--batch-api: seconds between two looks at the batch's status.")] = 30.0,
        perplexity: Annotated[bool, typer.Option(
            "--perplexity", help="Also fill ppl_a/ppl_b (pointwise: ppl, for score_perplexity).")] = False,
        ppl_context: Annotated[str, typer.Option(help="Perplexity context: auto, chat, plain or "
                                                 "template:dbg-generate.")] = "auto",
        keep_other_judges: Annotated[bool, typer.Option(help="Also copy the input's rows of other judges.")
                                     ] = False,
        criterion: Annotated[list[str] | None, typer.Option(
            "--criterion", help="Pointwise: score every response on this criterion (repeatable: one "
            "judgment and one row per criterion; use with --template criteria-5).")] = None,
        no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the call cache.")
                            ] = False,
        repeats: Annotated[int, typer.Option(
            help="Pairwise: judge every pair K times (each repeat a distinct, cached call) for the judge's "
                 "repeat-run noise: repeat_verdicts, then repeat_stability and repeat_kappa in analyze "
                 "(docs/watch.md). A log-probability read is deterministic: its repeats are re-read past "
                 "the cache and checked identical.")] = 1,
        temperature: Annotated[float, typer.Option(
            help="Sampling temperature of generating templates (mtbench-pair; 0 = greedy).")] = 0.0,
        cache_dir: Annotated[Path | None, typer.Option(help="Call cache folder (default $JUDGEBIAS_CACHE_DIR "
                                                       "or ~/.cache/judgebias/calls).")] = None,
    ) -> None:
        """Judge every pair of TABLE in both presentation orders and write a table for `judgebias analyze`.

        p_a is P(response A better) averaged over both orders; p_a_ab / p_a_ba are the per-order
        values; off-format answers are excluded with their reason in judge_error, never scored 0.5.
        Model calls are cached by content, so a rerun only computes what is missing.
        """
        from judgebias.backends.builder import build_backend, cached, chat_for
        from judgebias.backends.call_cache import ResponseCache
        from judgebias.runs import interrupts
        from judgebias.tables.files import read_table, write_table

        if mode not in ("pairwise", "pointwise"):
            raise typer.BadParameter(f"unknown mode {mode!r}; use pairwise or pointwise", param_hint="--mode")
        template = template or ("mtbench-single" if mode == "pointwise" else "dbg-ab")
        if criterion and mode != "pointwise":
            raise typer.BadParameter("--criterion scores responses one criterion at a time: it needs "
                                     "--mode pointwise", param_hint="--criterion")
        if repeats < 1 or (repeats > 1 and mode != "pairwise"):
            raise typer.BadParameter("a count of at least 1; repeats of pairwise judgments only",
                                     param_hint="--repeats")
        if mode == "pointwise":
            from judgebias.prompts.pointwise import pointwise_template

            try:
                pointwise_template(template)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--template") from None
        try:
            chat = chat_for(prompt_kind)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--prompt-kind") from None
        if batch_api and backend != "openai":
            raise typer.BadParameter("the Batch API is an endpoint's: use it with --backend openai",
                                     param_hint="--batch-api")
        if batch_size is None:
            batch_size = BATCH_API_ITEMS if batch_api else OPENAI_BATCH if backend == "openai" else 64
        elif batch_size < 1:
            raise typer.BadParameter(f"must be >= 1, got {batch_size}", param_hint="--batch-size")
        spec = judge_spec(judge, backend, base_url=base_url, name=name, gguf_file=gguf_file, device=device,
                          batch_size=batch_size, token_budget=token_budget, prefix_mode=prefix_mode,
                          dtype=dtype, template=template, cache_dir=cache_dir, quantize=quantize,
                          chat=chat, option_tokenizer=option_tokenizer, concurrency=concurrency, rpm=rpm,
                          tpm=tpm)
        if mode == "pointwise":
            from judgebias.tables.files import read_raw
            from judgebias.tables.pointwise import is_pointwise

            df = read_raw(table)
            if not is_pointwise(df):
                df, _ = read_table(table)
        else:
            df, _ = read_table(table)
        if max_cost is not None and not max_cost >= 0:
            raise typer.BadParameter(f"must be >= 0, got {max_cost}", param_hint="--max-cost")
        inner = build_backend(spec)
        # Cache commits per batch and every few seconds within one: a killed run loses seconds of work.
        sender = inner
        if batch_api:
            from judgebias.backends.openai_batch import BatchBackend

            sender = BatchBackend(inner, out.with_name(out.name + ".batch"), poll_s=batch_poll,
                                  report=lambda text: typer.echo(text, err=True))
        runner = cached(sender, spec, ResponseCache(None) if no_cache else None)
        if runner.cache.enabled:
            from judgebias.cli import full_disk

            full_disk.keep(f"the model calls already answered are kept in the call cache {runner.cache.path}")
        if mode == "pointwise":
            from judgebias.cli.pointwise import judge_pointwise_table

            with interrupts.stop_between_batches(), ended_line():
                judged, exclusions = judge_pointwise_table(
                    df, runner, template, judge_name=name or inner.name, chat=spec.chat,
                    max_new_tokens=max_new_tokens, chunk_size=batch_size,
                    progress=_progress("scoring responses"), criteria=criterion or None)
                if perplexity:
                    from judgebias.engine.perplexity import fill_response_perplexity

                    judged = fill_response_perplexity(judged, runner, context=ppl_context,
                                                      chunk_size=batch_size)
                interrupts.check()
            path = write_table(judged, out)
            by_source = judged["score_source"].value_counts().to_dict()
            typer.echo(f"wrote {path}: {len(judged)} rows, scores by source {by_source}; "
                       f"judge {inner.name!r}, template {template}; cache hits {runner.hits}, "
                       f"computed {runner.calls}")
            if exclusions.total:
                typer.echo(f"excluded or parsed judgments: {exclusions}")
            return
        import time

        from judgebias.cli import judge_cost
        from judgebias.tables.files import read_usage

        estimate = None
        if spec.backend == "openai":
            price = judge_cost.price_option(spec.model, price_per_mtok, prices)
            estimate = judge_cost.before(df, runner, inner, template, chat=spec.chat,
                                         max_new_tokens=max_new_tokens,
                                         tokenizer=tokenizer or option_tokenizer, price=price,
                                         max_cost=max_cost, out=out, judge_name=name or inner.name)
        started = time.perf_counter()
        with interrupts.stop_between_batches(), ended_line():
            judged, exclusions, *check = judge_table(
                df, runner, template, judge_name=name or inner.name, chat=spec.chat, perplexity=perplexity,
                ppl_context=ppl_context, max_new_tokens=max_new_tokens, keep_other_judges=keep_other_judges,
                chunk_size=batch_size, temperature=temperature, repeats=repeats)
            interrupts.check()  # a stop asked after the last batch: still no table from a stopped run
        seconds = time.perf_counter() - started
        path = write_table(judged, out)
        carried = {}
        if keep_other_judges:
            carried = {j: r for j, r in read_usage(table)["judges"].items() if j != (name or inner.name)}
        judge_cost.after(inner, runner, judged=judged, judge_name=name or inner.name, seconds=seconds,
                         estimate=estimate, out=path, carried=carried)
        scored = int(sum(1 for p in judged["p_a"] if isinstance(p, float) and not math.isnan(p)))
        typer.echo(f"wrote {path}: {len(judged)} rows, {scored} with p_a; judge {inner.name!r}, "
                   f"template {template}; cache hits {runner.hits}, computed {runner.calls}")
        if exclusions.total:
            typer.echo(f"excluded judgments (per order): {exclusions}")
        if check:
            typer.echo(check[0].line())
