"""Style-rewrite ablation (DBG paper, Sec. 4.2 and App. A.3)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, frame, frames, noop, open_model, stage_output
from judgebias.stages.compare import dbg_summary, format_compare
from judgebias.stages.data import subset
from judgebias.stages.results import compute_metrics, gold_for


def rewriter_judges(cfg: ExperimentConfig) -> tuple[str, ...]:
    """Judges that are the rewriter's model: left out of the gold panel in the style ablation."""
    rw = cfg.ablations.style_rewrite
    return tuple(j.name for j in cfg.pairwise_judges() if j.model == rw.model and j.backend == rw.backend)


def _style_instructions(cfg: ExperimentConfig, responses: dict[str, pd.DataFrame]) -> list[str]:
    first = next(iter(responses.values()))
    ids = first[["instruction_id"]].drop_duplicates()
    return subset(ids, cfg.ablations.style_rewrite.sample, cfg.dataset.seed)["instruction_id"].tolist()


def rewrite_style(
    cfg: ExperimentConfig,
    store: RunStore,
    style: str,
    responses: dict[str, pd.DataFrame],
    *,
    progress: Progress = noop,
) -> dict[str, pd.DataFrame]:
    """Both (all) generators' responses rewritten into ``style`` by the rewriter, per generator."""
    from judgebias.ablations.style import TEMPLATE_VERSION, rewrite_responses
    from judgebias.backends.kinds import uses_chat
    from judgebias.backends.protocol import GenerationParams

    variant = RunLayout.style(cfg, style)

    def compute(info: dict) -> dict[str, pd.DataFrame]:
        rw = cfg.ablations.style_rewrite
        keep = set(_style_instructions(cfg, responses))
        out = {}
        with open_model(cfg, rw, name=f"rewriter:{rw.model}") as backend:
            runner = backend.with_template(TEMPLATE_VERSION)
            chat = uses_chat(backend)
            params = GenerationParams(max_new_tokens=rw.max_new_tokens)
            for g, df in responses.items():
                part = df[df["instruction_id"].isin(keep) & df["error"].isna()].reset_index(drop=True)
                rewritten = rewrite_responses(runner, part, style, params, chat=chat,
                                              batch_size=rw.batch_size)
                rewritten["error"] = rewritten["rewrite_error"]
                out[g] = rewritten
                progress(
                    f"{style}: {len(rewritten)} responses of {g} rewritten "
                    f"({int(rewritten['rewrite_error'].notna().sum())} failed)"
                )
            info.update(calls=backend.calls, hits=backend.hits)
        return out

    names = {g: variant.responses(g) for g in responses}
    return stage_output(store, frames(names), variant.stage("rewrite_style"), compute)


def semantic_preservation(
    cfg: ExperimentConfig,
    store: RunStore,
    rewrites: dict[str, dict[str, pd.DataFrame]],
    *,
    progress: Progress = noop,
) -> pd.DataFrame:
    """Cosine similarity of each rewrite to its original and the App. A.3 projection plot."""
    from judgebias.ablations.style import Embedder
    from judgebias.ablations.style import semantic_preservation as measure

    base = RunLayout.style(cfg)

    def compute(_: dict) -> pd.DataFrame:
        both = pd.concat([df for per_gen in rewrites.values() for df in per_gen.values()], ignore_index=True)
        sem = measure(Embedder.load(cfg.ablations.style_rewrite.embedder), both)
        if len(sem) >= 1:
            from judgebias.reporting import plots, plots_ablations
            plots.save_figure(plots_ablations.semantic_shift(sem), store.path(base.plot("semantic_shift")))
        summary = sem.groupby("style")["cosine"].mean().round(3).to_dict() if len(sem) else {}
        progress(f"semantic preservation (mean cosine original vs rewrite): {summary}")
        return sem

    return stage_output(store, frame(base.semantic), base.stage("semantic_preservation"), compute)


def compare_style(
    cfg: ExperimentConfig,
    store: RunStore,
    before: pd.DataFrame,
    after: dict[str, pd.DataFrame],
    *,
    progress: Progress = noop,
) -> dict:
    """DBG per judge before and after each rewrite, on the same instructions and the same gold panel
    (the rewriter left out), side by side; plus the usual metrics of each rewritten table."""
    base = RunLayout.style(cfg)
    exclude = rewriter_judges(cfg)

    def compute(_: dict) -> dict:
        keep = set(next(iter(after.values()))["prompt"]) if after else set()
        before_sub = before[before["prompt"].isin(keep)]
        gold = gold_for(cfg, before, exclude)
        out: dict[str, Any] = {
            "rewriter": cfg.ablations.style_rewrite.model,
            "excluded_from_gold": list(exclude),
            "pairs_before": int(before_sub["pair_id"].nunique()),
            "judges": {},
        }
        for j in cfg.self_map:
            row = {"before": dbg_summary(before_sub, j, cfg, gold)}
            for style, table in after.items():
                row[style] = dbg_summary(table, j, cfg, gold)
            out["judges"][j] = row
        for style, table in after.items():
            out.setdefault("pairs_after", {})[style] = int(table["pair_id"].nunique())
            compute_metrics(cfg, store, table, variant=RunLayout.style(cfg, style), exclude=exclude)
        from judgebias.reporting import plots, plots_ablations
        plots.save_figure(plots_ablations.dbg_before_after(out, "DBG before and after style rewrite"),
                          store.path(base.plot("dbg_before_after")))
        progress("style ablation DBG: " + format_compare(out))
        return out

    return stage_output(store, document(base.comparison), base.stage("compare_style"), compute)
