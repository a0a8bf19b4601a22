"""Prefect flows of one experiment: wiring only; every step is a task in ``judgebias.tasks.experiment``.

``experiment`` is the parent flow (``judgebias run CONFIG``); the two ablations, the probes and the
pointwise judges are subflows that can also run alone. Rerunning a killed experiment repeats no model call and
redoes only unfinished stages (see ``judgebias.tasks.experiment`` for the caching policy).
"""

from __future__ import annotations

import os
import time
from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from judgebias import parts, stages
from judgebias.backends.builder import release_resident_models
from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.tasks import experiment as t
from judgebias.tasks.stage_lines import new_experiment

# One task at a time unless the config's task_runner says otherwise (``configured``): two local
# models judging at once would double memory and fight over the same cores.
SEQUENTIAL = ThreadPoolTaskRunner(max_workers=1)


def _load(config_path: str, overrides: dict | None):
    from judgebias.config.experiment import load_config

    return load_config(config_path, overrides)


def _store(cfg, run_dir: str | None):
    from judgebias.runs.store import RunStore

    return RunStore(cfg.run_path(run_dir))


def configured(flow_obj, cfg):
    """``flow_obj`` with the config's task runner (threads or Dask,
    ``judgebias.flows.runtime.task_runners``)."""
    from judgebias.flows.runtime.task_runners import task_runner_from_config

    return flow_obj.with_options(task_runner=task_runner_from_config(cfg.task_runner))


def each(task, names, *args, **kwargs) -> dict[str, Any]:
    """Submit ``task(*args[:2], name, *args[2:])`` for every name, then wait for all: concurrent on a
    multi-worker task runner, one after the other on the default one. A generation or judging stage
    on a Dask runner runs here, one name after the other, each spreading its chunks over all the
    workers (``judgebias.tasks.experiment.sharded``)."""
    head, tail = args[:2], args[2:]
    if t.sharded(task, head[0]):
        return {n: task(*head, n, *tail, **kwargs) for n in names}
    futures = {n: task.submit(*head, n, *tail, **kwargs) for n in names}
    return {n: f.result() for n, f in futures.items()}


def main_stages(cfg, store) -> dict[str, Any]:
    """Generate, pair, judge, explain, measure and rank the generators: the experiment without
    ablations."""
    instructions = t.load_instructions(cfg, store)
    responses = each(t.generate_responses, [g.name for g in cfg.generators], cfg, store, instructions)
    pairs = t.build_pairs(cfg, store, responses)
    judgments = each(t.judge_pairs, [j.name for j in cfg.pairwise_judges()], cfg, store, pairs)
    # Each analysis on the judges whose backend can do it (judgebias.backends.kinds.CAPABILITIES).
    for judge in cfg.pairwise_judges_that_can("in_process"):
        t.dtype_fidelity(cfg, store, judge, judgments[judge])
    perplexity = (each(t.perplexity_analysis, cfg.pairwise_judges_that_can("perplexity"), cfg, store, pairs)
                  if cfg.analyses.perplexity else {})
    if cfg.analyses.attention:
        each(t.attention_analysis, cfg.pairwise_judges_that_can("attention"), cfg, store, pairs)
    table = t.assemble_table(cfg, store, judgments, perplexity)
    t.aggregate_gold(cfg, store, table)
    metrics = t.compute_metrics(cfg, store, table)
    # Several generators: their bias-corrected leaderboard (None with fewer than two).
    board = t.compute_leaderboard(cfg, store, table, metrics)
    return {
        "instructions": instructions,
        "responses": responses,
        "pairs": pairs,
        "judgments": judgments,
        "table": table,
        "metrics": metrics,
        "leaderboard": board,
    }


# The subflows take the config ``experiment`` parsed (frozen, validated once), not its path: one
# `judgebias run` used to parse and validate the same file five times.
@flow(name="main_stages", log_prints=True, task_runner=SEQUENTIAL)
def main_flow(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """The experiment without ablations and tracking (a subflow of ``experiment``)."""
    out = main_stages(cfg, _store(cfg, run_dir))
    return {"pairs": len(out["pairs"]), "rows": len(out["table"])}


@flow(name="style_rewrite_ablation", log_prints=True, task_runner=SEQUENTIAL)
def style_rewrite_ablation(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """DBG Sec. 4.2: rewrite both generators' responses into each style, judge again, compare DBG
    (rewriter left out of the gold panel), and check that rewriting kept the meaning (App. A.3)."""
    store = _store(cfg, run_dir)
    # After ``main_flow`` the main stages are read back from the run folder, not recomputed.
    state = main_stages(cfg, store)
    rewrites = {
        s: t.rewrite_style(cfg, store, s, state["responses"]) for s in cfg.ablations.style_rewrite.styles
    }
    t.semantic_preservation(cfg, store, rewrites)
    after = {}
    for style, rewritten in rewrites.items():
        variant = RunLayout.style(cfg, style)
        pairs = t.build_pairs(cfg, store, rewritten, variant=variant)
        judged = each(t.judge_pairs, [j.name for j in cfg.pairwise_judges()], cfg, store, pairs,
                      variant=variant)
        after[style] = t.assemble_table(cfg, store, judged, None, variant=variant)
    return t.compare_style(cfg, store, state["table"], after)


@flow(name="finetune_ablation", log_prints=True, task_runner=SEQUENTIAL)
def finetune_ablation(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """DBG Sec. 4.3: LoRA-fine-tune two base models on the same data, regenerate, re-judge, compare."""
    store = _store(cfg, run_dir)
    # After ``main_flow`` the main stages are read back from the run folder, not recomputed.
    state = main_stages(cfg, store)
    variant = RunLayout.finetune(cfg)
    adapters = {g: t.finetune_generator(cfg, store, g) for g in cfg.finetune_generators}
    instructions = t.finetune_instructions(cfg, state["instructions"])
    responses = {
        g.name: t.generate_responses(
            cfg, store, g.name, instructions, variant=variant, adapter=adapters.get(g.name)
        )
        for g in cfg.generators
    }
    pairs = t.build_pairs(cfg, store, responses, variant=variant)
    judged = {
        j.name: t.judge_pairs(
            cfg, store, j.name, pairs, variant=variant, adapter=adapters.get(cfg.self_map.get(j.name, ""))
        )
        for j in cfg.pairwise_judges()
    }
    after = t.assemble_table(cfg, store, judged, None, variant=variant)
    return t.compare_finetune(cfg, store, state["table"], after)


def probe_stages(cfg: ExperimentConfig, store, probe: str) -> dict:
    """A probe declared to run on the main run's pairs (``judgebias.parts.PairwiseProbe``): its
    pairs derived from the main run's, judged again by each pairwise judge in its folder (with its
    template, if it names one), then its result from the judgments before and after."""
    runs = parts.declared(probe).runs
    if runs is None:
        raise ValueError(f"part {probe!r} does not run on the main run's pairs")
    state = main_stages(cfg, store)
    probe_pairs = t.probe_pairs(cfg, store, probe, state["pairs"])
    variant, template = RunLayout.of(probe, cfg), runs.template or None
    judges = [j.name for j in cfg.pairwise_judges()]
    if parts.PROBE_JUDGE in probe_pairs.columns:  # each judge asked its own rows (none: not asked)
        asked = {j: stages.pairs_for(probe_pairs, j) for j in judges}
        after = {j: t.judge_pairs(cfg, store, j, rows, variant=variant, template=template)
                 for j, rows in asked.items() if len(rows)}
    else:
        after = each(t.judge_pairs, judges, cfg, store, probe_pairs, variant=variant, template=template)
    return t.probe_result(cfg, store, probe, state["judgments"], after, probe_pairs)


@flow(name="pairwise_probe", flow_run_name="probe-{probe}", log_prints=True, task_runner=SEQUENTIAL)
def pairwise_probe(cfg: ExperimentConfig, probe: str, run_dir: str | None = None) -> dict:
    """Any probe ``judgebias.parts`` declares to run on the main run's pairs (``probe_stages``)."""
    return probe_stages(cfg, _store(cfg, run_dir), probe)


@flow(name="perturbation_probe", log_prints=True, task_runner=SEQUENTIAL)
def perturbation_probe(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """CALM: each configured perturbation added to one side of the pairs, judged again in both
    orders; robustness rate and shift toward the perturbed side per judge (``pairwise_probe``)."""
    return probe_stages(cfg, _store(cfg, run_dir), "perturbations")


@flow(name="self_recognition_probe", log_prints=True, task_runner=SEQUENTIAL)
def self_recognition_probe(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """Panickssery et al.: each judge asked which answer of a pair it wrote, on the pairs holding
    exactly one of its own; related to its preference on the same pairs (``pairwise_probe``)."""
    return probe_stages(cfg, _store(cfg, run_dir), "self_recognition")


@flow(name="pointwise_judging", log_prints=True, task_runner=SEQUENTIAL)
def pointwise_judging(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """The judges with ``mode: pointwise`` score every generated response alone; their figures
    (with the pairwise judge on the same model for pointwise_pairwise_consistency) and plots."""
    store = _store(cfg, run_dir)
    state = main_stages(cfg, store)
    items = stages.response_items(state["responses"])
    judged = each(t.judge_responses, [j.name for j in cfg.pointwise_judges()], cfg, store, items)
    return t.pointwise_report(cfg, store, judged, state["table"])


@flow(name="pointwise_probe", log_prints=True, task_runner=SEQUENTIAL)
def pointwise_probe(cfg: ExperimentConfig, run_dir: str | None = None) -> dict:
    """Li et al. 2025 / Xu et al. 2026: each pointwise rubric judge scores a sample of the responses
    again under each probe's baseline and variant; unchanged rate and score shift per probe."""
    store = _store(cfg, run_dir)
    state = main_stages(cfg, store)
    items = stages.probe_items(cfg, state["responses"])
    judged = each(t.pointwise_probe_judgments, stages.probe_judges(cfg), cfg, store, items)
    return t.pointwise_probe_report(cfg, store, judged)


# The parts with a subflow of their own; a probe declared to run on the main run's pairs
# (``judgebias.parts.PairwiseProbe``) runs in ``pairwise_probe``; a part with neither (the annotated
# table, the imported data) is written by a command of its own.
PART_FLOWS = {"style_rewrite": style_rewrite_ablation, "finetune": finetune_ablation,
              "pointwise": pointwise_judging, "pointwise_probes": pointwise_probe}


def runs_in_experiment(part: parts.Part) -> bool:
    """Whether ``experiment`` runs ``part`` after the main stages (when the config enables it)."""
    return part.name in PART_FLOWS or part.runs is not None


def run_part(part: parts.Part, cfg: ExperimentConfig, run_dir: str | None) -> dict:
    """``part``'s subflow on the config's task runner."""
    if part.name in PART_FLOWS:
        return configured(PART_FLOWS[part.name], cfg)(cfg, run_dir)
    return configured(pairwise_probe, cfg)(cfg, part.name, run_dir)


@flow(name="experiment", log_prints=True)
def experiment(config_path: str, overrides: dict | None = None, run_dir: str | None = None,
               cfg: ExperimentConfig | None = None) -> dict:
    """Run every configured stage of one experiment and track it in MLflow. ``cfg``: the config
    already parsed from ``config_path`` with ``overrides`` (``judgebias run`` validates it before
    Prefect starts and hands it down); a deployment passes only the path, parsed here."""
    started_at = time.time()
    new_experiment()
    cfg = cfg if cfg is not None else _load(config_path, overrides)
    store = _store(cfg, run_dir)
    try:
        configured(main_flow, cfg)(cfg, run_dir)
        for part in parts.PARTS.values():  # in the declaration's order, each part the config enables
            if runs_in_experiment(part) and part.enabled(cfg):
                run_part(part, cfg, run_dir)
    finally:
        release_resident_models()  # a `serve` process must not hold the models between runs
    tracking = t.log_to_mlflow(cfg, store, os.path.abspath(config_path), started_at)
    t.publish_summary(cfg, store, tracking)
    return {"run_folder": str(store.root), **tracking}
