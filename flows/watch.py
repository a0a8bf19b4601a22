"""A watched judge's scheduled look (``judgebias watch CONFIG``; ``judgebias serve --watch CONFIG``):
judge the pinned audit set, compare with the reference, and end the flow run ``Failed`` with the
state name ``JudgeChanged`` and the changed figures in its message when the judge changed, so a
Prefect automation on that state can act (docs/watch.md)."""

from __future__ import annotations

from prefect import flow
from prefect.states import Failed

from judgebias.reporting.watch_drift import changed_line
from judgebias.tasks import watch as t

CHANGED_STATE = "JudgeChanged"


@flow(name="judgebias-watch", log_prints=True)
def watch_judge(config_path: str, mlflow: bool = True):
    record = t.look(config_path)
    run_id = t.log_look(record) if mlflow else None
    decision = record.get("decision")
    line = "reference look: later looks are compared with it" if decision is None else changed_line(decision)
    print(f"watch {record['watch']} look {record['index']}: {line}")
    summary = {"index": record["index"], "changed": (decision or {}).get("changed", []),
               "mlflow_run": run_id, "folder": record["folder"], "line": line}
    if decision and decision["changed"]:
        return Failed(name=CHANGED_STATE, message=f"watch {record['watch']}: {line}", data=summary)
    return summary
