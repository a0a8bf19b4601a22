"""What an annotator is shown of a pair and how the answer reads back: the blind pairwise task's
labelling config and payload (prompt and two responses in a seeded left/right order, never a
generator or judge name) and the parse of an exported annotation into a ledger label in the
pair's original A/B terms. Pure: no server (``judgebias.annotation.labelstudio`` talks to it)."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any

from judgebias.annotation.markup import markdown_html, with_style
from judgebias.annotation.store import Label, PushedTask

CHOICE_FIELD = "preference"
REASON_FIELD = "reason"
# Both the aliases (what the UI stores) and the displayed values are accepted. "Both bad" is a tie
# for every preference figure; the ledger keeps that it was one (``Label.both_bad``).
_SHOWN = {"left": "left", "right": "right", "tie": "tie", "response 1": "left", "response 2": "right",
          "both_bad": "tie", "both bad": "tie"}
_BOTH_BAD = {"both_bad", "both bad"}
INSTRUCTIONS = (
    "<p>Read the prompt, then both responses. Choose the response that answers the prompt better: "
    "correct, helpful, and following the instructions it was given.</p>"
    "<ul><li>Judge the content. Do not prefer a response for being longer, for its formatting, or "
    "for being shown first: the sides are shuffled.</li>"
    "<li>Choose <b>Tie</b> when both are acceptable and neither is better, <b>Both bad</b> when "
    "neither answers the prompt acceptably.</li>"
    "<li>Keys: <b>1</b> Response 1, <b>2</b> Response 2, <b>3</b> Tie, <b>4</b> Both bad; the reason "
    "is optional and is saved with your choice.</li>"
    "</ul><p>Your choices are used to measure how far an automatic judge can be trusted.</p>"
)


def labeling_config() -> str:
    return with_style(resources.files("judgebias.annotation").joinpath("labeling_config.xml")
                      .read_text(encoding="utf-8"))



def shown_to_original(shown: str, swapped: bool) -> str:
    """Map the annotator's choice (left / right / tie, as displayed) to original pair terms."""
    try:
        side = _SHOWN[shown.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown choice {shown!r} (expected one of {sorted(_SHOWN)})") from None
    if side == "tie":
        return "tie"
    first = "b" if swapped else "a"
    second = "a" if swapped else "b"
    return first if side == "left" else second


def task_data(row, swapped: bool) -> dict[str, str]:
    """The task payload: prompt, the two responses in shown order and the opaque pair key. Nothing else,
    so no generator or judge name can reach an annotator."""
    left, right = (row.response_b, row.response_a) if swapped else (row.response_a, row.response_b)
    # The raw texts stay (the shown order is read back from "left"); the config shows the *_html
    # renderings, markdown made readable and inert (judgebias.annotation.markup).
    return {"prompt": row.prompt, "left": left, "right": right, "pair_key": row.pair_key,
            **{f"{k}_html": markdown_html(v) for k, v in (("prompt", row.prompt), ("left", left),
                                                          ("right", right))}}


def canonical_time(value: Any) -> str:
    """ISO-8601 UTC with microseconds, so the ledger can compare edit times as strings."""
    ts = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat(timespec="microseconds")


def parse_annotation(ann: dict, task: PushedTask) -> Label:
    """One exported annotation -> a ledger label in original terms. Pure (tested on recorded payloads)."""
    who = ann.get("completed_by")
    if isinstance(who, dict):
        who = who.get("id", who.get("email"))
    label = reason = None
    both_bad = False
    for item in ann.get("result") or []:
        value = item.get("value") or {}
        if item.get("from_name") == CHOICE_FIELD and value.get("choices"):
            if len(value["choices"]) > 1:  # the config offers one choice per pair
                raise ValueError(f"several choices {value['choices']!r} for one pair (the config offers one)")
            label = shown_to_original(str(value["choices"][0]), task.swapped)
            both_bad = str(value["choices"][0]).strip().lower() in _BOTH_BAD
        elif item.get("from_name") == REASON_FIELD and value.get("text"):
            text = value["text"]
            reason = "\n".join(text) if isinstance(text, list) else str(text)
    skipped = bool(ann.get("was_cancelled")) or label is None
    return Label(
        annotation_id=int(ann["id"]),
        server_url=task.server_url,
        task_id=task.task_id,
        pair_key=task.pair_key,
        pair_id=task.pair_id,
        annotator=f"ls-user-{who}",
        label=None if skipped else label,
        skipped=skipped,
        reason=reason,
        updated_at=canonical_time(ann.get("updated_at") or ann.get("created_at")),
        both_bad=both_bad and not skipped,
    )
