"""``judgebias bench``: the command around ``judgebias.bench.throughput`` (what it measures is there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


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
        modes: Annotated[str, typer.Option(help="Comma list of batched, unbatched, explain, vllm (vLLM "
                                              "in its own environment: scripts/install.sh --vllm).")
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
        dtype: Annotated[str, typer.Option(help="Engine dtype (batched, explain): auto (bf16 on GPU, fp32 "
                                           "on CPU), float32, bfloat16, float16.")] = "auto",
        baseline_dtype: Annotated[str, typer.Option(help="dtype of the one-at-a-time baseline (default: "
                                                    "the device's, fp32 on CPU). When it differs from "
                                                    "--dtype the baseline also runs in --dtype.")
                                  ] = "auto",
        threads: Annotated[int | None, typer.Option(help="CPU threads for torch (default: torch's choice). "
                                                    "1 is steadier on a machine shared with other jobs.")
                           ] = None,
        endpoint: Annotated[str | None, typer.Option(help="Also time an OpenAI-compatible server on the same "
                                                     "prompts (llama-server, vLLM, Ollama, transformers "
                                                     "serve), e.g. http://127.0.0.1:8080/v1.")] = None,
        endpoint_model: Annotated[str | None, typer.Option(help="The model name the server expects "
                                                           "(default: the judge's name).")] = None,
        endpoint_concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight to the server.")
                                        ] = 1,
        endpoint_option_tokenizer: Annotated[str | None, typer.Option(
            help="The served model's tokenizer (alias, folder, hub id): a server that returns named token "
                 "ids (vLLM) is asked for the option tokens' log-probs, exact P(A) instead of top-20 "
                 "bounds.")] = None,
        quantize: Annotated[str, typer.Option(help="Quantize the engine's copy: none or int8 (weight-only, "
                                              "torchao). With --modes batched alone the reference copy "
                                              "is freed first: peak memory is the engine's.")] = "none",
    ) -> None:
        """Benchmark the local judge: batched scoring vs one-at-a-time vs generate-then-parse, and
        with --endpoint a server the user would otherwise run, on the same prompts.

        Prints a JSON report and a markdown table; figures are measurements of this run on this
        machine, never thresholds. Run it on a quiet machine.
        """
        if model and arch:
            raise typer.BadParameter("give --model or --arch, not both")
        if threads:
            import torch

            torch.set_num_threads(threads)
        from judgebias.backends.kinds import DTYPES

        for flag, value in (("--dtype", dtype), ("--baseline-dtype", baseline_dtype)):
            if value not in DTYPES:
                raise typer.BadParameter(f"unknown {flag} {value!r}; use one of {', '.join(DTYPES)}")
        from judgebias.backends.loading import default_device, native_bf16_units, slow_bf16_warning

        warning = slow_bf16_warning(dtype, device or default_device(), native_bf16_units())
        if warning:
            typer.echo(warning, err=True)
        from judgebias.backends.quantization import check_quantization

        try:
            check_quantization(quantize, what="--quantize")
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        chosen = [m.strip() for m in modes.split(",") if m.strip()]
        unknown = set(chosen) - {"batched", "unbatched", "explain", "vllm"}
        if unknown:
            raise typer.BadParameter(f"unknown mode(s) {sorted(unknown)}")
        from judgebias.bench.throughput import markdown, run_benchmark

        report = run_benchmark(model=model, arch=arch, n_pairs=pairs, prompt_tokens=prompt_tokens,
                               explain_pairs=explain_pairs, explain_tokens=explain_tokens, modes=chosen,
                               device=device, token_budget=token_budget, batch_size=batch_size,
                               dtype=dtype, baseline_dtype=baseline_dtype, endpoint=endpoint,
                               endpoint_model=endpoint_model, endpoint_concurrency=endpoint_concurrency,
                               quantize=quantize, endpoint_option_tokenizer=endpoint_option_tokenizer)
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
