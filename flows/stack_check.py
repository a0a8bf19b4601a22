"""A light flow that proves a deployment works end to end without loading a model.

Run on a worker it checks what every real flow needs there: the project imports, the data volume
is readable, and a judgment table validates. It returns the table's counts (rows, pairs, judges,
exclusions by reason), so a scheduled run of it is also a cheap data-health check.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from judgebias.tasks.stack_check import summarize_table


# persist_result: the summary is the point of a run, so callers of run_deployment can read it.
@flow(name="stack-check", log_prints=True, persist_result=True)
def stack_check(table: str) -> dict:
    """Validate the judgment table at ``table`` on whatever machine runs this flow."""
    summary = summarize_table(table)
    get_run_logger().info("table %s: %d rows, %d pairs, judges %s, exclusions %s", table,
                          summary["rows"], summary["pairs"], summary["judges"], summary["exclusions"])
    return summary
