"""Prefect flows of one experiment: wiring only; every step is a task in ``tasks.experiment``.

``experiment`` is the parent flow (``judgebias run CONFIG``); the two ablations are subflows that
can also run alone. Rerunning a killed experiment repeats no model call and redoes only unfinished
stages (see ``tasks.experiment`` for the caching policy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from judgebias import stages
from tasks import experiment as t


def _load(config_path: str, overrides: dict | None):
    from judgebias.config import load_config

    return load_config(config_path, overrides)


def _store(cfg, run_dir: str | None):
    from judgebias.runstore import RunStore

    return RunStore(cfg.run_path(run_dir))


def main_stages(cfg, store) -> dict[str, Any]:
    """Generate, pair, judge, explain and measure: the experiment without ablations."""
    instructions = t.load_instructions(cfg, store)
    responses = {g.name: t.generate_responses(cfg, store, g.name, instructions) for g in cfg.generators}
    pairs = t.build_pairs(cfg, store, responses)
    judgments = {j.name: t.judge_pairs(cfg, store, j.name, pairs) for j in cfg.judges}
    perplexity = (
        {j.name: t.perplexity_analysis(cfg, store, j.name, pairs) for j in cfg.judges if j.backend == "local"}
        if cfg.analyses.perplexity
        else {}
    )
    if cfg.analyses.attention:
        for j in cfg.judges:
            if j.backend == "local":
                t.attention_analysis(cfg, store, j.name, pairs)
    table = t.assemble_table(cfg, store, judgments, perplexity)
    t.aggregate_gold(cfg, store, table)
    metrics = t.compute_metrics(cfg, store, table)
    return {
        "instructions": instructions,
        "responses": responses,
        "pairs": pairs,
        "table": table,
        "metrics": metrics,
    }


@flow(name="style_rewrite_ablation", log_prints=True)
def style_rewrite_ablation(
    config_path: str, overrides: dict | None = None, run_dir: str | None = None
) -> dict:
    """DBG Sec. 4.2: rewrite both generators' responses into each style, judge again, compare DBG
    (rewriter left out of the gold panel), and check that rewriting kept the meaning (App. A.3)."""
    cfg = _load(config_path, overrides)
    store = _store(cfg, run_dir)
    # Called from ``experiment`` the main stages are read back from the run folder, not recomputed.
    state = main_stages(cfg, store)
    rewrites = {
        s: t.rewrite_style(cfg, store, s, state["responses"]) for s in cfg.ablations.style_rewrite.styles
    }
    t.semantic_preservation(cfg, store, rewrites)
    after = {}
    for style, rewritten in rewrites.items():
        prefix = stages.style_prefix(cfg, style)
        pairs = t.build_pairs(cfg, store, rewritten, prefix=prefix)
        judged = {j.name: t.judge_pairs(cfg, store, j.name, pairs, prefix=prefix) for j in cfg.judges}
        after[style] = t.assemble_table(cfg, store, judged, None, prefix=prefix)
    return t.compare_style(cfg, store, state["table"], after)


@flow(name="finetune_ablation", log_prints=True)
def finetune_ablation(config_path: str, overrides: dict | None = None, run_dir: str | None = None) -> dict:
    """DBG Sec. 4.3: LoRA-fine-tune two base models on the same data, regenerate, re-judge, compare."""
    cfg = _load(config_path, overrides)
    store = _store(cfg, run_dir)
    # Called from ``experiment`` the main stages are read back from the run folder, not recomputed.
    state = main_stages(cfg, store)
    prefix = stages.finetune_prefix(cfg)
    adapters = {g: t.finetune_generator(cfg, store, g) for g in cfg.finetune_generators}
    instructions = t.finetune_instructions(cfg, state["instructions"])
    responses = {
        g.name: t.generate_responses(
            cfg, store, g.name, instructions, prefix=prefix, adapter=adapters.get(g.name)
        )
        for g in cfg.generators
    }
    pairs = t.build_pairs(cfg, store, responses, prefix=prefix)
    judged = {
        j.name: t.judge_pairs(
            cfg, store, j.name, pairs, prefix=prefix, adapter=adapters.get(cfg.self_map.get(j.name, ""))
        )
        for j in cfg.judges
    }
    after = t.assemble_table(cfg, store, judged, None, prefix=prefix)
    return t.compare_finetune(cfg, store, state["table"], after)


@flow(name="experiment", log_prints=True)
def experiment(config_path: str, overrides: dict | None = None, run_dir: str | None = None) -> dict:
    """Run every configured stage of one experiment and track it in MLflow."""
    cfg = _load(config_path, overrides)
    store = _store(cfg, run_dir)
    main_stages(cfg, store)
    if cfg.ablations.style_rewrite.enabled:
        style_rewrite_ablation(config_path, overrides, run_dir)
    if cfg.ablations.finetune.enabled:
        finetune_ablation(config_path, overrides, run_dir)
    tracking = t.log_to_mlflow(cfg, store, str(Path(config_path).resolve()))
    t.publish_summary(cfg, store, tracking)
    return {"run_folder": str(store.root), **tracking}
