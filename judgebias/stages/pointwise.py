"""Pointwise judges in an experiment: every generated response scored alone by each judge with
``mode: pointwise`` (the one judging engine, ``judgebias.engine.pointwise``, through the same
cached backends), then the pointwise figures (``judgebias.reporting.pointwise_analysis``) and their plots in
the judges' own folder (``RunLayout.pointwise``), and the run's page again with its pointwise section.
"""

from __future__ import annotations

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, document, frame, noop, open_model, stage_output
from judgebias.stages.results import refresh_report


def response_items(responses: dict[str, pd.DataFrame], references: dict[str, str] | None = None) -> list:
    """One ``ScoreItem`` per generated response without an error, ids ``<instruction>/<generator>``
    (two generators may write the same text; each keeps its own item). ``references``: item id ->
    the reference answer shown with it (the pointwise probes)."""
    from judgebias.engine.pointwise import ScoreItem

    items = []
    for generator, df in responses.items():
        for row in df.to_dict(orient="records"):
            if row.get("error") or not str(row.get("response") or "").strip():
                continue
            item_id = f"{row['instruction_id']}/{generator}"
            items.append(
                ScoreItem(
                    item_id=item_id,
                    prompt=str(row["instruction"]),
                    response=str(row["response"]),
                    generator=generator,
                    reference=(references or {}).get(item_id),
                )
            )
    return items


def judge_responses(
    cfg: ExperimentConfig,
    store: RunStore,
    judge: str,
    items: list,
    *,
    variant: RunLayout | None = None,
    template=None,
    progress: Progress = noop,
) -> pd.DataFrame:
    """``judge``'s pointwise rows for ``items`` (``judgebias.tables.pointwise``); ``template``: a
    ``PointwiseTemplate`` other than the judge's own (a probe's variant)."""
    from judgebias.backends.protocol import GenerationParams
    from judgebias.engine.pointwise import judge_responses as run_judge
    from judgebias.prompts.pointwise import pointwise_template

    variant = variant if variant is not None else RunLayout.pointwise(cfg)

    def compute(info: dict) -> pd.DataFrame:
        j = cfg.judge(judge)
        with open_model(cfg, j, name=judge) as backend:
            result = run_judge(
                items,
                backend,
                template if template is not None else pointwise_template(j.template),
                judge=judge,
                chat=True,
                params=GenerationParams(max_new_tokens=j.max_new_tokens or 512),
                chunk_size=j.batch_size * 4,
                progress=lambda done, total: progress(f"{judge}: {done}/{total} reads"),
            )
            df = result.table()
            info.update(
                rows=len(df), exclusions=result.exclusions.to_dict(), calls=backend.calls, hits=backend.hits
            )
        progress(
            f"{judge}: {len(df)} responses scored ({info['calls']} model calls, {info['hits']} cached; "
            f"{result.exclusions})"
        )
        return df

    return stage_output(store, frame(variant.judgments(judge)), variant.stage(f"judge_responses[{judge}]"),
                        compute)


def pointwise_report(
    cfg: ExperimentConfig,
    store: RunStore,
    judged: dict[str, pd.DataFrame],
    table: pd.DataFrame | None = None,
    *,
    progress: Progress = noop,
) -> dict:
    """The pointwise figures of every pointwise judge (``analyze_pointwise``), with
    ``pointwise_pairwise_consistency`` against the pairwise judge on the same model (``table``: the
    run's pairwise table), the score-distribution plots and the page rebuilt."""
    from judgebias.reporting import plots as plots
    from judgebias.reporting.plots_pointwise import pointwise_figures
    from judgebias.reporting.pointwise_analysis import analyze_pointwise
    from judgebias.tables.pointwise import validate_pointwise

    layout = RunLayout.pointwise(cfg)

    def compute(_: dict) -> dict:
        rows = pd.concat(list(judged.values()), ignore_index=True)
        # Rows the judge gave no score (off-format, failed read) are counted, not analysed.
        scored, exclusions = validate_pointwise(rows, source=layout.label, skip_invalid=True)
        twins = {j.name: cfg.pairwise_twin(j.name) for j in cfg.pointwise_judges()}
        result = analyze_pointwise(
            scored,
            self_map=cfg.own_generators(),
            pairwise=table,
            pairwise_judges={j: t for j, t in twins.items() if t},
        )
        result["exclusions"] = {
            **dict(exclusions.counts),
            **{f"{j}: {k}": v for j, df in judged.items() for k, v in _judge_errors(df).items()},
        }
        result["pairwise_twins"] = twins
        store.write_frame(layout.table, scored)
        plots.save_figures(pointwise_figures(scored, result["settings"]["judges"]), store.path(layout.plots))
        progress(f"pointwise figures for {len(result['judges'])} judge(s)")
        return result

    return stage_output(store, document(layout.metrics), layout.stage("pointwise_report"), compute,
                        then=lambda _: refresh_report(cfg, store))


def _judge_errors(df: pd.DataFrame) -> dict[str, int]:
    if "judge_error" not in df.columns:
        return {}
    return {str(k): int(v) for k, v in df["judge_error"].dropna().value_counts().items()}
