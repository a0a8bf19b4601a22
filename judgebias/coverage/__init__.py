"""Coverage benchmark of every interval the product prints (``judgebias coverage``).

``FAMILIES`` is the registry (``registry.Family``); ``runner.run`` simulates each family at each n
and summarises coverage, mean width, bias and the share of replications where the figure was
defined; ``report`` writes the CSV, the markdown tables and the plot."""

from judgebias.coverage import (
    families_choice,
    families_leaderboard,
    families_model,
    families_ratings,
    families_self,
    families_survey,
)
from judgebias.coverage.registry import Family, Figure

FAMILIES: tuple[Family, ...] = (*families_choice.FAMILIES, *families_self.FAMILIES,
                                *families_model.FAMILIES, *families_survey.FAMILIES,
                                *families_ratings.FAMILIES)
# Run only when named (-f): too slow for the default all-families run.
OPT_IN: tuple[Family, ...] = (*families_model.OPT_IN, *families_leaderboard.OPT_IN)
DEFAULT_NS: tuple[int, ...] = (10, 25, 50, 100, 200, 400, 1000)
TARGET = 0.93


def family(name: str) -> Family:
    """The registered family called ``name``; ValueError naming the known ones otherwise."""
    for f in (*FAMILIES, *OPT_IN):
        if f.name == name:
            return f
    raise ValueError(f"unknown figure family {name!r} (known: {[f.name for f in (*FAMILIES, *OPT_IN)]})")


__all__ = ["DEFAULT_NS", "FAMILIES", "OPT_IN", "TARGET", "Family", "Figure", "family"]
