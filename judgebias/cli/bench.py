"""``judgebias bench``: how fast the local judge runs, three ways, on this machine.

Modes, side by side on the same pairs (both presentation orders each):

- ``batched``: ``LocalBackend.score_options`` (length-sorted token-budget batches, right padding,
  output layer on the last token only, shared-prefix KV reuse);
- ``unbatched``: the plain way, one prompt per forward pass with full logits
  (``model(ids).logits[0, -1]``), summed over the same option tokens;
- ``explain``: MT-bench pair-v2 generate-then-parse (batched greedy generation, then P(A), P(B)
  after "[["). A different prompt, so its verdicts are compared, not required to match.

Reported per mode: pairs/s, prompt tokens/s, effective TFLOP/s (2 x parameters x prompt tokens,
plus generated tokens for ``explain``) and its share of the device peak, peak memory, and the
agreement of verdicts with ``batched``. The CPU peak is measured here (best of a large fp32
matmul) and labelled as such; GPU peaks come from the vendor's dense bf16 figure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Annotated, Any

import typer

# Dense bf16 tensor-core peaks (vendor data sheets, TFLOP/s, no sparsity). torch names the SXM
# H100 "NVIDIA H100 80GB HBM3", the others "... PCIe" / "... NVL": the longest matching key wins.
GPU_BF16_PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0, "H100 NVL": 835.0, "H100 PCIE": 756.0,
    "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "RTX 4090": 165.0,
}


def gpu_peak_tflops(device_name: str) -> float | None:
    name = device_name.upper()
    for key in sorted(GPU_BF16_PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return GPU_BF16_PEAK_TFLOPS[key]
    return None


def measured_cpu_peak_tflops(n: int = 2048, repeats: int = 6) -> float:
    """Best fp32 matmul rate of this CPU with torch's threads: the practical peak, not a data sheet."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


class PeakMemory:
    """Peak resident memory (CPU, Linux VmHWM reset per mode) or peak allocated GPU memory."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def reset(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        else:
            with contextlib.suppress(OSError):
                Path("/proc/self/clear_refs").write_text("5")

    def peak_gib(self) -> float:
        if self.cuda:
            import torch

            return torch.cuda.max_memory_allocated() / 2**30
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
        except OSError:
            pass
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def bench_pairs(n: int, prompt_tokens: int, tokenizer, template) -> list:
    """Real instructions and responses (bundled LLMBar-Natural): each instruction's own response
    against the next instruction's, alternating sides, so the right answer is known."""
    from importlib.resources import files

    from judgebias.records import Pair

    rows = [json.loads(line) for line in
            files("judgebias").joinpath("data/llmbar_natural_sft.jsonl").read_text().splitlines() if line]
    pairs = []
    for i in range(n):
        own, other = rows[i % len(rows)], rows[(i + 1) % len(rows)]
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


def run_benchmark(*, model: str | None, arch: str | None, n_pairs: int, prompt_tokens: int,
                  explain_pairs: int, explain_tokens: int, modes: list[str], device: str | None,
                  token_budget: int | None, batch_size: int, seed: int = 0) -> dict[str, Any]:
    import torch
    import transformers

    from judgebias import models
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.protocol import GenerationParams
    from judgebias.judging import judge_pairs
    from judgebias.prompts import DBG_AB, MTBENCH_PAIR

    device = device or models.default_device()
    if arch:
        tokenizer = models.load_tokenizer("smollm2-135m-instruct")
        loaded = models.random_model(arch, tokenizer=tokenizer, seed=seed, device=device)
        label = f"{arch} (random weights, SmolLM2 tokenizer)"
    else:
        loaded = models.load_model(model or "smollm2-135m-instruct", device=device)
        label = loaded.name
    backend = LocalBackend(loaded, token_budget=token_budget, max_batch=batch_size)
    chat = backend.is_chat
    n_params = loaded.n_params
    pairs = bench_pairs(n_pairs, prompt_tokens, backend.tokenizer, DBG_AB)
    items = [(p, o) for p in pairs for o in ("ab", "ba")]
    prompts = [DBG_AB.build(p.prompt, *p.shown(o), chat=chat) for p, o in items]
    lengths = [len(backend.encode(p)) for p in prompts]
    total_tokens = sum(lengths)
    on_gpu = device.startswith("cuda")
    if on_gpu:
        dev_name = torch.cuda.get_device_name(0)
        peak, peak_kind = gpu_peak_tflops(dev_name), "vendor dense bf16"
    else:
        dev_name = f"{cpu_name()} ({torch.get_num_threads()} threads)"
        peak, peak_kind = measured_cpu_peak_tflops(), "measured fp32 matmul on this machine"
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

    def record(mode: str, seconds: float, pairs_done: int, tokens: int, extra: dict | None = None) -> None:
        tflops = 2 * n_params * tokens / seconds / 1e12
        results[mode] = {
            "pairs": pairs_done, "seconds": round(seconds, 3), "pairs_per_s": pairs_done / seconds,
            # Process CPU time: on a shared machine it moves less than wall time does.
            "cpu_seconds": round(time.process_time() - cpu_start[0], 3),
            "prompt_tokens": tokens, "tokens_per_s": tokens / seconds, "tflops": tflops,
            "share_of_peak": (tflops / peak) if peak else None, "peak_memory_gib": memory.peak_gib(),
            **(extra or {}),
        }

    if "batched" in modes:
        memory.reset()
        cpu_start[0] = time.process_time()
        start = time.perf_counter()
        scores = backend.score_options(prompts, DBG_AB.options)
        sync()
        record("batched", time.perf_counter() - start, len(pairs), total_tokens)
        p_first["batched"] = [s.probs["A"] for s in scores]

    if "unbatched" in modes:
        variants = backend.variants(DBG_AB.options)
        ids_a = torch.tensor(variants["A"], device=backend.device)
        ids_b = torch.tensor(variants["B"], device=backend.device)
        memory.reset()
        cpu_start[0] = time.process_time()
        start = time.perf_counter()
        out = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([backend.encode(p)], device=backend.device)
                probs = torch.softmax(backend.model(input_ids=ids).logits[0, -1].float(), -1)
                pa, pb = float(probs[ids_a].sum()), float(probs[ids_b].sum())
                out.append(pa / (pa + pb))
        sync()
        record("unbatched", time.perf_counter() - start, len(pairs), total_tokens)
        p_first["unbatched"] = out

    if "batched" in modes and "unbatched" in modes:
        va, vb = _verdicts(p_first["batched"]), _verdicts(p_first["unbatched"])
        unb, bat = results["unbatched"], results["batched"]
        unb["verdict_agreement_with_batched"] = sum(x == y for x, y in zip(va, vb, strict=True)) / len(va)
        unb["max_abs_p_diff"] = max(abs(x - y) for x, y in
                                    zip(p_first["batched"], p_first["unbatched"], strict=True))
        bat["speedup_vs_unbatched"] = unb["seconds"] / bat["seconds"]
        bat["speedup_vs_unbatched_cpu_time"] = unb["cpu_seconds"] / max(bat["cpu_seconds"], 1e-9)

    if "explain" in modes and chat:
        sub = pairs[:explain_pairs]
        sub_prompts = [MTBENCH_PAIR.build(p.prompt, *p.shown(o)) for p in sub for o in ("ab", "ba")]
        memory.reset()
        cpu_start[0] = time.process_time()
        start = time.perf_counter()
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
        record("explain", seconds, len(sub), prompt_toks + generated + reread, extra)

    gpu_note = "measured on this device" if on_gpu else "not measured (no GPU in this run)"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": label, "parameters": n_params, "device": dev_name,
        "device_type": "cuda" if on_gpu else "cpu",
        "dtype": str(next(loaded.model.parameters()).dtype).replace("torch.", ""),
        "peak_tflops": peak, "peak_kind": peak_kind, "pairs": len(pairs),
        "mean_prompt_tokens": total_tokens / len(prompts), "token_budget": backend.token_budget,
        "max_batch": backend.max_batch, "prefix_reuse": backend.reuse_prefix,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "load_avg": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "gpu": gpu_note, "modes": results,
    }


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

    lines = [
        f"### {report['model']} on {report['device']} ({report['date']})",
        "",
        f"{report['parameters'] / 1e6:.1f} M parameters, {report['dtype']}, {report['pairs']} pairs x 2 "
        f"orders, mean judge prompt {report['mean_prompt_tokens']:.0f} tokens, token budget "
        f"{report['token_budget']}, prefix reuse {'on' if report['prefix_reuse'] else 'off'}. "
        f"Peak {fmt(report['peak_tflops'])} TFLOP/s ({report['peak_kind']}). "
        f"torch {report['versions']['torch']}, transformers {report['versions']['transformers']}, "
        f"Python {report['versions']['python']}; 1-min load average at the end "
        f"{fmt(report['load_avg'], '.2f')}.",
        "",
        "| mode | pairs/s | prompt tok/s | TFLOP/s | share of peak | peak mem GiB | wall s | CPU s "
        "| speed-up wall / CPU | verdicts agree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in report["modes"].items():
        agree = r.get("verdict_agreement_with_batched")
        share = r.get("share_of_peak")
        lines.append(
            f"| {mode} | {r['pairs_per_s']:.3g} | {r['tokens_per_s']:.0f} | {r['tflops']:.3g} | "
            f"{'n/a' if share is None else f'{100 * share:.1f}%'} | {r['peak_memory_gib']:.2f} | "
            f"{r['seconds']:.1f} | {r['cpu_seconds']:.1f} | "
            f"{fmt(r.get('speedup_vs_unbatched'), '.2f')} / "
            f"{fmt(r.get('speedup_vs_unbatched_cpu_time'), '.2f')} | "
            f"{'-' if agree is None else f'{100 * agree:.0f}%'} |")
    if "explain" in report["modes"]:
        e = report["modes"]["explain"]
        lines.append("")
        lines.append(f"explain = MT-bench pair-v2, {e['pairs']} pairs, at most {e['max_new_tokens']} new "
                     f"tokens, {e['generated_tokens']} generated; off-format "
                     f"{100 * e['off_format_rate']:.0f}% of judgments; its agreement is with the "
                     "A/B prompt's verdict (a different prompt).")
    if report["device_type"] == "cpu":
        lines.append("")
        lines.append("GPU (bf16, SDPA): not measured in this run (no GPU available).")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench_cmd(
        model: Annotated[str | None, typer.Option(help="Judge model spec (default smollm2-135m-instruct, "
                                                  "real weights).")] = None,
        arch: Annotated[str | None, typer.Option(help="Random-weights architecture instead: smollm2-135m, "
                                                 "qwen2.5-0.5b, qwen2.5-1.5b, llama-3.1-8b.")] = None,
        pairs: Annotated[int, typer.Option(help="Pairs to judge (x2 orders).")] = 32,
        prompt_tokens: Annotated[int, typer.Option(help="Stretch responses until the judge prompt has about "
                                                   "this many tokens (0: natural lengths).")] = 0,
        explain_pairs: Annotated[int, typer.Option(help="Pairs for the generate-then-parse mode.")] = 4,
        explain_tokens: Annotated[int, typer.Option(help="Most new tokens per explanation.")] = 96,
        modes: Annotated[str, typer.Option(help="Comma list of batched, unbatched, explain.")
                         ] = "batched,unbatched,explain",
        device: Annotated[str | None, typer.Option(help="cpu or cuda (default: cuda when available).")
                          ] = None,
        token_budget: Annotated[int | None, typer.Option(help="Tokens per forward pass (batched mode).")
                                ] = None,
        batch_size: Annotated[int, typer.Option(help="Most prompts per forward pass.")] = 64,
        json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")
                            ] = None,
        markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Append the markdown table to "
                                                          "this file (e.g. docs/benchmarks.md).")] = None,
        threads: Annotated[int | None, typer.Option(help="CPU threads for torch (default: torch's choice). "
                                                    "1 is steadier on a machine shared with other jobs.")
                           ] = None,
    ) -> None:
        """Benchmark the local judge: batched scoring vs one-at-a-time vs generate-then-parse.

        Prints a JSON report and a markdown table; figures are measurements of this run on this
        machine, never thresholds. Run it on a quiet machine.
        """
        if model and arch:
            raise typer.BadParameter("give --model or --arch, not both")
        if threads:
            import torch

            torch.set_num_threads(threads)
        chosen = [m.strip() for m in modes.split(",") if m.strip()]
        unknown = set(chosen) - {"batched", "unbatched", "explain"}
        if unknown:
            raise typer.BadParameter(f"unknown mode(s) {sorted(unknown)}")
        report = run_benchmark(model=model, arch=arch, n_pairs=pairs, prompt_tokens=prompt_tokens,
                               explain_pairs=explain_pairs, explain_tokens=explain_tokens, modes=chosen,
                               device=device, token_budget=token_budget, batch_size=batch_size)
        text = json.dumps(report, indent=2)
        typer.echo(text)
        table = markdown(report)
        typer.echo(table)
        if json_out:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(text + "\n")
        if markdown_out:
            markdown_out.parent.mkdir(parents=True, exist_ok=True)
            with markdown_out.open("a", encoding="utf-8") as fh:
                fh.write("\n" + table)
