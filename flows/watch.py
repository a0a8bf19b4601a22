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


def alert_on_change(webhook_url: str, *, name: str = "judgebias-watch-changed") -> str:
    """A Prefect automation on the API in PREFECT_API_URL: whenever a watch flow run ends in
    ``JudgeChanged``, POST its name and message (the changed figures) as JSON to ``webhook_url``
    (a Slack/Teams incoming webhook or any HTTP receiver). Returns the automation's id. The webhook's
    URL is stored in a Prefect ``Webhook`` block (a secret), not in the automation."""
    from prefect.automations import Automation
    from prefect.blocks.webhook import Webhook
    from prefect.events.actions import CallWebhook
    from prefect.events.schemas.automations import EventTrigger, Posture

    block_id = Webhook(url=webhook_url).save(f"{name}-webhook", overwrite=True)
    payload = ('{"text": "judge changed: {{ flow_run.name }}", "flow_run": "{{ flow_run.id }}", '
               '"message": {{ flow_run.state.message | tojson }}}')
    automation = Automation(
        name=name,
        description="A watched judge's look found a change (judgebias, docs/watch.md).",
        trigger=EventTrigger(expect={f"prefect.flow-run.{CHANGED_STATE}"},
                             match={"prefect.resource.id": "prefect.flow-run.*"}, posture=Posture.Reactive,
                             threshold=1),
        actions=[CallWebhook(block_document_id=block_id, payload=payload)],
    ).create()
    return str(automation.id)
