"""Active probes as stages: CALM perturbations and self-recognition (``judgebias.probes``).

Both reuse the judging stage (same engine, same cache; the perturbed text and the template are in
every call's content key), write under their own hashed folder and read the main run's judgments
as the "before".
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, estimate_entry, frame, noop, stage_output
from judgebias.stages.data import subset
from judgebias.stages.results import refresh_report

RECOGNITION_TEMPLATE = "self-recognition"  # judgebias.prompts.recognition


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


def perturbed_pairs(cfg: ExperimentConfig, store: RunStore, pairs: pd.DataFrame) -> pd.DataFrame:
    """The main run's pairs (a seeded sample), once per configured perturbation with one side
    perturbed, in one frame: the judges see every perturbation in one judging call, so the engine
    batches across them (one call per perturbation made small batches of a few pairs each)."""
    from judgebias.probes.perturbations import perturb_pairs, perturbation

    conf = cfg.probes.perturbations

    def compute(_: dict) -> pd.DataFrame:
        sample = _pairs_sample(pairs, conf.sample, conf.seed)
        return pd.concat([perturb_pairs(sample, perturbation(name), seed=conf.seed) for name in conf.names],
                         ignore_index=True)

    return stage_output(store, frame(RunLayout.perturbation(cfg).pairs), None, compute)  # cheap: not timed


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


def perturbation_report(cfg: ExperimentConfig, store: RunStore, before: dict[str, pd.DataFrame],
                        after: dict[str, pd.DataFrame], perturbed: pd.DataFrame,
                        *, progress: Progress = noop) -> dict:
    """Robustness rate and shift per judge and perturbation (``metrics.robustness``), one plot of
    the shifts with every judge overlaid; ``after[judge]`` are the perturbed pairs' judgments."""
    from judgebias.metrics.robustness import perturbation_shift, robustness_rate
    from judgebias.probes.perturbations import perturbation
    from judgebias.reporting import plots as plots
    from judgebias.reporting import plots_probes as plots_probes

    layout = RunLayout.perturbation(cfg)

    def compute(_: dict) -> dict:
        described = {p.tag: {"bias": p.bias, "description": p.description}
                     for p in map(perturbation, cfg.probes.perturbations.names)}
        # One table per judge serves every perturbation (the rows say which).
        tables = {judge: dict.fromkeys(described, probe_table(rows, after[judge], perturbed, judge))
                  for judge, rows in before.items()}
        named = (("robustness_rate", robustness_rate), ("shift", perturbation_shift))
        out = probe_document("perturbations", described, tables, named)
        if any_value(out, "shift"):
            # One figure, the judges overlaid: they share the perturbations and the shift's scale.
            plots.save_figure(plots_probes.perturbation_shifts(out), store.path(layout.plot("perturbations")))
        progress(f"perturbations: {len(out['perturbations'])} x {len(out['judges'])} judge(s)")
        return out

    return probe_report(cfg, store, layout, "perturbation_report", compute)


def recognition_pairs(cfg: ExperimentConfig, pairs: pd.DataFrame, judge: str) -> pd.DataFrame:
    """The pairs holding exactly one of ``judge``'s own responses (a seeded sample)."""
    from judgebias.metrics.origin import own_sides

    own_a, own_b = own_sides(pairs, judge, cfg.own_generators())
    return _pairs_sample(pairs[own_a ^ own_b], cfg.probes.self_recognition.sample, 0)


def recognition_report(cfg: ExperimentConfig, store: RunStore, recognised: dict[str, pd.DataFrame],
                       judgments: dict[str, pd.DataFrame], *, progress: Progress = noop) -> dict:
    """Per judge: recognition accuracy and its correlation with self-preference on the same pairs."""
    from judgebias.metrics.recognition import recognition_preference, self_recognition

    self_map = cfg.own_generators()

    def compute(_: dict) -> dict:
        out: dict = {"judges": {}}
        for judge, rows in recognised.items():
            plan = (("self_recognition", partial(self_recognition, rows, judge, self_map)),
                    ("recognition_preference",
                     partial(recognition_preference, rows, judgments[judge], judge, self_map)))
            out["judges"][judge] = {key: estimate_entry(fn) for key, fn in plan}
        progress(f"self-recognition: {len(out['judges'])} judge(s)")
        return out

    return probe_report(cfg, store, RunLayout.recognition(cfg), "recognition_report", compute)
