"""Human-readable summaries of a finished experiment: the Prefect markdown artifact and the short
console report of ``judgebias demo``. Both read the run folder only (what was computed), never
recompute anything."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from judgebias.config.experiment import ExperimentConfig
from judgebias.display import markdown_safe
from judgebias.metrics.registry import FIGURES
from judgebias.parts import part_of, probes
from judgebias.reporting.trust import family_note, fmt, fmt_ci, mutual_gold, statements
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore

# (key, label) of the demo's headline figures; whether each carries a sign is the registry's.
HEADLINE = (
    ("dbg", "DBG score (judge - gold win rate on own responses)"),
    ("self_preference_score", "self-preference score (mean score own - other = 2 P(own) - 1)"),
    ("position_bias", "position bias (P(first shown wins); 0.5 = none)"),
    ("position_consistency", "position consistency (same choice in both orders)"),
    ("perplexity_familiarity", "mean log-perplexity own - other responses"),
    ("perplexity_own_other", "odds ratio of winning, own vs other, at equal perplexity"),
)
WEAK_JUDGES_NOTE = (
    "Honest caveat: 135M-270M models are weak judges (strongly position-biased, near-chance "
    "agreement); these figures show the pipeline working end to end, not findings about "
    "LLM judges. Use 7B+ judges (GPU config or API judges) for conclusions."
)


MUTUAL_GOLD_NOTE = (
    "Note: with two judges that are each other's gold panel, their DBG scores are equal by "
    "construction (A's win rate on A's responses minus B's equals B's on B's minus A's, ties "
    "aside). A third gold judge or human labels (gold.human_as_gold) separate them."
)


def page_notes(cfg: ExperimentConfig, metrics: dict) -> list[str]:
    """The caveats the run's page opens with: what the config says about its judges."""
    return [note for note, applies in ((WEAK_JUDGES_NOTE, _small_models(cfg)),
                                       (MUTUAL_GOLD_NOTE, mutual_gold(metrics))) if applies]


def mlflow_command() -> str:
    """The ``mlflow`` executable of this environment, as a command that works when pasted: the
    quick start installs into ``.venv`` without activating it, so a bare ``mlflow`` is not on PATH."""
    beside = Path(sys.executable).parent / "mlflow"
    return shlex.quote(str(beside)) if beside.exists() else "mlflow"


def plan(cfg: ExperimentConfig) -> str:
    """What the run will do, printed before it starts (the first minute of a cold run is spent
    converting models, and a newcomer should know what the wait is for)."""
    n = cfg.dataset.sample or "all"
    gens, judges = [g.name for g in cfg.generators], [j.name for j in cfg.pairwise_judges()]
    lines = [f"plan: {len(gens)} generators ({', '.join(gens)}) answer {n} instructions; "
             f"{len(judges)} judges ({', '.join(judges)}) judge every pair in both orders"]
    for j in cfg.pointwise_judges():
        lines.append(f"      pointwise judge {j.name}: scores every response alone ({j.template})")
    an = cfg.analyses
    extra = [k for k, on in (("perplexity", an.perplexity), ("attention", an.attention)) if on]
    if extra:
        lines.append(f"      then {' and '.join(extra)} per judge, gold panels and metrics")
    sr, ft = cfg.ablations.style_rewrite, cfg.ablations.finetune
    pt, rec = cfg.probes.perturbations, cfg.probes.self_recognition
    pw = cfg.probes.pointwise
    optional = (  # (a stage that may be off, what it does when on)
        (sr, f"style-rewrite ablation: {', '.join(sr.styles)} on {sr.sample or 'all'} instructions"),
        (ft, f"fine-tune ablation: LoRA {ft.steps} steps on {', '.join(cfg.finetune_generators)}, "
             f"{ft.sample or 'all'} instructions"),
        (pt, f"perturbation probe (CALM): {len(pt.names)} perturbations of {pt.sample or 'all'} pairs, "
             "judged again in both orders"),
        (pw, f"pointwise probes: {', '.join(pw.names)} on {pw.sample or 'all'} responses, each pointwise "
             "judge scoring again"),
        (rec, f"self-recognition probe: each judge asked which answer it wrote, {rec.sample or 'all'} "
              "pairs per judge"),
    )
    lines += [f"      {does}" for stage, does in optional if stage.enabled]
    lines.append("      every stage is saved as it finishes: an interrupted run resumes where it stopped")
    return "\n".join(lines)


def fmt_estimate(e: dict | None, signed: bool = True) -> str:
    if not e or e.get("value") is None:
        reason = (e or {}).get("skipped")
        return f"n/a ({reason})" if reason else "n/a"
    f = "+.3f" if signed else ".3f"
    lo, hi = e.get("ci_low"), e.get("ci_high")
    ci = f" [{lo:{f}}, {hi:{f}}]" if lo is not None and hi is not None else ""
    n = f" n={e['n']}" if e.get("n") is not None else ""
    return f"{e['value']:{f}}{ci}{n}"


def headline_rows(metrics: dict) -> list[tuple[str, str, str]]:
    """(judge, metric label, formatted estimate) for the headline metrics present."""
    rows = []
    for judge, per in sorted(metrics.get("judges", {}).items()):
        for key, label in HEADLINE:
            if key in per:
                rows.append((judge, label, fmt_estimate(per[key], FIGURES[key].signed)))
            elif key in per.get("skipped", {}):
                rows.append((judge, label, f"n/a ({per['skipped'][key]})"))
    return rows


def headline_table(rows: list[tuple[str, str, str]]) -> list[str]:
    """The headline figures as markdown table lines (a run description's first lines)."""
    return ["| judge | metric | estimate [95% CI] |", "|---|---|---|",
            *(f"| {markdown_safe(j)} | {label} | {est} |" for j, label, est in rows)]


def _comparisons(store: RunStore, cfg: ExperimentConfig) -> dict[str, dict]:
    out = {}
    style, ft = RunLayout.style(cfg).comparison, RunLayout.finetune(cfg).comparison
    if cfg.ablations.style_rewrite.enabled and store.has(style):
        out["style rewrite"] = store.read_json(style)
    if cfg.ablations.finetune.enabled and store.has(ft):
        out["fine-tune"] = store.read_json(ft)
    return out


def ordered(row: dict) -> list[tuple[str, dict]]:
    """Conditions of a before/after row, "before" first (JSON files store keys sorted)."""
    return sorted(row.items(), key=lambda kv: (kv[0] != "before", kv[0]))


def comparison_line(row: dict) -> str:
    items = ordered(row)
    reasons = {e.get("skipped") for _, e in items if e.get("value") is None}
    if all(e.get("value") is None for _, e in items) and len(reasons) == 1:
        return f"n/a ({reasons.pop()})"
    return ", ".join(f"{cond} {fmt_estimate(e)}" for cond, e in items)


def summary_markdown(cfg: ExperimentConfig, store: RunStore, tracking: dict[str, Any]) -> str:
    metrics = store.read_json(RunLayout().metrics) if store.has(RunLayout().metrics) else {}
    ds = metrics.get("dataset", {})
    # The answer first: MLflow's run page shows the first lines of a description and folds the rest.
    lines = [
        f"# judgebias experiment `{cfg.name}`",
        "",
        *headline_table(headline_rows(metrics)),
        "",
        f"- {ds.get('pairs', '?')} pairs, judges: {', '.join(ds.get('judges', []))}; "
        f"generators: {', '.join(ds.get('generators', []))}",
        f"- MLflow run: `{tracking.get('run_id')}` (experiment `{cfg.tracking.experiment}`, "
        f"tracking URI `{tracking.get('tracking_uri')}`)",
        f"- run folder: `{store.root}` (config hash `{cfg.config_hash()}`)",
    ]
    for title, comp in _comparisons(store, cfg).items():
        lines += [
            "",
            f"## {title}: DBG before and after",
            "",
            "| judge | condition | DBG [95% CI] |",
            "|---|---|---|",
        ]
        for judge, row in comp["judges"].items():
            lines += [f"| {judge} | {cond} | {fmt_estimate(e)} |" for cond, e in ordered(row)]
    for note, applies in ((MUTUAL_GOLD_NOTE, mutual_gold(metrics)), (WEAK_JUDGES_NOTE, _small_models(cfg))):
        if applies:
            lines += ["", note]
    return "\n".join(lines).rstrip() + "\n"


def _small_models(cfg: ExperimentConfig) -> bool:
    small = ("smollm2-135m", "gemma-3-270m", "tiny", "random")
    return any(any(s in j.model.lower() for s in small) for j in cfg.judges)


def _stage_group(stage: str) -> str:
    """A stage's main group: its part's words (``judgebias.parts``), else its name."""
    part = part_of(stage)
    if part is not None:
        return part.words
    return stage.split("[")[0] if "/" not in stage else "other"


def stage_groups(seconds: dict[str, float]) -> dict[str, float]:
    """Stage seconds summed into main stages, style ablation and fine-tune ablation."""
    out: dict[str, float] = {}
    for stage, sec in seconds.items():
        group = _stage_group(stage)
        out[group] = out.get(group, 0.0) + sec
    return out


def console_report(
    cfg: ExperimentConfig, store: RunStore, result: dict, *, wall_s: float, peak_rss_gb: float
) -> str:
    metrics = store.read_json(RunLayout().metrics) if store.has(RunLayout().metrics) else {}
    uri = result.get("tracking_uri", "")
    lines = [
        "",
        "=" * 78,
        f"judgebias experiment {cfg.name!r} finished in {wall_s:.0f} s "
        f"(peak memory {peak_rss_gb:.2f} GB RSS)",
        "=" * 78,
        f"run folder : {store.root}",
        f"MLflow run : {result.get('run_id')}  experiment {cfg.tracking.experiment!r}  ({uri})",
    ]
    if uri.startswith("sqlite:"):
        lines.append(f"open the UI: {mlflow_command()} ui --backend-store-uri {shlex.quote(uri)}   "
                     "(then http://127.0.0.1:5000)")
    if result.get("run_url"):
        lines.append(f"run page   : {result['run_url']}")
    lines += ["", "headline figures (95% intervals):"]
    width = max((len(j) for j, _, _ in headline_rows(metrics)), default=5)
    for judge, label, est in headline_rows(metrics):
        lines.append(f"  {judge:<{width}}  {label:<52} {est}")
    fidelity = [store.read_json(RunLayout.fidelity(j.name)) for j in cfg.judges
                if store.has(RunLayout.fidelity(j.name))]
    if fidelity:
        lines.append("\nwhat the reduced precision costs (float32 re-score of a few pairs, both orders):")
        for f in fidelity:
            lines.append(f"  {f['judge']}: {f['dtype']} vs float32 on {f['judgments']} judgments: "
                         f"max |dP(A)| {f['max_abs_dp_a']:.3f}, mean {f['mean_abs_dp_a']:.3f}, "
                         f"{f['verdicts_changed']} verdict(s) changed (--dtype float32 for the exact run)")
    for title, comp in _comparisons(store, cfg).items():
        lines.append(f"\n{title} ablation, DBG per judge:")
        for judge, row in comp["judges"].items():
            lines.append(f"  {judge}: {comparison_line(row)}")
        if comp.get("excluded_from_gold"):
            lines.append(
                f"  (rewriter {comp['rewriter']!r} left out of the gold panel: "
                f"{', '.join(comp['excluded_from_gold'])})"
            )
    probes = probe_results(cfg, store)
    lines += perturbation_lines(probes) + probe_lines(probes)
    groups = stage_groups(store.stage_seconds())
    if groups:
        lines.append(
            "\ncompute time of the stages when they ran (s): "
            + ", ".join(f"{k} {v:.0f}" for k, v in groups.items())
        )
    if mutual_gold(metrics):
        lines += ["", MUTUAL_GOLD_NOTE]
    if _small_models(cfg):
        lines += ["", WEAK_JUDGES_NOTE]
    return "\n".join(lines + report_card_lines(store, metrics, probes) + leaderboard_lines(store))


def perturbation_lines(probes: dict) -> list[str]:
    """The perturbation probe's figures as a table: one row per judge and perturbation."""
    pert = probes.get("perturbations") or {}
    rows = [(judge, tag, f.get("robustness_rate") or {}, f.get("shift") or {})
            for judge, figures in (pert.get("judges") or {}).items() for tag, f in figures.items()]
    if not rows:
        return []
    jw, tw = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    lines = ["\nperturbation probe (CALM; docs/probes.md), 95% intervals: verdicts unchanged, and the "
             "shift of P(perturbed side wins)"]
    for judge, tag, rate, shift in rows:
        kept = (f"{fmt(rate['value'], pct=True):>6} {fmt_ci(rate, False, pct=True):<17}"
                if rate.get("value") is not None else f"{'n/a':<24}")
        lines.append(f"  {judge:<{jw}}  {tag:<{tw}}  unchanged {kept} shift {fmt_estimate(shift)}")
    return lines


def probe_lines(results: dict) -> list[str]:
    """Each declared probe with a summary heading (``judgebias.parts``): its figures, one line per
    judge and figure, 95% intervals."""
    lines = []
    for part in probes():
        if not part.summary:
            continue
        result = results.get(part.name) or {}
        rows = [(judge, label, fmt_estimate(est, fig.signed)) for judge in (result.get("judges") or {})
                for _, fig, label, _, _, est in part.judge_figures(result, judge)]
        if rows:
            jw, lw = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
            lines += [f"\n{part.summary}", *(f"  {j:<{jw}}  {lab:<{lw}}  {e}" for j, lab, e in rows)]
    return lines


def probe_index(cfg: ExperimentConfig, store: RunStore) -> dict[str, str]:
    """Kind -> the run-folder path of the figures of each enabled probe that ran."""
    out = {}
    for part in probes():  # every declared probe (judgebias.parts)
        where = RunLayout.of(part.name, cfg).probe_result
        if part.enabled(cfg) and store.has(where):
            out[part.name] = where
    # The pointwise judges' figures ride along: the page's pointwise section reads them from here.
    pointwise = RunLayout.of("pointwise", cfg).metrics
    if cfg.pointwise_judges() and store.has(pointwise):
        out["pointwise"] = pointwise
    return out


def probe_results(cfg: ExperimentConfig, store: RunStore) -> dict[str, Any]:
    """The figures of the probes that ran (``judgebias.stages.probes``), by probe."""
    return {kind: store.read_json(path) for kind, path in probe_index(cfg, store).items()}


def indexed_probe_results(store: RunStore) -> dict[str, Any]:
    """The probes' figures the run's page was last built from (``RunLayout.probes_index``), for a
    reader without the config; {} for a run without probes or from before the index existed."""
    index = RunLayout().probes_index
    if not store.has(index):
        return {}
    return {kind: store.read_json(path) for kind, path in store.read_json(index).items()
            if store.has(path)}


def report_card_lines(store: RunStore, metrics: dict, probes: dict | None = None) -> list[str]:
    """The run's report card in brief (the statements of ``judgebias.reporting.trust``) and where its
    page is."""
    lines = ["", "report card (what each judge can be trusted for, derived from the figures above):"]
    for judge, m in (metrics.get("judges") or {}).items():
        said, fam = statements(m, probes or {}, judge, mutual_gold=mutual_gold(metrics))
        for kind, text in said:
            lines.append(f"  {judge} [{kind}] {text}")
        lines.append(f"  {judge}: {family_note(fam)}")
    lines += pointwise_card_lines(probes or {})
    page = store.path(RunLayout().report_html)
    if page.is_file():
        lines.append(f"report page: {page}  (judgebias report {store.root} rewrites it)")
    return lines


def pointwise_card_lines(probes: dict) -> list[str]:
    """The pointwise judges' statements (``judgebias.reporting.trust_pointwise``), one line each."""
    from judgebias.reporting.trust_pointwise import pointwise_statements

    figures = (probes.get("pointwise") or {}).get("judges") or {}
    pprobes = probes.get("pointwise_probes") or {}
    lines = []
    for judge in dict.fromkeys([*figures, *(pprobes.get("judges") or {})]):
        said, fam = pointwise_statements(figures.get(judge) or {}, pprobes, judge)
        lines += [f"  {judge} (pointwise) [{kind}] {text}" for kind, text in said]
        lines.append(f"  {judge} (pointwise): {family_note(fam)}")
    return lines


def imported_lines(store: RunStore, reports: list[tuple[Any, dict]],
                   runs: dict[str, str] | None = None) -> list[str]:
    """The report cards of the bundled real judgments in brief, marked as imported data."""
    lines = ["", "real judges on real data (bundled with judgebias, IMPORTED: not produced by this run):"]
    for entry, result in reports:
        lines.append(f"  {entry.title} ({entry.source}, {entry.licence}): {entry.who}")
        for judge, m in (result.get("judges") or {}).items():
            said, fam = statements(m, mutual_gold=mutual_gold(result))
            for kind, text in said:
                lines.append(f"    {judge} [{kind}] {text}")
            lines.append(f"    {judge}: {family_note(fam)}")
        page = store.path(RunLayout.imported(entry.name).report_html)
        run = (runs or {}).get(entry.name)
        lines.append(f"    page: {page}" + (f"  (MLflow run {run})" if run else ""))
    return lines


def leaderboard_lines(store: RunStore) -> list[str]:
    """The run's leaderboard in brief (its recommendation and planner, as the page's section says
    them), or nothing for a run without one (fewer than two generators)."""
    from judgebias.reporting.report_card_leaderboard import summary

    layout = RunLayout()
    if not store.has(layout.leaderboard):
        return []
    board = store.read_json(layout.leaderboard)
    return ["", "leaderboard of the generators (the report page ends with it):",
            *[f"  {line}" for line in summary(board)]]

