"""Benchmark of the local judge (same as `judgebias bench`): batched scoring vs one prompt at a time
vs MT-bench generate-then-parse, with pairs/s, tokens/s, TFLOP/s, share of peak and peak memory.

    python benchmarks/bench_judge.py --pairs 32 --markdown docs/benchmarks.md
    python benchmarks/bench_judge.py --arch qwen2.5-0.5b --prompt-tokens 512 --modes batched,unbatched
"""

from __future__ import annotations

import typer

from judgebias.cli.bench import register


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    app(prog_name="bench_judge.py")


if __name__ == "__main__":
    main()
