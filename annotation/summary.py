"""Plain-text summaries of the loop's figures: what ``annotate pull`` prints before any JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.display import terminal_safe


def _interval(est: Mapping[str, Any] | None) -> str:
    if not est or est.get("value") is None:
        reason = (est or {}).get("insufficient", "not estimable")
        return f"n/a ({reason[:70]})"
    ess = est.get("effective_sample_size")
    ess_txt = f", ESS {ess:.0f}" if isinstance(ess, (int, float)) and ess == ess else ""
    return f"{est['value']:+.3f} [{est['ci_low']:+.3f}, {est['ci_high']:+.3f}]{ess_txt}"


def _was(previous: Mapping[str, Any] | None, judge: str, *path: str) -> str:
    """`` (was +0.100)`` from the last pull's figure at ``path``, when it had a value."""
    est = (previous or {}).get(judge) or {}
    for key in path:
        est = (est.get(key) or {}) if isinstance(est, Mapping) else {}
    value = est.get("value") if isinstance(est, Mapping) else None
    return f"  (was {value:+.3f})" if isinstance(value, (int, float)) else ""


def figure_lines(figures: Mapping[str, Mapping[str, Any]],
                 previous: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """One block per judge: the design, then each figure as 'Hájek ... | PPI++ ...' with ESS, and
    its value at the previous pull when there was one."""
    lines: list[str] = []
    for judge, figs in figures.items():
        design = figs.get("design") or {}
        lines.append(f"{judge}:")
        if "note" in design:
            lines.append(f"  {design['note']}")
        else:
            lines.append(
                f"  design: {', '.join(design.get('designs', []))} over population "
                f"{design.get('population')!r} ({design.get('population_size')} pairs), "
                f"{design.get('batches')} batch(es), {design.get('labelled')} of {design.get('drawn')} drawn "
                f"pairs labelled; variance: {design.get('variance')}")
        for name, fig in (figs.get("estimates") or {}).items():
            lines.append(f"  {name:<22} Hájek {_interval(fig.get('design_based'))}"
                         f"{_was(previous, judge, 'estimates', name, 'design_based')}")
            lines.append(f"  {'':<22} PPI++ {_interval(fig.get('ppi'))}"
                         f"{_was(previous, judge, 'estimates', name, 'ppi')}")
        only = figs.get("labelled_only") or {}
        eo = only.get("eo") or {}
        if eo.get("value") is not None:
            lines.append(f"  labelled pairs only (not a population figure): EO {_interval(eo)}, "
                         f"n={eo.get('n')}{_was(previous, judge, 'labelled_only', 'eo')}")
    return lines


def ledger_line(st: Mapping[str, Any]) -> str:
    """Pairs pushed / labelled / pending (and the tasks they share), then the annotations."""
    shared = st.get("pushed", 0) - st.get("tasks", st.get("pushed", 0))
    tasks = f" on {st['tasks']} task(s) ({shared} share a twin's texts)" if shared else ""
    return (f"ledger: pairs pushed {st.get('pushed')}{tasks}, labelled {st.get('labelled')}, pending "
            f"{st.get('pending')}; labels {st.get('labels')} (both bad {st.get('both_bad', 0)}), "
            f"skipped {st.get('skipped')}")


def sync_lines(summary: Mapping[str, Any]) -> list[str]:
    """The head of ``annotate pull``: labels pulled, what is pending, then the figures."""
    out: list[str] = []
    pulled = summary.get("pulled")
    if pulled:
        out.append("pulled: " + ", ".join(f"{k} {v}" for k, v in pulled.items()))
    out.extend(not_counted_lines(summary.get("pull_exclusions") or {},
                                 summary.get("pull_exclusion_examples") or {}))
    st = summary.get("status") or {}
    if st:
        out.append(ledger_line(st))
    if summary.get("pushed"):
        out.append(f"pushed {summary['pushed']} new task(s)")
    if summary.get("stopped"):
        out.append(str(summary["stopped"]))
    out.extend(figure_lines(summary.get("figures") or {}, summary.get("previous_figures")))
    out.append(f"merged table: {summary.get('out')}")
    if summary.get("mlflow_run_id"):
        out.append(f"MLflow run: {summary['mlflow_run_id']}")
    return out


def not_counted_lines(counts: Mapping[str, int], examples: Mapping[str, list[str]]) -> list[str]:
    """What a pull read but did not count (an annotation whose value the labelling config does not
    offer: a rating of 11 on 1..10, "abc", several choices for one item), with up to five of them
    named by annotation id; nothing when every annotation was read."""
    lines = []
    for reason, n in sorted(counts.items()):
        if n:
            what = terminal_safe("; ".join(examples.get(reason) or []))[:600]
            lines.append(f"not counted: {n} annotation(s) ({reason.replace('_', ' ')})"
                         + (f": {what}" if what else ""))
    return lines


def batch_lines(sm: Mapping[str, Any], *, resumed: bool, unit: str = "pair") -> list[str]:
    """What ``annotate push`` says about a batch of pairs or (a pointwise table) items: the resumed
    remainder, or the design, the population, the count drawn and its inclusion probabilities, why a
    Poisson batch is not --budget units, and the units drawn per stratum."""
    if resumed:
        return [f"batch {sm['resumed_batch']} was drawn but not fully pushed: pushing its "
                f"{sm['to_push']} remaining {unit}(s), no new draw"]
    if "judges" in sm:  # the rating loop's population: the items every measured judge scored
        over = (f"{sm['population_size']} items scored by {', '.join(sm['judges'])} "
                f"({sm['left_to_draw']} not drawn before)")
        drew = f"{sm['drawn']} (expected {sm['expected']:.1f})"
    else:
        over = (f"population {sm['population']!r} ({sm['population_size']} pairs, {sm['left_to_draw']} "
                "not drawn before)")
        drew = f"{sm['drawn']}"
    lines = [f"batch {sm['batch']}: {sm['design']} design over {over}; drew {drew}; inclusion probability "
             f"{sm['pi_min']:.3f}-{sm['pi_max']:.3f}"]
    if sm["design"] == "poisson":
        total = sm["drawn"] + sm["redrawn"]
        line = (f"  the poisson design draws each {unit} on its own with its probability, so the batch size "
                f"is random: expected {sm['expected']:.1f} (--budget {sm['budget']}), drawn {total}")
        if sm["redrawn"]:
            line += f", of which {sm['redrawn']} drawn in an earlier batch (no new label needed)"
        lines.append(line)
    lines += [f"  {stratum:<28} {k}" for stratum, k in sorted(sm["per_stratum"].items())]
    return lines


def pushed_lines(result: Any, url: str, ledger_path: Any, *, tasks: str = "task") -> list[str]:
    """What ``annotate push`` says once a batch is on the server (``result``: a ``PushResult``)."""
    lines = [f"project {result.project_id} at {url}: {result.pushed} {tasks}(s) created, "
             f"{result.adopted_from_server} already on the server adopted; ledger {ledger_path}",
             f"open it: {url}/projects/{result.project_id}/data"]
    if result.shared:
        lines.append(f"{result.shared} pair(s) have the same texts as a pair already pushed: they share its "
                     "task (labelled once, counted for each pair)")
    return lines
