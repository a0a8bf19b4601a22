"""The watched judge's drift decision (docs/watch.md): which look of a series this is, which earlier
look is its reference, and which figures changed at the level the look may spend.

Each look's differences come from ``run_compare.compare_judge`` (paired over the fixed audit set);
their p-values are adjusted across the figures by Holm and a figure changes where its adjusted
p-value is under the look's level: the increment of the declared alpha-spending function
(``multiplicity.look_alpha``). Over the ``looks`` declared, the chance of any false alarm is at most
``alpha`` (union bound over looks, Holm within one). Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judgebias.multiplicity import SPENDING_NAMES, holm, look_alpha


def position(index: int, looks: int) -> tuple[int, int]:
    """(series, look) of the history's entry ``index`` (0 is the reference run, not a look): a
    series is ``looks`` looks; the next series spends its own alpha."""
    if index < 1 or looks < 1:
        raise ValueError(f"entry {index} with {looks} looks: entry 0 is the reference, looks >= 1")
    return (index - 1) // looks, (index - 1) % looks + 1


def reference_index(index: int, reference: str, window: int = 1) -> int:
    """The history entry a look is compared with: the first run, or the one ``window`` looks back."""
    if index < 1:
        raise ValueError(f"entry {index} has no earlier run to compare with")
    if reference == "first":
        return 0
    if reference == "rolling":
        if window < 1:
            raise ValueError(f"rolling reference: window must be >= 1, got {window}")
        return max(0, index - window)
    raise ValueError(f"unknown reference {reference!r}; use first or rolling")


def decide(
    comparison: Mapping[str, Any], *, look: int, looks: int, alpha: float, spending: str
) -> dict[str, Any]:
    """The look's verdict over a ``compare_judge`` result: each figure with its Holm-adjusted p and
    ``changed``; ``changed`` lists the figures that moved at this look's level."""
    figures: Sequence[Mapping[str, Any]] = comparison.get("figures") or []
    level = look_alpha(look, looks, alpha, spending)
    adjusted = holm([f["difference"]["p_value"] for f in figures]) if figures else []
    out = []
    for f, p in zip(figures, adjusted, strict=True):
        out.append({**f, "p_adjusted": p, "changed": bool(p < level)})
    return {
        "look": look,
        "looks": looks,
        "alpha": alpha,
        "spending": spending,
        "method": SPENDING_NAMES[spending] + "; Holm across figures within a look",
        "level": level,
        "figures": out,
        "changed": [f["figure"] for f in out if f["changed"]],
        "pairing": comparison.get("pairing"),
        "not_compared": comparison.get("not_compared") or {},
    }


def changed_line(decision: Mapping[str, Any]) -> str:
    """One line for a flow state's message or a log: what changed, or that nothing did."""
    head = f"look {decision['look']}/{decision['looks']} (level {decision['level']:.4g})"
    if not decision["changed"]:
        return f"{head}: no figure changed"
    parts = []
    for f in decision["figures"]:
        if f["changed"]:
            d = f["difference"]
            parts.append(
                f"{f['figure']} {f['before']['value']:.3f} -> {f['after']['value']:.3f} "
                f"({d['value']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}], "
                f"adjusted p {f['p_adjusted']:.2g})"
            )
    return f"{head}: judge changed: " + "; ".join(parts)
