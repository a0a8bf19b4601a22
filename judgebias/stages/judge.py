"""Judging stage: every judge scores every pair in both presentation orders."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, frame, noop, on_route, open_model, stage_output
from judgebias.stages.generation import pair_records
from judgebias.tables.pairwise import Exclusions

if TYPE_CHECKING:
    from judgebias.engine.workers import ChunkRoute


def judge_chat(judge_cfg, backend) -> bool:
    """Whether ``backend`` judges with chat prompts: the judge entry's prompt kind, else the model's."""
    from judgebias.backends.kinds import chat_for, uses_chat

    return uses_chat(backend, chat_for(judge_cfg.prompt_kind))


# Its signature repeats generate_responses': the stages' calling convention (stages/_common), on purpose.
def judge_pairs(
    cfg: ExperimentConfig,
    store: RunStore,
    judge: str,
    pairs: pd.DataFrame,
    *,
    variant: RunLayout = RunLayout(),
    adapter: dict | None = None,
    template: str | None = None,
    chunks: ChunkRoute | None = None,
    progress: Progress = noop,
) -> pd.DataFrame:
    """Every pair judged in both orders by ``judge``: its judgment-table rows. ``template`` asks
    the judge another question with its other settings (the self-recognition probe). ``chunks``:
    where to judge the pairs in chunks (the flow's workers); the rows are the same."""
    from judgebias.engine.pairwise import judge_pairs as run_judge
    from judgebias.prompts import judge_template

    def compute(info: dict) -> pd.DataFrame:
        j = cfg.judge(judge)
        if adapter:  # the fine-tuned generator's model judging, with the judge's other settings
            j = j.model_copy(update={"model": cfg.generator(cfg.self_map[judge]).model})
        if template:
            j = j.model_copy(update={"template": template})

        def sharded(spec):
            from judgebias.engine.workers import judge_chunk_size

            rows, summary = chunks.judge(pair_records(pairs), spec, judge_chunk_size(j.batch_size))
            exclusions = Exclusions()
            for reason, n in summary.exclusions.items():
                exclusions.add(reason, n)
            return (pd.DataFrame(rows), exclusions), summary

        usage: dict = {}

        def local(backend):
            result = run_judge(
                pair_records(pairs),
                backend,
                judge_template(j.template),
                judge=judge,
                chat=judge_chat(j, backend),
                chunk_size=j.batch_size * 4,
                progress=lambda done, total: progress(f"{judge}: {done}/{total} judgments"),
            )
            summary = getattr(backend, "usage_summary", None)  # an API judge's tokens and cost
            if callable(summary):
                usage.update(summary())
            return result.table(), result.exclusions

        (df, exclusions), calls, hits = on_route(cfg, j, name=judge, adapter=adapter, chunks=chunks,
                                                 sharded=sharded, local=local)
        info.update(rows=len(df), exclusions=exclusions.to_dict(), calls=calls, hits=hits)
        if usage:
            cost = usage.get("cost_usd")
            info["usage"] = {"prompt_tokens": int(usage.get("prompt_tokens", 0)),
                             "completion_tokens": int(usage.get("completion_tokens", 0)),
                             "usd": None if cost is None or cost != cost else float(cost)}
        progress(f"{judge}: {len(df)} pairs judged in both orders ({calls} scored, {hits} cached; "
                 f"{exclusions})")
        return df

    return stage_output(store, frame(variant.judgments(judge)), variant.stage(f"judge_pairs[{judge}]"),
                        compute)


REDUCED_PRECISION = ("bfloat16", "float16")


def dtype_fidelity(cfg: ExperimentConfig, store: RunStore, judge: str, judgments: pd.DataFrame,
                   *, sample: int = 4, progress: Progress = noop) -> dict | None:
    """What a reduced-precision local judge costs against float32, the exact reference: the first
    ``sample`` pairs re-scored in float32 (both orders), their P(A) and verdicts compared with the
    run's own. None for a float32 or API judge. A few pairs bound the cost, not the distribution:
    docs/benchmarks.md has the measurement over many."""
    from judgebias.backends.loading import load_model
    from judgebias.engine.pairwise import judge_pairs as run_judge
    from judgebias.metrics import precision_cost
    from judgebias.prompts import judge_template

    j = cfg.judge(judge)
    if not j.can("in_process") or j.dtype not in REDUCED_PRECISION:
        return None

    def compute(_: dict) -> dict:
        if judgments.empty:
            raise ValueError(f"judge {judge!r}: no judgments to compare in float32")
        head = judgments.drop_duplicates("pair_id").head(sample)
        reference = j.model_copy(update={"dtype": "float32"})
        once = load_model(j.model, dtype="float32")  # loaded apart: the resident models stay the run's
        with open_model(cfg, reference, name=judge, loaded=once) as backend:
            exact = run_judge(pair_records(head), backend, judge_template(j.template), judge=judge,
                              chat=judge_chat(j, backend), chunk_size=j.batch_size).table()
        out = {"judge": judge, "dtype": j.dtype, "reference": "float32", **precision_cost(head, exact)}
        progress(f"{judge}: {j.dtype} vs float32 on {out['judgments']} judgments: max |dP(A)| "
                 f"{out['max_abs_dp_a']:.3f}, {out['verdicts_changed']} verdict(s) changed")
        return out

    return stage_output(store, document(RunLayout.fidelity(judge)), f"dtype_fidelity[{judge}]", compute)
