"""How a figure's clusters read on the console and the report card: the units it rests on, the
shared units they fall in and the design effect, compactly (``n 744 in 80 prompts, deff 1.62``),
and whether there are too few clusters for its interval (``stats.FEW_CLUSTERS``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from judgebias.stats import FEW_CLUSTERS


def unit_name(cluster_by: str, count: int) -> str:
    """'80 prompts', '1 prompt', '12 clusters of story_id'."""
    if cluster_by == "prompt":
        return f"{count} prompt" + ("" if count == 1 else "s")
    return f"{count} cluster" + ("" if count == 1 else "s") + f" of {cluster_by}"


def nested(est: Mapping[str, Any]) -> bool:
    """The figure's units share clusters (fewer clusters than units, clustering not turned off)."""
    g, by = est.get("clusters"), est.get("cluster_by")
    return g is not None and by not in (None, "none") and int(g) < int(est.get("n") or 0)


def cluster_text(est: Mapping[str, Any]) -> str:
    """'in 80 prompts, deff 1.62' for a figure whose units nest, with ', few clusters' below
    ``FEW_CLUSTERS``; '' where they do not (every unit its own cluster: nothing to add)."""
    if not nested(est):
        return ""
    g = int(est["clusters"])
    deff = est.get("design_effect")
    text = f"in {unit_name(est['cluster_by'], g)}"
    if g >= 2 and deff is not None:
        text += f", deff {deff:.2f}"
    if g < FEW_CLUSTERS:
        text += ", few clusters" if g >= 2 else ", treated as independent"
    return text


def n_text(est: Mapping[str, Any]) -> str:
    """The n cell of a figure: '744' or '744 in 80 prompts, deff 1.62'."""
    n = str(est.get("n", ""))
    extra = cluster_text(est)
    return f"{n} {extra}" if extra else n
