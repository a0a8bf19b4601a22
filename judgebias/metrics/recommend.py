"""Which judge or panel to rank a candidate set with, and how many human labels would settle its top
two: fixed rules on the audit figures (issue 31 item 3), never text from a model.

Every rater (each judge, and the PoLL-style panel of ``judgebias.metrics.leaderboard``) gets a profile
of the figures the rules read, each with where it comes from:

* relatedness to the candidates: the judge's self and family generators among the ranked models;
* agreement with humans: Cohen's kappa and the raw agreement with the human majority, and the gap to
  the human ceiling (``human_ceiling``: judge - one annotator against the others);
* position consistency (the same choice in both presentation orders);
* style sensitivity: the length term of the judge's ``style`` Bradley-Terry fit (Arena-Hard-Auto);
* Kendall's tau of the rater's ranking with the human ranking (``rank_agreement``);
* measured seconds (and cost, where given) per 1,000 judgments.

The rules, in order (``RULES`` holds their text, which the output repeats):

R1  a judge related (self or family) to a candidate is not used alone: its ranking carries its
    preference for its own (the ``related`` variant measures how much);
R2  a judge whose kappa with the human majority does not exceed chance (95% interval's lower end
    <= 0) is not used;
R3  a judge that keeps its choice in both orders on fewer than 90% of pairs (``trust.CONSISTENT``) is
    flagged: use its verdicts folded over both orders;
R4  a judge that prefers longer responses more than humans do (``verbosity_bias``'s 95% interval
    above 0) is flagged: read its ``style`` ranking; without human labels, its style-controlled
    length term excluding 0 flags it. It passes only where the interval lies inside the figure's
    margin of practical irrelevance (``judgebias.metrics.margins``: the registry's for the verbosity
    bias, ``LENGTH_TERM_MARGIN`` for the length term); otherwise the check is inconclusive;
ORDER the raters left are ordered by Kendall's tau with the human ranking (higher first; unknown
    last), then fewer flags, then fewer inconclusive checks, then the panel before a single judge
    (PoLL: a panel of judges from other families than the candidates'), then fewer measured seconds
    per 1,000 judgments, then name.

The panel is checked against the same rules as its members (R2-R4), on its pooled vote as one more
judge (``judgebias.reporting.recommendation.panel_audit``); R1 holds for it by construction (it leaves
out, per comparison, the judges related to either contestant).

The planner: the recommended rater's top-two gap (strength of rank 1 - rank 2) and its bootstrap
half-width at the current number of human labels give the per-label variance on the gap's scale,
s2 = n (h / 1.96)^2; ``survey.required_labels`` turns it into the labels a target half-width needs
(uniform sample of the table's comparisons, finite-population corrected). Without labels, the
rater's own comparisons stand in for them (the human-only estimator assumed as noisy per comparison
as the judge's verdicts; PPI with an agreeing judge needs fewer): the output says which was used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from judgebias.metrics.margins import Margin, equivalence_p
from judgebias.metrics.registry import FIGURES
from judgebias.metrics.survey import Z, required_labels

CONSISTENT = 0.9  # as judgebias.reporting.trust.CONSISTENT (a reading aid there, a flag here)
PANEL = "panel"
# The style fit's length coefficient is a Bradley-Terry log-odds per unit of the length covariate.
LENGTH_TERM_MARGIN = Margin(0.2, "+-0.2 log-odds moves P(win) of an even match by at most 5 points (0.2 x "
                            "0.25), the band of the pairwise preference figures", unit="comparisons")
VERBOSITY_MARGIN = FIGURES["verbosity_bias"].margin
# The margins R4 reads, by the key --margin takes on `judgebias leaderboard`.
MARGINS = {"verbosity_bias": VERBOSITY_MARGIN, "style_length_term": LENGTH_TERM_MARGIN}
def r4_text(margins: Mapping[str, Margin]) -> str:
    return ("a judge preferring longer responses more than humans do (verbosity bias's 95% interval above "
            "0; without human labels: its style-controlled length term's interval excluding 0) is flagged: "
            "read its style ranking; it passes only with the interval inside the margin (verbosity bias "
            f"+-{margins['verbosity_bias'].value:g}, length term +-{margins['style_length_term'].value:g}), "
            "else inconclusive")


RULES = {
    "R1": "a judge related (self or family) to a candidate is not used alone: its ranking carries its "
          "preference for its own",
    "R2": "a judge whose Cohen's kappa with the human majority does not exceed chance (95% interval's "
          "lower end <= 0) is not used",
    "R3": f"a judge keeping its choice in both orders on fewer than {CONSISTENT:.0%} of pairs is flagged: "
          "use its verdicts folded over both orders",
    "R4": r4_text(MARGINS),
    "ORDER": "raters left are ordered by Kendall's tau with the human ranking (higher first, unknown "
             "last), then fewer flags, then fewer inconclusive checks, then the panel before a single "
             "judge, then fewer measured seconds per 1,000 judgments, then name",
    "PANEL": "the panel is checked against R2-R4 on its pooled vote, as one more judge; R1 holds for it "
             "by construction",
}


def _est(e: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not e or e.get("value") is None:
        return None
    return {k: e.get(k) for k in ("value", "ci_low", "ci_high", "n") if e.get(k) is not None}


def profile(rater: str, *, related: Mapping[str, Sequence[str]] | None = None,
            audit: Mapping[str, Any] | None = None, length_term: Mapping[str, Any] | None = None,
            tau: Mapping[str, Any] | None = None, timing: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The figures the rules read for one rater, each copied with its interval (None where absent).
    ``audit``: the judge's ``analyze`` figures; ``related``: {"self": [...], "family": [...]} among
    the candidates; ``length_term``: its ``style`` fit's length coefficient; ``tau``: Kendall's tau of
    its ranking with the human one; ``timing``: {"seconds_per_1000", "usd_per_1000", "source"}."""
    audit = audit or {}
    ceiling = audit.get("human_ceiling") or {}
    return {
        "rater": rater,
        "kind": "panel" if rater == PANEL else "judge",
        "related": {k: sorted(v) for k, v in (related or {}).items() if v},
        "kappa_human": _est(audit.get("kappa_human")),
        "agreement_human": _est(audit.get("agreement_human")),
        "human_ceiling": _est(ceiling),
        "ceiling_gap": _est(ceiling.get("gap")),
        "position_consistency": _est(audit.get("position_consistency")),
        "verbosity_bias": _est(audit.get("verbosity_bias")),
        "style_length_term": _est(length_term),
        "kendall_tau_human": _est(tau),
        "timing": dict(timing) if timing else None,
    }


def with_margins(overrides: Mapping[str, float] | None = None) -> dict[str, Margin]:
    """R4's margins with the values ``--margin`` gave instead (ValueError for another key)."""
    from dataclasses import replace

    unknown = sorted(set(overrides or {}) - set(MARGINS))
    if unknown:
        raise ValueError(f"the recommendation reads no margin for {', '.join(unknown)}; one of "
                         + ", ".join(MARGINS))
    return {k: replace(m, value=float((overrides or {})[k])) if k in (overrides or {}) else m
            for k, m in MARGINS.items()}


def checks(p: Mapping[str, Any], margins: Mapping[str, Margin] | None = None) -> list[dict[str, Any]]:
    """Each rule's outcome for one profile: rule, outcome ("excluded", "flagged", "passed",
    "inconclusive", "not applicable"), and the figure it read. The panel's R1 holds by construction;
    R2-R4 read its pooled vote's figures like a judge's. ``margins``: R4's (``with_margins``)."""
    margins = margins or MARGINS
    out = []
    if p["kind"] == PANEL:
        out.append({"rule": "R1", "outcome": "passed",
                    "figure": "the panel leaves out, per comparison, the judges related to either "
                              "contestant"})
    else:
        rel = p["related"]
        out.append({"rule": "R1", "outcome": "excluded" if rel else "passed",
                    "figure": ("related to " + "; ".join(f"{k}: {', '.join(v)}" for k, v in rel.items()))
                    if rel else "related to no candidate"})
    k = p["kappa_human"]
    out.append({"rule": "R2", "figure": estimate_text("kappa with humans", k),
                "outcome": "not applicable" if k is None or k.get("ci_low") is None else
                "excluded" if k["ci_low"] <= 0 else "passed"})
    pc = p["position_consistency"]
    out.append({"rule": "R3", "figure": estimate_text("position consistency", pc),
                "outcome": "not applicable" if pc is None else
                "flagged" if pc["value"] < CONSISTENT else "passed"})
    vb, lt = p.get("verbosity_bias"), p["style_length_term"]
    if vb is not None and vb.get("ci_low") is not None:
        out.append({"rule": "R4", "figure": estimate_text("verbosity bias (judge - humans)", vb),
                    "outcome": "flagged" if vb["ci_low"] > 0 else _passed(vb, margins["verbosity_bias"])})
    else:
        out.append({"rule": "R4", "figure": estimate_text("style length term", lt),
                    "outcome": "not applicable" if lt is None or lt.get("ci_low") is None else
                    "flagged" if lt["ci_low"] > 0 or lt["ci_high"] < 0 else
                    _passed(lt, margins["style_length_term"])})
    return out


def _passed(e: Mapping[str, Any], margin: Margin) -> str:
    """"passed" only with the 95% interval inside ``margin`` (equivalence), else "inconclusive"."""
    return "passed" if equivalence_p(e, margin.value, null=margin.null) < 0.05 else "inconclusive"


def estimate_text(name: str, e: Mapping[str, Any] | None) -> str:
    if e is None:
        return f"{name}: not computed"
    ci = (f" [{e['ci_low']:.3f}, {e['ci_high']:.3f}]"
          if e.get("ci_low") is not None and e.get("ci_high") is not None else "")
    return f"{name} {e['value']:.3f}{ci}" + (f", n={e['n']}" if e.get("n") is not None else "")


def order_key(p: Mapping[str, Any], flags: int, unsettled: int = 0) -> tuple:
    """The ORDER rule as a sort key (smaller first)."""
    tau = (p["kendall_tau_human"] or {}).get("value")
    seconds = (p["timing"] or {}).get("seconds_per_1000")
    return (-tau if tau is not None else math.inf, flags, unsettled, 0 if p["kind"] == PANEL else 1,
            seconds if seconds is not None else math.inf, p["rater"])


def choose(profiles: Sequence[Mapping[str, Any]], margins: Mapping[str, Margin] | None = None
           ) -> dict[str, Any]:
    """Apply R1-R4 and ORDER: the recommended rater (None when every one is excluded), the order of
    the eligible ones and each rater's checks."""
    per, eligible = {}, []
    margins = margins or MARGINS
    for p in profiles:
        c = checks(p, margins)
        per[p["rater"]] = {"profile": dict(p), "checks": c,
                           "eligible": not any(x["outcome"] == "excluded" for x in c),
                           "flags": [x["rule"] for x in c if x["outcome"] == "flagged"],
                           "inconclusive": [x["rule"] for x in c if x["outcome"] == "inconclusive"]}
        if per[p["rater"]]["eligible"]:
            info = per[p["rater"]]
            eligible.append((order_key(p, len(info["flags"]), len(info["inconclusive"])), p["rater"]))
    ranked = [r for _, r in sorted(eligible)]
    best = ranked[0] if ranked else None
    read = None
    if best is not None:
        # A flagged panel's pooled vote has no style ranking of its own: its flag is said, not read.
        read = "panel" if per[best]["profile"]["kind"] == PANEL else \
            "style" if "R4" in per[best]["flags"] else "raw"
    return {"recommended": best, "read_variant": read, "order": ranked, "raters": per,
            "rules": {**RULES, "R4": r4_text(margins)}, "margins": {k: m.value for k, m in margins.items()}}


def top_two(strengths: np.ndarray, models: Sequence[str]) -> tuple[str, str]:
    """The rank-1 and rank-2 models (ties broken by name, as ``bradley_terry.ranking_records``)."""
    s = np.asarray(strengths, dtype=float)
    if s.size < 2:
        raise ValueError(f"top-two gap: needs two ranked models, got {s.size}")
    order = np.lexsort((np.array(models, dtype=object).astype(str), -s))
    return str(models[order[0]]), str(models[order[1]])


def gap(first: str, second: str, strengths: np.ndarray, boot: np.ndarray, models: Sequence[str]
        ) -> dict[str, Any]:
    """Strength of ``first`` minus ``second`` with the 95% percentile interval of their difference
    over the bootstrap and its half-width ((high - low) / 2)."""
    names = [str(m) for m in models]
    missing = [m for m in (first, second) if m not in names]
    if missing:
        raise ValueError(f"gap: model(s) {missing} not ranked here")
    i, j = names.index(first), names.index(second)
    b = np.asarray(boot, dtype=float)
    diff = b[:, i] - b[:, j]
    low, high = np.quantile(diff, [0.025, 0.975])
    s = np.asarray(strengths, dtype=float)
    return {"first": first, "second": second, "value": float(s[i] - s[j]),
            "ci_low": float(low), "ci_high": float(high), "half_width": float((high - low) / 2)}


def labels_for_gap(gap: Mapping[str, Any], n_now: int, population: int,
                   target_half_width: float | None = None) -> dict[str, Any]:
    """Labels (uniform sample of ``population`` comparisons) for a 95% half-width of
    ``target_half_width`` on the top-two gap (default: the gap itself, so the interval would just
    exclude 0 if the gap stays), from the gap's half-width at ``n_now`` comparisons."""
    if n_now < 1 or population < 1:
        raise ValueError(f"labels_for_gap: n_now and population must be >= 1, got {n_now}, {population}")
    hw = float(gap["half_width"])
    target = abs(float(gap["value"])) if target_half_width is None else float(target_half_width)
    if not np.isfinite(hw) or hw <= 0:
        raise ValueError(f"labels_for_gap: the gap's half-width is {hw!r}: no variance to plan from")
    if not np.isfinite(target) or target <= 0:
        raise ValueError("labels_for_gap: the target half-width must be > 0 (the top two are tied: give "
                         "--target-half-width)")
    s2 = n_now * (hw / Z) ** 2
    n = required_labels(s2, population, target)
    return {"target_half_width": target, "half_width_now": hw, "n_now": int(n_now),
            "population": int(population), "per_label_variance": s2, "labels_needed": int(n),
            "every_comparison": bool(n >= population)}
