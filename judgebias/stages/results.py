"""The judgment table, the gold votes and the metrics of a run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, frame, judgment_table, noop, stage_output
from judgebias.tables.pairwise import validate


def assemble_table(
    cfg: ExperimentConfig,
    store: RunStore,
    judgments: dict[str, pd.DataFrame],
    perplexity: dict[str, pd.DataFrame] | None = None,
    *,
    variant: RunLayout = RunLayout(),
    progress: Progress = noop,
) -> pd.DataFrame:
    """All judges' rows in one validated judgment table (with each judge's perplexities)."""
    def compute(_: dict) -> pd.DataFrame:
        frames = []
        for judge, rows in judgments.items():
            rows = rows.drop(columns=[c for c in ("ppl_a", "ppl_b") if c in rows.columns])
            ppl = (perplexity or {}).get(judge)
            if ppl is not None and len(ppl):
                rows = rows.merge(ppl[["pair_id", "ppl_a", "ppl_b"]], on="pair_id", how="left")
            frames.append(rows)
        checked, _ = validate(pd.concat(frames, ignore_index=True), source=f"{store.root / variant.table}")
        progress(
            f"judgment table: {len(checked)} rows, {checked['pair_id'].nunique()} pairs, "
            f"{checked['judge'].nunique()} judges"
        )
        return checked

    return stage_output(store, judgment_table(variant.table), variant.stage("assemble_table"), compute)


def gold_for(cfg: ExperimentConfig, table: pd.DataFrame, exclude: tuple[str, ...] = ()) -> list[str] | None:
    """The gold panel ``analyze`` gets: None = every other judge; a list when configured or when
    judges must be left out (the rewriter in the style ablation)."""
    from judgebias.metrics.dbg import panel_rule

    configured = cfg.configured_gold()
    if configured is None and not exclude:
        return None
    present = set(table["judge"].dropna())
    judges = [j.name for j in cfg.pairwise_judges()]
    return [n for n in panel_rule(judges, None, configured, exclude) if n in present]


def aggregate_gold(
    cfg: ExperimentConfig,
    store: RunStore,
    table: pd.DataFrame,
    *,
    variant: RunLayout = RunLayout(),
    progress: Progress = noop,
) -> pd.DataFrame:
    """Gold vote per (pair, measured judge): the panel's mean P(A) without that judge, or the human
    majority with ``human_as_gold``; what the DBG scores are measured against. The main run's panel:
    no judge is left out of it (``compute_metrics``' ``exclude`` is the style ablation's)."""
    from judgebias.metrics.dbg import gold_votes
    from judgebias.metrics.frame import PAIR, prepare
    from judgebias.stats import InsufficientData

    def compute(_: dict) -> pd.DataFrame:
        prepared = prepare(table)
        codes = prepared.drop_duplicates(PAIR)[[PAIR, "pair_id"]].set_index(PAIR)["pair_id"]
        frames = []
        panel = gold_for(cfg, table)
        for judge in sorted(table["judge"].dropna().unique()):
            try:
                votes, counts, used = gold_votes(table, judge, panel, human_as_gold=cfg.gold.human_as_gold)
            except InsufficientData as exc:
                progress(f"gold for {judge}: none ({exc})")
                continue
            frames.append(
                pd.DataFrame(
                    {
                        "pair_id": codes.reindex(range(len(votes))).to_numpy(),
                        "judge": judge,
                        "gold_p_a": votes,
                        "gold_votes": counts,
                        "panel": ",".join(used),
                    }
                )
            )
        df = (
            pd.concat(frames, ignore_index=True)
            if frames
            else pd.DataFrame(columns=["pair_id", "judge", "gold_p_a", "gold_votes", "panel"])
        )
        progress(f"gold judgments for {df['judge'].nunique()} judge(s)")
        return df

    return stage_output(store, frame(variant.gold), None, compute)  # cheap: not timed


def compute_metrics(
    cfg: ExperimentConfig,
    store: RunStore,
    table: pd.DataFrame,
    *,
    variant: RunLayout = RunLayout(),
    exclude: tuple[str, ...] = (),
    progress: Progress = noop,
) -> dict:
    """Everything ``judgebias analyze`` computes on this table, plus its plots (PNG)."""
    from judgebias.reporting.analysis import analyze

    def compute(_: dict) -> dict:
        gold = gold_for(cfg, table, exclude)
        result = analyze(
            table,
            self_map=cfg.own_generators(),
            gold=gold if gold else None,
            human_as_gold=cfg.gold.human_as_gold,
            cluster_by=cfg.analyses.cluster_by,
        )
        _plots(result, store.path(variant.plots))
        progress(f"metrics for {len(result['judges'])} judge(s)")
        return result

    result = stage_output(store, document(variant.metrics), variant.stage("compute_metrics"), compute,
                          then=lambda result: _report(cfg, store, result, variant))
    if not store.has(variant.report_html):  # a run folder from before the report card existed
        _report(cfg, store, result, variant)
    return result


def _report(cfg: ExperimentConfig, store: RunStore, result: dict, layout: RunLayout) -> None:
    from judgebias.reporting.experiment_summary import page_notes
    from judgebias.reporting.report_card import write_report
    from judgebias.reporting.run_page import back_to_run, run_extras, write_page_header, write_page_notes

    what = f" ({layout.label})" if layout.label else ""
    title = f"Judge report card: {cfg.name}{what}"
    provenance = [f"experiment {cfg.name}, config hash {cfg.config_hash()}", f"run folder {store.root}",
                  "judges: " + ", ".join(j.name for j in cfg.pairwise_judges()),
                  "generators: " + ", ".join(g.name for g in cfg.generators)]
    if layout == RunLayout():  # the run's own page: its links, ablations, probes and caveats
        write_page_notes(store, page_notes(cfg, result))
        write_page_header(store, title, provenance)  # `judgebias report RUN` writes the page again
        extras = run_extras(store.root)
    else:  # an ablation's page leads back to the run's
        extras = back_to_run(store.root, store.path(layout.report_html))
    # The leaderboard stage runs after this page is first written and writes it again; a rerun that
    # only rewrites the page (probes, a missing page) keeps the section.
    board = store.read_json(layout.leaderboard) if store.has(layout.leaderboard) else None
    write_report(store.path(layout.report_html), result, title=title,
                 plot_dir=store.path(layout.plots), extras=extras, leaderboard=board,
                 leaderboard_plots=store.path(layout.leaderboard_plots), provenance=provenance)


def refresh_report(cfg: ExperimentConfig, store: RunStore) -> None:
    """The run's page again, with the probes' figures beside the main ones (the probes run after
    the metrics wrote it)."""
    from judgebias.reporting.experiment_summary import indexed_probe_results, probe_index

    layout = RunLayout()
    if store.has(layout.metrics):
        store.write_json(layout.probes_index, probe_index(cfg, store))
        probes = indexed_probe_results(store)  # what `judgebias report RUN_FOLDER` will show too
        _report(cfg, store, {**store.read_json(layout.metrics), "probes": probes}, layout)


def _plots(result: dict, folder: Path) -> list[Path]:
    from judgebias.reporting import plots as plots
    return plots.save_figures(plots.figures_for(result), folder)


def annotated_metrics(
    cfg: ExperimentConfig, store: RunStore, merged_table: str, *, progress: Progress = noop
) -> dict:
    """``analyze`` on the table with the human labels merged in; one folder per distinct merged table."""
    import hashlib

    from judgebias.tables.files import read_table

    digest = hashlib.sha256(Path(merged_table).read_bytes()).hexdigest()[:12]
    table, _ = read_table(merged_table)
    return compute_metrics(cfg, store, table, variant=RunLayout.annotated(digest), progress=progress)
