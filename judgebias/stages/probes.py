"""Active probes as stages: any probe ``judgebias.parts`` declares to run on the main run's pairs
(``PairwiseProbe``) through two generic stages, ``probe_pairs`` and ``probe_result``, and the
functions of the two built in, CALM perturbations and self-recognition (``judgebias.probes``).

Each reuses the judging stage (same engine, same cache; the perturbed text and the template are in
every call's content key), writes under its own hashed folder and reads the main run's judgments
as the "before".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.parts import PROBE_JUDGE, PairwiseProbe, Part, ProbeContext, declared, function
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, estimate_entry, frame, noop, stage_output
from judgebias.stages.data import subset
from judgebias.stages.results import refresh_report


def _pairs_sample(pairs: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    return subset(pairs.reset_index(drop=True), n, seed)


def probe_report(cfg: ExperimentConfig, store: RunStore, layout: RunLayout, stage: str,
                 compute: Callable[[dict], dict]) -> dict:
    """A probe's report stage (``stage`` under its ``layout``): the figures ``compute`` returns,
    written as the probe's result, and the run's page again with them beside the main figures."""
    return stage_output(store, document(layout.probe_result), layout.stage(stage), compute,
                        then=lambda _: refresh_report(cfg, store))


def probe_document(kind: str, described: dict[str, dict], tables: dict[str, dict[str, pd.DataFrame]],
                   named) -> dict:
    """A probe's result: what each of its tags is (``described``, under ``kind``) and per judge and
    tag each ``(key, fn)`` of ``named`` on (that judge's table of the tag, judge, tag), or why there
    was too little data for it."""
    judges = {judge: {tag: {key: estimate_entry(partial(fn, table, judge, tag)) for key, fn in named}
                      for tag, table in by_tag.items()}
              for judge, by_tag in tables.items()}
    return {"judges": judges, kind: described}


def any_value(out: dict, key: str) -> bool:
    """Whether any judge's figure ``key`` of any probe in ``out`` has a value (worth a plot)."""
    return any((f.get(key) or {}).get("value") is not None
               for figures in out["judges"].values() for f in figures.values())


def probe_table(before: pd.DataFrame, after: pd.DataFrame, perturbed: pd.DataFrame,
                judge: str) -> pd.DataFrame:
    """One row per pair: the judge's folded verdict and P(A) before and after the perturbation."""
    keep = ["pair_id", "verdict", "p_a", "prompt"]  # the prompt: the pairs' clusters (metrics.robustness)
    b = before[[c for c in keep if c in before.columns]].rename(
        columns={"pair_id": "source_pair_id", "verdict": "verdict_before", "p_a": "p_a_before"})
    a = after[[c for c in keep[:3] if c in after.columns]].rename(
        columns={"verdict": "verdict_after", "p_a": "p_a_after"})
    meta = perturbed[["pair_id", "source_pair_id", "perturbation", "perturbed_side"]]
    rows = meta.merge(a, on="pair_id", how="left").merge(b, on="source_pair_id", how="left")
    return rows.drop(columns="pair_id").rename(columns={"source_pair_id": "pair_id"}).assign(judge=judge)


def perturbation_pairs(pairs: pd.DataFrame, ctx: ProbeContext) -> pd.DataFrame:
    """The perturbations probe's pairs (``judgebias.parts``): the main run's pairs (a seeded sample),
    once per configured perturbation with one side perturbed, in one frame: the judges see every
    perturbation in one judging call, so the engine batches across them (one call per perturbation
    made small batches of a few pairs each)."""
    from judgebias.probes.perturbations import perturb_pairs, perturbation

    conf = ctx.section
    sample = _pairs_sample(pairs, conf.sample, conf.seed)
    return pd.concat([perturb_pairs(sample, perturbation(name), seed=conf.seed) for name in conf.names],
                     ignore_index=True)


def perturbation_report(before: dict[str, pd.DataFrame], after: dict[str, pd.DataFrame],
                        perturbed: pd.DataFrame, ctx: ProbeContext) -> dict:
    """Robustness rate and shift per judge and perturbation (``metrics.robustness``);
    ``after[judge]`` are the perturbed pairs' judgments."""
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate
    from judgebias.probes.perturbations import perturbation

    described = {p.tag: {"bias": p.bias, "description": p.description}
                 for p in map(perturbation, ctx.section.names)}
    # One table per judge serves every perturbation (the rows say which).
    tables = {judge: dict.fromkeys(described, probe_table(rows, after[judge], perturbed, judge))
              for judge, rows in before.items()}
    named = (("robustness_rate", robustness_rate), ("shift", perturbation_shift))
    return probe_document("perturbations", described, tables, named)


def perturbation_plot(result: dict):
    """The shifts with every judge overlaid (they share the perturbations and the shift's scale);
    None when no shift has a value."""
    from judgebias.reporting import plots_probes as plots_probes

    return plots_probes.perturbation_shifts(result) if any_value(result, "shift") else None


def recognition_pairs(pairs: pd.DataFrame, ctx: ProbeContext) -> pd.DataFrame:
    """Per judge, the pairs holding exactly one of its own responses (a seeded sample), the judge
    named in ``PROBE_JUDGE``."""
    from judgebias.metrics.origin import own_sides

    out = []
    for judge in ctx.judges:
        own_a, own_b = own_sides(pairs, judge, ctx.own)
        out.append(_pairs_sample(pairs[own_a ^ own_b], ctx.section.sample, 0).assign(**{PROBE_JUDGE: judge}))
    return pd.concat(out, ignore_index=True)


def recognition_report(before: dict[str, pd.DataFrame], after: dict[str, pd.DataFrame],
                       pairs: pd.DataFrame, ctx: ProbeContext) -> dict:
    """Per judge asked: recognition accuracy and its correlation with self-preference on the same
    pairs (``before``: its judgments of them in the main run)."""
    from judgebias.metrics.recognition import recognition_preference, self_recognition

    out: dict = {"judges": {}}
    for judge, rows in after.items():
        plan = (("self_recognition", partial(self_recognition, rows, judge, ctx.own)),
                ("recognition_preference",
                 partial(recognition_preference, rows, before[judge], judge, ctx.own)))
        out["judges"][judge] = {key: estimate_entry(fn) for key, fn in plan}
    return out


# --- any probe on the main run's pairs (``judgebias.parts.PairwiseProbe``): two generic stages ------
def _runs(probe: str) -> tuple[Part, PairwiseProbe]:
    part = declared(probe)
    if part.runs is None:
        raise ValueError(f"part {probe!r} does not run on the main run's pairs (no PairwiseProbe)")
    return part, part.runs


def probe_context(cfg: ExperimentConfig, part: Part) -> ProbeContext:
    """What ``part``'s functions get: its config section, the pairwise judges, their own generators."""
    return ProbeContext(part.name, part.section(cfg), tuple(j.name for j in cfg.pairwise_judges()),
                        cfg.own_generators())


def probe_pairs(cfg: ExperimentConfig, store: RunStore, probe: str, pairs: pd.DataFrame) -> pd.DataFrame:
    """The declared probe's pairs, derived from the main run's ``pairs`` by its ``pairs`` function,
    as its folder's ``pairs.parquet`` (cheap: not timed)."""
    part, runs = _runs(probe)
    derive = function(runs.pairs)
    return stage_output(store, frame(RunLayout.of(probe, cfg).pairs), None,
                        lambda _: derive(pairs, probe_context(cfg, part)))


def pairs_for(probe_pairs: pd.DataFrame, judge: str) -> pd.DataFrame:
    """The probe pairs ``judge`` is asked: all of them, or the rows naming it in ``PROBE_JUDGE``."""
    if PROBE_JUDGE not in probe_pairs.columns:
        return probe_pairs
    return probe_pairs[probe_pairs[PROBE_JUDGE] == judge].drop(columns=PROBE_JUDGE).reset_index(drop=True)


def probe_result(cfg: ExperimentConfig, store: RunStore, probe: str, before: dict[str, pd.DataFrame],
                 after: dict[str, pd.DataFrame], probe_pairs: pd.DataFrame,
                 *, progress: Progress = noop) -> dict:
    """The declared probe's ``probe.json`` from its ``result`` function (timed under that function's
    name), its ``plot`` saved beside it, and the run's page again with its figures."""
    part, runs = _runs(probe)
    compute_result = function(runs.result)
    layout = RunLayout.of(probe, cfg)

    def compute(_: dict) -> dict:
        out = compute_result(before, after, probe_pairs, probe_context(cfg, part))
        figure = function(runs.plot)(out) if runs.plot else None
        if figure is not None:
            from judgebias.reporting import plots as plots

            plots.save_figure(figure, store.path(layout.plot(probe)))
        progress(f"{part.words}: {len(out.get('judges') or {})} judge(s)")
        return out

    return probe_report(cfg, store, layout, compute_result.__name__, compute)
