"""On a GPU: the in-process engine against vLLM, bf16, on 1.5B- and 8B-class random-weights shapes.

    python benchmarks/gpu_vllm_compare.py                       # qwen2.5-1.5b and llama-3.1-8b, 64 pairs
    python benchmarks/gpu_vllm_compare.py --archs qwen2.5-1.5b --pairs 256 --prompt-tokens 1024

Needs the README environment plus vLLM (``scripts/install.sh --vllm`` with ``VLLM_PACKAGE=vllm``,
or ``pip install vllm`` in an environment named by ``JUDGEBIAS_VLLM_PYTHON``). Each shape's
seeded random weights are saved to a temporary folder (vLLM loads folders), judged by both engines
on the same token ids, and reported as pairs/s and the share of the GPU's dense bf16 peak: the
prefill FLOPs (2 x parameters x prompt tokens) over the wall time. Without a GPU it prints why and
exits 0, having measured nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archs", default="qwen2.5-1.5b,llama-3.1-8b")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=0, help="stretch each prompt to about this")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_vllm_compare: no CUDA GPU here (torch.cuda.is_available() is False); nothing measured")
        return 0
    from judgebias.backends.loading import load_tokenizer
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.random_weights import random_model
    from judgebias.backends.vllm_backend import VLLMBackend, VLLMNotInstalled, vllm_python
    from judgebias.bench.hardware import gpu_peak_tflops
    from judgebias.bench.throughput import bench_pairs
    from judgebias.prompts import DBG_AB

    try:
        vllm_python()
    except VLLMNotInstalled as exc:
        print(f"gpu_vllm_compare: {exc}")
        return 0
    name = torch.cuda.get_device_name(0)
    peak = gpu_peak_tflops(name)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    pairs = bench_pairs(args.pairs, args.prompt_tokens, tokenizer, DBG_AB)
    prompts = [DBG_AB.build(p.prompt, *p.shown(o)) for p in pairs for o in ("ab", "ba")]
    print(f"{name}; dense bf16 peak {peak} TFLOP/s; {len(pairs)} pairs x 2 orders")
    for arch in [a.strip() for a in args.archs.split(",") if a.strip()]:
        loaded = random_model(arch, tokenizer=tokenizer, seed=0, device="cuda", dtype="bfloat16")
        engine = LocalBackend(loaded)
        tokens = sum(len(engine.encode(p)) for p in prompts)
        n_params = loaded.n_params
        rows = {}
        engine.score_options(prompts[:2], DBG_AB.options)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        ref = engine.score_options(prompts, DBG_AB.options)
        torch.cuda.synchronize()
        rows["engine"] = time.perf_counter() - start
        with tempfile.TemporaryDirectory(prefix=f"{arch}-random-") as folder:
            loaded.model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            del engine, loaded
            torch.cuda.empty_cache()  # vLLM takes its share of the GPU's memory from what is free
            vllm = VLLMBackend(folder, dtype="bfloat16")
            try:
                vllm.score_options(prompts[:2], DBG_AB.options)  # engine start + warm-up
                start = time.perf_counter()
                got = vllm.score_options(prompts, DBG_AB.options)
                rows["vllm"] = time.perf_counter() - start
            finally:
                vllm.close()
        gap = max(abs(a.probs["A"] - b.probs["A"]) for a, b in zip(ref, got, strict=True))
        for engine_name, seconds in rows.items():
            tflops = 2 * n_params * tokens / seconds / 1e12
            share = f"{100 * tflops / peak:.1f}% of peak" if peak else "peak unknown for this GPU"
            print(f"{arch} ({n_params / 1e9:.2f} B) {engine_name}: {len(pairs) / seconds:.1f} pairs/s, "
                  f"{tokens / seconds:.0f} prompt tok/s, {tflops:.1f} TFLOP/s, {share}")
        print(f"{arch}: max |dP(A)| engine vs vLLM (both bf16) {gap:.3g}")
    return 0


if __name__ == "__main__":  # vLLM spawns processes that re-import the main module
    sys.exit(main())
