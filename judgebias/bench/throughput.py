"""How fast the local judge runs, three ways, on this machine (``judgebias bench``).

Modes, side by side on the same pairs (both presentation orders each):

- ``batched``: ``LocalBackend.score_options`` (length-sorted token-budget batches, right padding,
  output layer on the last token only, shared-prefix KV reuse) in the engine's ``--dtype``;
- ``unbatched``: the plain way, one prompt per forward pass with full logits
  (``model(ids).logits[0, -1]``), summed over the same option tokens, in ``--baseline-dtype``
  (the device's reference: fp32 on CPU); when the engine's dtype differs, it runs again in the
  engine's (``unbatched-<dtype>``), so the batching gain and the dtype gain read apart;
- ``explain``: MT-bench pair-v2 generate-then-parse (batched greedy generation, then P(A), P(B)
  after "[["). A different prompt, so its verdicts are compared, not required to match.

Reported per mode: pairs/s, prompt tokens/s, effective TFLOP/s (2 x parameters x prompt tokens,
plus generated tokens for ``explain``) and its share of the device peak for the row's dtype,
peak memory, how many times faster ``batched`` is per pair, and, against ``batched``, verdict
agreement and the largest |dP(A)|. CPU peaks are measured here (best 2048x2048 matmul in each
dtype) and labelled as such; GPU peaks are the vendor's dense bf16 figure.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import time
from typing import Any

from judgebias.backends.random_weights import random_model
from judgebias.bench.hardware import PeakMemory, cpu_name, gpu_peak_tflops, measured_cpu_peak_tflops


def bench_pairs(n: int, prompt_tokens: int, tokenizer, template) -> list:
    """Real instructions and responses (bundled LLMBar-Natural): each instruction's own response
    against another's, alternating sides, so the right answer is known; past the 78 rows each round
    pairs a row with a farther one (the engine computes identical prompts once: no repeats)."""
    from importlib.resources import files

    from judgebias.tables.records import Pair

    rows = [json.loads(line) for line in
            files("judgebias").joinpath("data/llmbar_natural_sft.jsonl").read_text().splitlines() if line]
    pairs = []
    for i in range(n):
        k = len(rows)
        own, other = rows[i % k], rows[(i + 1 + (i // k) % (k - 1)) % k]
        a, b = (own["response"], other["response"]) if i % 2 == 0 else (other["response"], own["response"])
        if prompt_tokens:
            a, b = _stretch(own["instruction"], a, b, prompt_tokens, tokenizer, template)
        pairs.append(Pair(pair_id=f"bench-{i}", prompt=own["instruction"], response_a=a, response_b=b,
                          human=("a",) if i % 2 == 0 else ("b",)))
    return pairs


def _stretch(query: str, a: str, b: str, target: int, tokenizer, template) -> tuple[str, str]:
    """Repeat both responses (whole sentences' worth of text) until the judge prompt is ~target tokens."""
    base_a, base_b = a, b
    def size(x: str, y: str) -> int:
        return len(tokenizer(template.build(query, x, y, chat=True).messages[-1].content).input_ids)
    while size(a, b) < target:
        a, b = a + " " + base_a, b + " " + base_b
    return a, b


def _verdicts(values: list[float]) -> list[str]:
    return ["a" if p > 0.5 else "b" if p < 0.5 else "tie" for p in values]


def _unbatched_p_first(model, encode, prompts, ids_a, ids_b) -> list[float]:
    """The plain way: one prompt per forward pass, full logits, P(A) / (P(A) + P(B))."""
    import torch

    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([encode(p)], device=ids_a.device)
            probs = torch.softmax(model(input_ids=ids).logits[0, -1].float(), -1)
            pa, pb = float(probs[ids_a].sum()), float(probs[ids_b].sum())
            out.append(pa / (pa + pb))
    return out


def run_benchmark(*, model: str | None, arch: str | None, n_pairs: int, prompt_tokens: int,
                  explain_pairs: int, explain_tokens: int, modes: list[str], device: str | None,
                  token_budget: int | None, batch_size: int, seed: int = 0, dtype: str = "auto",
                  baseline_dtype: str = "auto", endpoint: str | None = None,
                  endpoint_model: str | None = None, endpoint_concurrency: int = 1,
                  quantize: str = "none", endpoint_option_tokenizer: str | None = None) -> dict[str, Any]:
    """Time each mode on the same prompts. ``dtype`` is the engine's (batched, explain); the plain
    one-at-a-time baseline runs in ``baseline_dtype`` (default: the device's exact reference), and
    when the two differ it also runs in the engine's dtype, so the report separates what batching
    gains from what the dtype gains and shows what the dtype costs in P(A). ``quantize``: the
    engine's copy is quantized (``judgebias.backends.quantization``); without ``unbatched`` or an endpoint
    to compare with, the reference copy is freed first, so the peak memory is the engine's alone."""
    import copy

    import torch
    import transformers

    from judgebias.backends import loading as models
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.protocol import GenerationParams
    from judgebias.backends.quantization import quantize_weights, weight_bytes
    from judgebias.engine.pairwise import judge_pairs
    from judgebias.prompts import DBG_AB, MTBENCH_PAIR

    device = device or models.default_device()
    engine_dtype = models.resolve_dtype(dtype, device)
    ref_dtype = models.resolve_dtype(baseline_dtype, device)
    if arch:
        tokenizer = models.load_tokenizer("smollm2-135m-instruct")
        reference = random_model(arch, tokenizer=tokenizer, seed=seed, device=device, dtype=ref_dtype)
        label = f"{arch} (random weights, SmolLM2 tokenizer)"
    else:
        reference = models.load_model(model or "smollm2-135m-instruct", device=device, dtype=ref_dtype)
        label = reference.name
    loaded = reference
    if engine_dtype != ref_dtype or quantize != "none":
        # The same weights cast, as a checkpoint loaded in that dtype would be.
        loaded = models.LoadedModel(model=copy.deepcopy(reference.model).to(engine_dtype),
                                    tokenizer=reference.tokenizer, name=reference.name,
                                    identity={**reference.identity, "dtype": models.dtype_name(engine_dtype)})
        loaded = quantize_weights(loaded, quantize)
    weights_gib = {"reference": weight_bytes(reference.model) / 2**30,
                   "engine": weight_bytes(loaded.model) / 2**30}
    engine_label = models.dtype_name(engine_dtype) + ("" if quantize == "none" else f"+{quantize}")
    if loaded is not reference and "unbatched" not in modes and not endpoint:
        reference = None  # nothing compares with it: the engine's peak memory is its own
        import gc

        gc.collect()
    backend = LocalBackend(loaded, token_budget=token_budget, max_batch=batch_size)
    chat = backend.is_chat
    n_params = loaded.n_params
    pairs = bench_pairs(n_pairs, prompt_tokens, backend.tokenizer, DBG_AB)
    items = [(p, o) for p in pairs for o in ("ab", "ba")]
    prompts = [DBG_AB.build(p.prompt, *p.shown(o), chat=chat) for p, o in items]
    lengths = [len(backend.encode(p)) for p in prompts]
    total_tokens = sum(lengths)
    on_gpu = device.startswith("cuda")
    peaks: dict[str, float | None] = {}
    if on_gpu:
        dev_name = torch.cuda.get_device_name(0)
        vendor = gpu_peak_tflops(dev_name)
        peak_kind = "vendor dense bf16 (bf16/fp16 rows only)"
        for d in dict.fromkeys((engine_dtype, ref_dtype)):
            peaks[models.dtype_name(d)] = vendor if d in (torch.bfloat16, torch.float16) else None
    else:
        n_threads = torch.get_num_threads()
        dev_name = f"{cpu_name()} ({n_threads} thread{'s' if n_threads != 1 else ''})"
        peak_kind = "measured 2048x2048 matmul in the row's dtype on this machine"
        for d in dict.fromkeys((engine_dtype, ref_dtype)):
            peaks[models.dtype_name(d)] = measured_cpu_peak_tflops(dtype=d)
    memory = PeakMemory(device)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    # Warm-up: option variants, kernels, allocator.
    backend.score_options(prompts[:2], DBG_AB.options)
    sync()

    results: dict[str, dict[str, Any]] = {}
    p_first: dict[str, list[float]] = {}
    cpu_start = [0.0]

    def record(mode: str, row_dtype, seconds: float, pairs_done: int, tokens: int,
               extra: dict | None = None, *, engine: bool = True) -> None:
        tflops = 2 * n_params * tokens / seconds / 1e12
        peak = peaks.get(models.dtype_name(row_dtype))
        results[mode] = {
            "dtype": engine_label if engine else models.dtype_name(row_dtype),
            "pairs": pairs_done, "seconds": round(seconds, 3), "pairs_per_s": pairs_done / seconds,
            # Process CPU time: on a shared machine it moves less than wall time does.
            "cpu_seconds": round(time.process_time() - cpu_start[0], 3),
            "prompt_tokens": tokens, "tokens_per_s": tokens / seconds, "tflops": tflops,
            "peak_tflops": peak, "share_of_peak": (tflops / peak) if peak else None,
            "peak_memory_gib": memory.peak_gib(), **(extra or {}),
        }

    def begin() -> float:
        memory.reset()
        cpu_start[0] = time.process_time()
        return time.perf_counter()

    if "batched" in modes:
        start = begin()
        scores = backend.score_options(prompts, DBG_AB.options)
        sync()
        record("batched", engine_dtype, time.perf_counter() - start, len(pairs), total_tokens)
        p_first["batched"] = [s.probs["A"] for s in scores]

    if "unbatched" in modes:
        variants = backend.variants(DBG_AB.options)
        ids_a = torch.tensor(variants["A"], device=backend.device)
        ids_b = torch.tensor(variants["B"], device=backend.device)
        runs = [("unbatched", reference.model, ref_dtype, False)]
        if loaded is not reference:
            runs.append((f"unbatched-{engine_label}", loaded.model, engine_dtype, True))
        for mode, net, row_dtype, is_engine in runs:
            start = begin()
            p_first[mode] = _unbatched_p_first(net, backend.encode, prompts, ids_a, ids_b)
            sync()
            record(mode, row_dtype, time.perf_counter() - start, len(pairs), total_tokens, engine=is_engine)

    if "explain" in modes and chat:
        sub = pairs[:explain_pairs]
        sub_prompts = [MTBENCH_PAIR.build(p.prompt, *p.shown(o)) for p in sub for o in ("ab", "ba")]
        start = begin()
        result = judge_pairs(sub, backend, MTBENCH_PAIR,
                             params=GenerationParams(max_new_tokens=explain_tokens))
        sync()
        seconds = time.perf_counter() - start
        prompt_toks = sum(len(backend.encode(p)) for p in sub_prompts)
        generated = sum(len(backend.tokenizer(j.raw_output, add_special_tokens=False).input_ids)
                        for j in result.judgments)
        # Second pass re-reads prompt + explanation for the judgments that reached "[[".
        reread = sum(len(backend.encode(p)) for p, j in zip(sub_prompts, result.judgments, strict=True)
                     if j.ok) + generated
        extra = {"generated_tokens": generated, "max_new_tokens": explain_tokens,
                 "off_format_rate": result.exclusions.total / len(result.judgments)}
        if "batched" in modes:
            ref = dict(zip([(p.pair_id) for p in pairs],
                           _pair_verdicts(p_first["batched"], len(pairs)), strict=True))
            judged = [(r["pair_id"], r["verdict"]) for r in result.rows if r["verdict"]]
            extra["verdict_agreement_with_batched"] = (sum(ref[k] == v for k, v in judged) / len(judged)
                                                       if judged else None)
        record("explain", engine_dtype, seconds, len(sub), prompt_toks + generated + reread, extra)

    verdicts: dict[str, list] = {}
    if endpoint:
        from judgebias.bench.endpoint import bench_endpoint

        begin()
        row, p_first["endpoint"] = bench_endpoint(prompts, DBG_AB.options, base_url=endpoint,
                                                  model=endpoint_model or label,
                                                  concurrency=endpoint_concurrency,
                                                  option_tokenizer=endpoint_option_tokenizer)
        verdicts["endpoint"] = row.pop("_verdicts")
        results["endpoint"] = {
            **row, "dtype": "server's", "pairs": len(pairs), "pairs_per_s": len(pairs) / row["seconds"],
            "cpu_seconds": None, "prompt_tokens": total_tokens, "tokens_per_s": total_tokens / row["seconds"],
            "tflops": None, "peak_tflops": None, "share_of_peak": None,
            "peak_memory_gib": row["server_peak_memory_gib"]}

    if "vllm" in modes:
        if arch:
            # A random-weights model exists only in this process; vLLM loads a folder.
            results["vllm"] = {"not_measured": "random-weights shapes are not saved as a folder for vLLM"}
        else:
            from judgebias.bench.vllm import bench_vllm

            row, p_first["vllm"] = bench_vllm(model or "smollm2-135m-instruct", prompts, DBG_AB.options,
                                              dtype=dtype)
            results["vllm"] = {**row, "pairs": len(pairs), "pairs_per_s": len(pairs) / row["seconds"],
                               "cpu_seconds": None, "prompt_tokens": total_tokens,
                               "tokens_per_s": total_tokens / row["seconds"],
                               "tflops": 2 * n_params * total_tokens / row["seconds"] / 1e12,
                               "peak_tflops": None, "share_of_peak": None}

    if "batched" in results:
        bat = results["batched"]
        for mode, row in results.items():
            if mode == "batched" or "not_measured" in row:
                continue
            # How many times faster batched judging is than this row, per pair (rows may judge
            # different numbers of pairs: explain runs on a subset).
            row["batched_speedup"] = bat["pairs_per_s"] / row["pairs_per_s"]
            row["batched_speedup_cpu_time"] = (None if row["cpu_seconds"] is None else
                                               (row["cpu_seconds"] / row["pairs"])
                                               / max(bat["cpu_seconds"] / bat["pairs"], 1e-9))
            if mode in p_first:
                (row["verdict_agreement_with_batched"],
                 row["max_abs_p_diff"]) = _agreement(p_first["batched"], p_first[mode], verdicts.get(mode))
    if "vllm" in p_first and "unbatched" in p_first:
        v = results["vllm"]
        (v["verdict_agreement_with_reference"],
         v["max_abs_p_diff_vs_reference"]) = _agreement(p_first["unbatched"], p_first["vllm"], None)
    if "endpoint" in results and "unbatched" in p_first:
        # A server against the exact reference (the plain way in --baseline-dtype, fp32 on CPU).
        e = results["endpoint"]
        (e["verdict_agreement_with_reference"],
         e["max_abs_p_diff_vs_reference"]) = _agreement(p_first["unbatched"], p_first["endpoint"],
                                                         verdicts["endpoint"])

    gpu_note = "measured on this device" if on_gpu else "not measured (no GPU in this run)"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": label, "parameters": n_params, "device": dev_name,
        "device_type": "cuda" if on_gpu else "cpu",
        "dtype": engine_label, "baseline_dtype": models.dtype_name(ref_dtype),
        "weights_gib": weights_gib,
        "peak_tflops": peaks, "peak_kind": peak_kind, "pairs": len(pairs),
        "mean_prompt_tokens": total_tokens / len(prompts), "token_budget": backend.token_budget,
        "max_batch": backend.max_batch, "prefix_reuse": backend.reuse_prefix,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "gpu": gpu_note, "modes": results,
    }


def _agreement(ref: list[float], p: list[float], shown: list | None = None
               ) -> tuple[float | None, float | None]:
    """(share of equal verdicts, largest |dP(first)|) of a row against ``ref``, per prompt. ``shown``:
    the row's verdicts where they are not all read off ``p`` (a server's bounds and bare verdicts,
    NaN in ``p``); only prompts with a probability enter the difference."""
    shown = shown or _verdicts(p)
    known = [(x, y) for x, y in zip(_verdicts(ref), shown, strict=True) if y is not None]
    diffs = [abs(x - y) for x, y in zip(ref, p, strict=True) if not math.isnan(y)]
    return (sum(x == y for x, y in known) / len(known) if known else None), (max(diffs) if diffs else None)


def _pair_verdicts(p_first: list[float], n_pairs: int) -> list[str]:
    """Per pair, the verdict of both orders averaged (ab gives P(A); ba gives P(B) first)."""
    out = []
    for i in range(n_pairs):
        p_a = (p_first[2 * i] + (1 - p_first[2 * i + 1])) / 2
        out.append("a" if p_a > 0.5 else "b" if p_a < 0.5 else "tie")
    return out


def markdown(report: dict[str, Any]) -> str:
    def fmt(x, spec=".3g"):
        return "n/a" if x is None else format(x, spec)

    peaks = ", ".join(f"{k} {fmt(v)}" for k, v in report["peak_tflops"].items())
    lines = [
        f"### {report['model']} on {report['device']} ({report['date']})",
        "",
        f"{report['parameters'] / 1e6:.1f} M parameters, engine {report['dtype']}, baseline "
        f"{report['baseline_dtype']}, {report['pairs']} pairs x 2 orders, mean judge prompt "
        f"{report['mean_prompt_tokens']:.0f} tokens, token budget {report['token_budget']}, prefix "
        f"reuse {'on' if report['prefix_reuse'] else 'off'}. Peak TFLOP/s: {peaks} "
        f"({report['peak_kind']}). torch {report['versions']['torch']}, transformers "
        f"{report['versions']['transformers']}, Python {report['versions']['python']}; 1-min load "
        f"average at the end {fmt(report['load_avg'], '.2f')}.",
        "",
        "| mode | dtype | pairs/s | prompt tok/s | TFLOP/s | share of peak | peak mem GiB | wall s | CPU s "
        "| batched is x faster (wall / CPU) | verdicts agree | max abs dP(A) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in report["modes"].items():
        if "not_measured" in r:
            lines.append(f"| {mode} | not measured: {r['not_measured']} |" + " |" * 10)
            continue
        agree = r.get("verdict_agreement_with_batched")
        share = r.get("share_of_peak")
        speedup = ("-" if "batched_speedup" not in r else
                   f"{r['batched_speedup']:.2f} / {fmt(r['batched_speedup_cpu_time'], '.2f')}")
        lines.append(
            f"| {mode} | {r['dtype']} | {r['pairs_per_s']:.3g} | {r['tokens_per_s']:.0f} | "
            f"{fmt(r['tflops'])} | "
            f"{'n/a' if share is None else f'{100 * share:.1f}%'} | {fmt(r['peak_memory_gib'], '.2f')} | "
            f"{r['seconds']:.1f} | {fmt(r['cpu_seconds'], '.1f')} | {speedup} | "
            f"{'-' if agree is None else f'{100 * agree:.0f}%'} | {fmt(r.get('max_abs_p_diff'), '.2g')} |")
    if "weights_gib" in report:
        w = report["weights_gib"]
        lines += ["", f"Weights in memory: engine ({report['dtype']}) {w['engine']:.2f} GiB, reference "
                      f"({report['baseline_dtype']}) {w['reference']:.2f} GiB (the same copy when they "
                      "match); peak mem counts every copy the process held."]
    v = report["modes"].get("vllm", {})
    if "seconds" in v:
        lines += ["", f"vllm = {v['vllm']} in its own environment, {v['dtype']}, the same token ids, "
                      f"prefix caching on; engine start and warm-up {v['start_seconds']:.0f} s (not in wall "
                      f"s); answers given as a bound: {v['bounds']}; peak mem is vLLM's process tree; "
                      f"against the {report['baseline_dtype']} reference: max abs dP(A) "
                      f"{fmt(v.get('max_abs_p_diff_vs_reference'), '.2g')}, verdicts agree "
                      f"{fmt(v.get('verdict_agreement_with_reference'), '.0%')}."]
    if "explain" in report["modes"]:
        e = report["modes"]["explain"]
        lines.append("")
        lines.append(f"explain = MT-bench pair-v2, {e['pairs']} pairs, at most {e['max_new_tokens']} new "
                     f"tokens, {e['generated_tokens']} generated; off-format "
                     f"{100 * e['off_format_rate']:.0f}% of judgments; its agreement is with the "
                     "A/B prompt's verdict (a different prompt).")
    if "endpoint" in report["modes"]:
        e = report["modes"]["endpoint"]
        kinds = ", ".join(f"{n} {k.replace('_', '-')}" for k, n in e["answers"].items() if n)
        where = (f"server process {e['server_pid']} and its children, their peak memory since they started"
                 if e["server_pid"] else "remote or unseen server: no memory figure")
        lines += ["", f"endpoint = {e['endpoint_model']} at {e['endpoint']} through the OpenAI client, "
                      f"{e['concurrency']} request(s) at a time"
                      f"{', the option token ids named' if e.get('option_token_ids') else ''}; answers: "
                      f"{kinds}; {where}. Only answers "
                      "with log-probabilities enter max abs dP(A); bounds and bare verdicts count in "
                      "the verdict agreement."]
        if "max_abs_p_diff_vs_reference" in e:
            agree = e["verdict_agreement_with_reference"]
            lines[-1] += (f" Against the {report['baseline_dtype']} reference (unbatched): verdicts agree "
                          f"{'n/a' if agree is None else f'{100 * agree:.0f}%'}, max abs dP(A) "
                          f"{fmt(e['max_abs_p_diff_vs_reference'], '.2g')}.")
    if report["device_type"] == "cpu":
        lines.append("")
        lines.append("GPU (bf16, SDPA): not measured in this run (no GPU available).")
    return "\n".join(lines) + "\n"
