"""The console's account of an experiment: one line per stage, ran (with its time and its last
progress message) or reused from the run folder.

Prefect's own lines (a task's "Finished in state Completed()", a flow's start and end) are kept off
the console by ``judgebias.flows.runtime.environment`` and still reach the Prefect UI; these lines go to the
logger ``judgebias.run``, which ``judgebias run|demo`` prints on stdout. The ablations and probes read the
main stages back before their own: a stage already reported in this experiment is not reported again
as reused, so a cold demo does not list the main stages five times.
"""

from __future__ import annotations

import logging
import threading

from judgebias.parts import part_of

LOGGER = logging.getLogger("judgebias.run")

_lock = threading.Lock()
_reported: set[str] = set()

def new_experiment() -> None:
    """Forget what was reported: a ``serve`` process runs the experiment again every week."""
    with _lock:
        _reported.clear()


def variant_words(label: str) -> str:
    """"style-3f2a/attractive" -> "style ablation, attractive"; "" for the main run."""
    if not label:
        return ""
    part = part_of(label)
    head, _, rest = label.partition("/")
    if part is not None and part.sep == "/":  # "imported/name": the name is the folder's key
        head, _, rest = rest.partition("/")
        head = f"{part.words}, {head}"
    elif part is not None:
        head = part.words
    return f"{head}, {rest}" if rest else head


def stage_line(outcome: str, name: str, variant_label: str, seconds: float, said: str) -> str:
    where = variant_words(variant_label)
    title = f"{name} ({where})" if where else name
    if outcome == "reused":
        return f"reused  {title:<46}  from the run folder"
    return f"ran     {title:<46}  {seconds:5.1f} s" + (f"  {said}" if said else "")


def report_stage(outcome: str, name: str, variant, seconds: float, said: str) -> None:
    """Log a stage's line once per experiment for a reuse, every time for a run (``variant``: the
    stage's ``RunLayout`` or None for the main run)."""
    label = variant.label if variant is not None else ""
    key = f"{label}/{name}"
    with _lock:
        if outcome == "reused" and key in _reported:
            return
        _reported.add(key)
    LOGGER.info(stage_line(outcome, name, label, seconds, said))
