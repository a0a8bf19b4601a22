"""Pointwise probes as stages: each pointwise judge with a rubric template scores a seeded sample
of the generated responses under each probe's baseline and variant
(``judgebias.prompts.pointwise_variants``), through the same engine and call cache as every
judgment (the template version is in each call's content key); the unchanged rate and the score
shift per judge and probe (``judgebias.metrics.pointwise_probes``) go to ``probe.json`` in the
probes' own folder (``RunLayout.pointwise_probes``).

A baseline shared by several probes (the judge's own template) is one judging stage, scored once.
"""

from __future__ import annotations

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout, slug
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, noop
from judgebias.stages.pointwise import judge_responses, response_items
from judgebias.stages.probes import any_value, probe_document, probe_report


def probe_judges(cfg: ExperimentConfig) -> list[str]:
    """The pointwise judges the probes apply to: those whose template shows a score rubric."""
    from judgebias.prompts.pointwise import POINTWISE_TEMPLATES

    return [j.name for j in cfg.pointwise_judges() if POINTWISE_TEMPLATES[j.template].has_rubric]


def probe_items(cfg: ExperimentConfig, responses: dict[str, pd.DataFrame]) -> list:
    """A seeded sample of the responses, each with a reference answer where one exists: the next
    generator's response to the same instruction (``reference_score`` shows it)."""
    import random

    gens = sorted(responses)
    plain = response_items(responses)
    by_key = {it.item_id: it for it in plain}
    refs = {}
    for it in plain:
        instruction, generator = it.item_id.rsplit("/", 1)
        other = gens[(gens.index(generator) + 1) % len(gens)]
        if f"{instruction}/{other}" in by_key:
            refs[it.item_id] = by_key[f"{instruction}/{other}"].response
    items = response_items(responses, refs)
    conf = cfg.probes.pointwise
    if conf.sample is not None and conf.sample < len(items):
        keep = set(random.Random(conf.seed).sample(range(len(items)), conf.sample))
        items = [it for i, it in enumerate(items) if i in keep]
    return items


def probe_plan(cfg: ExperimentConfig, judge: str) -> dict[str, tuple[str, str]]:
    """Probe tag -> (baseline folder, variant folder) under the probes' folder, for ``judge``."""
    return {tag: (slug(b.version), slug(v.version)) for tag, (b, v) in _templates(cfg, judge).items()}


def _templates(cfg: ExperimentConfig, judge: str) -> dict:
    from judgebias.prompts.pointwise import pointwise_template
    from judgebias.prompts.pointwise_variants import pointwise_probe

    base = pointwise_template(cfg.judge(judge).template)
    return {
        pointwise_probe(name).tag: pointwise_probe(name).templates(base)
        for name in cfg.probes.pointwise.names
    }


def pointwise_probe_judgments(
    cfg: ExperimentConfig, store: RunStore, judge: str, items: list, *, progress: Progress = noop
) -> dict[str, pd.DataFrame]:
    """``judge``'s scores of ``items`` under every baseline and variant of the configured probes,
    by folder (one judging stage per distinct template)."""
    root = RunLayout.pointwise_probes(cfg).prefix
    out: dict[str, pd.DataFrame] = {}
    for pair in _templates(cfg, judge).values():
        for template in pair:
            folder = slug(template.version)
            if folder in out:
                continue
            usable = [it for it in items if it.reference or not template.needs_reference]
            out[folder] = judge_responses(
                cfg,
                store,
                judge,
                usable,
                variant=RunLayout(f"{root}{folder}/"),
                template=template,
                progress=progress,
            )
    return out


def pointwise_probe_report(
    cfg: ExperimentConfig,
    store: RunStore,
    judged: dict[str, dict[str, pd.DataFrame]],
    *,
    progress: Progress = noop,
) -> dict:
    """Unchanged rate and score shift per judge and probe; ``judged[judge]``: what
    ``pointwise_probe_judgments`` returned for it."""
    from judgebias.metrics.pointwise_probes import probe_scores, score_shift, unchanged_rate
    from judgebias.prompts.pointwise_variants import pointwise_probe
    from judgebias.reporting import plots as plots
    from judgebias.reporting import plots_probes as plots_probes

    layout = RunLayout.pointwise_probes(cfg)

    def compute(_: dict) -> dict:
        described = {p.tag: {"description": p.description, "source": p.source}
                     for p in map(pointwise_probe, cfg.probes.pointwise.names)}
        tables = {
            judge: {
                tag: probe_scores(frames[before], frames[after], judge=judge, probe=tag,
                                  to_base=pointwise_probe(tag.split("@")[0]).to_base)
                for tag, (before, after) in probe_plan(cfg, judge).items()
            }
            for judge, frames in judged.items()
        }
        named = (("unchanged_rate", unchanged_rate), ("score_shift", score_shift))
        out = probe_document("probes", described, tables, named)
        if any_value(out, "score_shift"):
            figure = plots_probes.pointwise_probe_shifts(out)
            plots.save_figure(figure, store.path(layout.plot("pointwise_probes")))
        progress(f"pointwise probes: {len(out['probes'])} x {len(out['judges'])} judge(s)")
        return out

    return probe_report(cfg, store, layout, "pointwise_probe_report", compute)
