"""The in-process engine against vLLM, paired and interleaved: both judge the same prompts in each
round, the order of the modes turns every round, and the 1-minute load is read before and after
each timed call, so a machine shared with other jobs slows both sides of a pair alike.

`judgebias bench --modes batched,vllm` times each mode once, one after the other; on a machine whose
load swings from 1 to 30 within minutes the ratio of two such runs measures the load as much as
the engines (docs/benchmarks.md had 5.7-7.7x for vLLM from one load, 1.5x for the engine from
another). Here:

- both engines are started and warmed up first (vLLM's start is reported apart), then stay
  resident, so each round times judging only;
- round r judges its own pairs (distinct instructions per round: neither vLLM's prefix cache nor
  anything else can answer a later round from an earlier one) in both orders;
- per round and mode: wall seconds, pairs/s, the load before and after, the CPU seconds of the
  engine's process and of vLLM's process tree (vLLM's tree is also read while the engine runs:
  what it costs when idle);
- the paired figure is the per-round ratio engine/vLLM pairs/s: its median, min and max over the
  rounds; peak resident memory of each process tree (VmHWM, Linux) at the end;
- P(A) of the two engines on the same prompts: the largest |dP(A)| and the verdict agreement.

    nice -n 10 python benchmarks/bench_vllm_paired.py --model smollm2-135m-instruct --pairs 16 \\
        --threads 2 --rounds 5 --json benchmarks/results/vllm_paired_smollm2.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc)."""
    from judgebias.bench.vllm import _tree

    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / ticks


def _self_peak_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _verdict(p: float) -> str:
    return "a" if p > 0.5 else "b" if p < 0.5 else "tie"


def run(model: str, n_pairs: int, rounds: int, threads: int, engine_dtypes: list[str],
        vllm_dtype: str | None) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    from judgebias.backends import loading as models
    from judgebias.backends.local import LocalBackend
    from judgebias.bench.hardware import cpu_name
    from judgebias.bench.throughput import bench_pairs
    from judgebias.bench.vllm import tree_peak_gib
    from judgebias.prompts import DBG_AB

    engines: dict[str, Any] = {}
    for d in engine_dtypes:
        loaded = models.load_model(model, device="cpu", dtype=models.resolve_dtype(d, "cpu"))
        engines[f"engine-{d}"] = LocalBackend(loaded)
    first = next(iter(engines.values()))
    # Round 0 is the warm-up set; rounds 1..R are timed, each on pairs no other round saw.
    pairs = bench_pairs(n_pairs * (rounds + 1), 0, first.tokenizer, DBG_AB)
    chat = first.is_chat
    sets = []
    for r in range(rounds + 1):
        chunk = pairs[r * n_pairs:(r + 1) * n_pairs]
        sets.append([DBG_AB.build(p.prompt, *p.shown(o), chat=chat) for p in chunk for o in ("ab", "ba")])
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "model": model,
        "device": f"{cpu_name()}, {os.cpu_count()} cores", "threads": threads, "pairs_per_round": n_pairs,
        "rounds": rounds, "mean_prompt_tokens": statistics.mean(
            len(first.encode(p)) for s in sets[1:] for p in s),
        "versions": {"torch": torch.__version__}, "start": {}, "rows": []}
    vllm = None
    modes = list(engines)
    if vllm_dtype:
        from judgebias.backends.vllm_backend import VLLMBackend

        vllm = VLLMBackend(model, dtype=vllm_dtype)
        modes.append(f"vllm-{vllm_dtype}")
        report["versions"]["vllm"] = f"{vllm.vllm_dist} {vllm.vllm_version}"
    backends = {**engines, **({f"vllm-{vllm_dtype}": vllm} if vllm else {})}
    for mode, backend in backends.items():  # start and warm up: kernels, allocator, vLLM's engine
        start = time.perf_counter()
        backend.score_options(sets[0][:2], DBG_AB.options)
        report["start"][mode] = round(time.perf_counter() - start, 1)
    p_first: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(1, rounds + 1):
        order = modes[(r - 1) % len(modes):] + modes[:(r - 1) % len(modes)]  # turns every round
        for mode in order:
            vllm_cpu0 = _tree_cpu_seconds(vllm._proc.pid) if vllm and vllm._proc else None
            load0 = os.getloadavg()[0]
            cpu0, t0 = time.process_time(), time.perf_counter()
            scores = backends[mode].score_options(sets[r], DBG_AB.options)
            seconds = time.perf_counter() - t0
            own_cpu = time.process_time() - cpu0
            load1 = os.getloadavg()[0]
            vllm_cpu = (_tree_cpu_seconds(vllm._proc.pid) - vllm_cpu0) if vllm_cpu0 is not None else None
            p_first[mode] += [s.probs["A"] for s in scores]
            report["rows"].append({"round": r, "mode": mode, "seconds": round(seconds, 3),
                                   "pairs_per_s": n_pairs / seconds, "load_before": load0,
                                   "load_after": load1, "driver_cpu_s": round(own_cpu, 2),
                                   "vllm_tree_cpu_s": None if vllm_cpu is None else round(vllm_cpu, 2)})
            print(json.dumps(report["rows"][-1]), flush=True)
    report["peak_memory_gib"] = {"engine process (all engine copies, driver)": _self_peak_gib()}
    if vllm and vllm._proc:
        report["peak_memory_gib"]["vllm process tree"] = tree_peak_gib(vllm._proc.pid)
    if vllm:
        vllm.close()
    report["summary"] = summarize(report["rows"], modes)
    ref = modes[0]
    report["agreement_with"] = {"reference": ref, **{
        m: {"max_abs_dp": max(abs(a - b) for a, b in zip(p_first[ref], p_first[m], strict=True)),
            "verdicts_agree": sum(_verdict(a) == _verdict(b) for a, b in zip(p_first[ref], p_first[m],
                                                                             strict=True)) / len(p_first[m])}
        for m in modes[1:]}}
    return report


def summarize(rows: list[dict], modes: list[str]) -> dict[str, Any]:
    """Per mode the median pairs/s and its range; per other mode the paired ratio (first mode's
    pairs/s over its own, round by round): median, min, max, n rounds; and the loads seen."""
    by = {m: {row["round"]: row for row in rows if row["mode"] == m} for m in modes}
    out: dict[str, Any] = {"modes": {}, "ratios": {}}
    for m in modes:
        rates = [row["pairs_per_s"] for row in by[m].values()]
        out["modes"][m] = {"median_pairs_per_s": statistics.median(rates), "min": min(rates),
                           "max": max(rates), "n_rounds": len(rates)}
    ref = modes[0]
    for m in modes[1:]:
        ratios = [by[ref][r]["pairs_per_s"] / by[m][r]["pairs_per_s"] for r in by[ref] if r in by[m]]
        out["ratios"][f"{ref} / {m}"] = {"median": statistics.median(ratios), "min": min(ratios),
                                          "max": max(ratios), "n_rounds": len(ratios)}
    loads = [x for row in rows for x in (row["load_before"], row["load_after"])]
    out["load"] = {"min": min(loads), "median": statistics.median(loads), "max": max(loads)}
    return out


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [f"#### {report['model']}, {report['pairs_per_round']} pairs x 2 orders a round, "
             f"{report['rounds']} rounds, {report['threads']} torch threads ({report['date']})", "",
             f"{report['device']}; mean judge prompt {report['mean_prompt_tokens']:.0f} tokens; "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
             + f"; 1-minute load during the rounds {s['load']['min']:.1f}-{s['load']['max']:.1f} "
             f"(median {s['load']['median']:.1f}).", "",
             "| round | mode | pairs/s | wall s | load before -> after | engine CPU s | vLLM tree CPU s |",
             "|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        vcpu = "-" if row["vllm_tree_cpu_s"] is None else f"{row['vllm_tree_cpu_s']:.1f}"
        lines.append(f"| {row['round']} | {row['mode']} | {row['pairs_per_s']:.2f} | {row['seconds']:.1f} | "
                     f"{row['load_before']:.1f} -> {row['load_after']:.1f} | {row['driver_cpu_s']:.1f} | "
                     f"{vcpu} |")
    lines += ["", "| mode | median pairs/s [min, max] | n rounds | start + warm-up s |", "|---|---|---|---|"]
    for m, v in s["modes"].items():
        lines.append(f"| {m} | {v['median_pairs_per_s']:.2f} [{v['min']:.2f}, {v['max']:.2f}] | "
                     f"{v['n_rounds']} | {report['start'][m]} |")
    lines.append("")
    for name, v in s["ratios"].items():
        lines.append(f"Paired ratio {name} (pairs/s, round by round): median {v['median']:.2f}x, "
                     f"range {v['min']:.2f}-{v['max']:.2f}x over {v['n_rounds']} rounds.")
    peaks = ", ".join(f"{k} {v:.2f} GiB" for k, v in report["peak_memory_gib"].items() if v is not None)
    lines.append(f"Peak resident memory (VmHWM): {peaks}.")
    agree = report["agreement_with"]
    for m, v in agree.items():
        if m != "reference":
            lines.append(f"{m} against {agree['reference']} on the same prompts: max |dP(A)| "
                         f"{v['max_abs_dp']:.2g}, verdicts agree {100 * v['verdicts_agree']:.0f}%.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine-dtypes", default="float32", help="comma list: float32, bfloat16")
    ap.add_argument("--vllm-dtype", default="float32", help="'none': engine dtypes only")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path, help="append the table to this file")
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.rounds < 1:
        ap.error("--pairs and --rounds must be at least 1")
    report = run(args.model, args.pairs, args.rounds, args.threads,
                 [d.strip() for d in args.engine_dtypes.split(",") if d.strip()],
                 None if args.vllm_dtype == "none" else args.vllm_dtype)
    text = markdown(report)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        with args.markdown.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
