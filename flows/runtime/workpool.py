"""Run the project's flows on Prefect workers: a ``process`` work pool and deployments into it.

``flow.serve`` runs scheduled flows inside the serving process. For runs on other machines (the
worker container of docker/compose.yaml, a GPU box), deployments go to a work pool and workers
poll it: ``prefect worker start --pool NAME`` on each machine that should execute runs.

A process worker runs a flow from source code it can see on its own filesystem. Deployments are
made with ``flow.from_source(source=<project dir>, entrypoint="flows/x.py:fn")``: Prefect records a
``set_working_directory`` pull step with that directory, so the project must sit at the same path
on the workers (true for the compose worker, which deploys from its own image at start). No image
is built or pushed.

    python -m judgebias.flows.runtime.workpool deploy --pool judgebias              # the default deployments
    python -m judgebias.flows.runtime.workpool deploy --pool judgebias \\
        --flow flows/stack_check.py:stack_check=nightly-check --cron "0 3 * * *" \\
        --param table=/data/tables/latest.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # flows/runtime/workpool.py -> the checkout
DEFAULT_POOL = "judgebias"


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: which flow (``path.py:function`` relative to the project root), under what
    name, on what schedule (``cron`` or none for manual/API-triggered runs), with what defaults."""

    entrypoint: str
    name: str
    cron: str | None = None
    timezone: str = "UTC"
    parameters: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    tags: tuple[str, ...] = ("judgebias",)

    def __post_init__(self) -> None:
        path, sep, function = self.entrypoint.partition(":")
        if not sep or not path.endswith(".py") or not function.isidentifier():
            raise ValueError(f"entrypoint {self.entrypoint!r} must look like 'flows/file.py:flow_function'")
        if not self.name.strip():
            raise ValueError(f"deployment of {self.entrypoint!r} needs a name")


# Deployed by `python -m judgebias.flows.runtime.workpool deploy` when no --flow is given. Other flows join by
# passing their own specs to ``deploy_flows`` (e.g. ``judgebias serve --work-pool``).
DEFAULT_DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec("flows/stack_check.py:stack_check", "stack-check",
                   description="Validate a judgment table on a worker (no model load)."),
    DeploymentSpec("flows/distributed_judging.py:distributed_judging", "distributed-judging",
                   description="Judge a table's pairs in chunks, on a thread pool or a Dask cluster."),
)


async def _ensure_pool(name: str, concurrency_limit: int | None) -> bool:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            pool = await client.read_work_pool(name)
        except ObjectNotFound:
            await client.create_work_pool(WorkPoolCreate(name=name, type="process",
                                                         concurrency_limit=concurrency_limit))
            return True
        if pool.type != "process":
            raise ValueError(f"work pool {name!r} exists with type {pool.type!r}; the judgebias flows "
                             "need a 'process' pool (pick another --pool name)")
        return False


def ensure_process_pool(name: str = DEFAULT_POOL, *, concurrency_limit: int | None = None) -> bool:
    """Create the ``process`` work pool ``name`` unless it exists. Returns whether it was created.

    Raises ValueError when a pool of that name exists with another worker type.
    """
    return asyncio.run(_ensure_pool(name, concurrency_limit))


def deploy_flows(specs: Sequence[DeploymentSpec], pool: str = DEFAULT_POOL, *,
                 source: str | Path = PROJECT_ROOT, create_pool: bool = True) -> dict[str, UUID]:
    """Deploy each spec's flow from ``source`` to the process pool ``pool``; returns
    ``{"flow-name/deployment-name": deployment id}``. Re-deploying updates in place."""
    from prefect import flow as prefect_flow
    from prefect.schedules import Cron

    source = Path(source).resolve()
    for spec in specs:
        file = source / spec.entrypoint.partition(":")[0]
        if not file.is_file():
            raise FileNotFoundError(
                f"{file} does not exist (entrypoint {spec.entrypoint!r}, source {source})")
    if create_pool:
        ensure_process_pool(pool)
    deployed: dict[str, UUID] = {}
    for spec in specs:
        loaded = prefect_flow.from_source(source=str(source), entrypoint=spec.entrypoint)
        schedules = [Cron(spec.cron, timezone=spec.timezone)] if spec.cron else None
        deployment_id = loaded.deploy(
            name=spec.name, work_pool_name=pool, schedules=schedules, parameters=dict(spec.parameters),
            description=spec.description, tags=list(spec.tags), build=False, push=False,
            print_next_steps=False, ignore_warnings=True)
        deployed[f"{loaded.name}/{spec.name}"] = deployment_id
    return deployed


def specs_from_runner_deployments(deployments: Sequence[Any], *, source: str | Path = PROJECT_ROOT,
                                  cwd: str | Path | None = None) -> list[DeploymentSpec]:
    """``DeploymentSpec``s for deployments made with ``flow.to_deployment`` (e.g.
    ``judgebias.flows.serve.build_deployments``), so the same list can be served or sent to a work
    pool.

    Entrypoints are made relative to ``source``; cron schedules are kept. Raises ValueError for a
    flow outside ``source`` or a schedule that is not a cron.
    """
    source, cwd = Path(source).resolve(), Path(cwd or Path.cwd())
    specs = []
    for d in deployments:
        path, _, function = d.entrypoint.rpartition(":")
        try:
            relative = (cwd / path).resolve().relative_to(source)
        except ValueError:
            raise ValueError(f"deployment {d.name!r}: flow file {path} is outside {source}") from None
        crons = [getattr(s.schedule, "cron", None) for s in (d.schedules or [])]
        if len(crons) > 1 or None in crons:
            raise ValueError(f"deployment {d.name!r}: only one cron schedule can go to a work pool here")
        timezone = getattr(d.schedules[0].schedule, "timezone", None) if crons else None
        specs.append(DeploymentSpec(f"{relative.as_posix()}:{function}", d.name,
                                    cron=crons[0] if crons else None, timezone=timezone or "UTC",
                                    parameters=dict(d.parameters or {}), description=d.description,
                                    tags=tuple(d.tags or ())))
    return specs


def deploy_runner_deployments(deployments: Sequence[Any], pool: str = DEFAULT_POOL, *,
                              source: str | Path = PROJECT_ROOT) -> dict[str, UUID]:
    """Send deployments built for ``prefect.serve`` to the process work pool ``pool`` instead
    (``judgebias serve --work-pool NAME``); their runs then execute on that pool's workers."""
    return deploy_flows(specs_from_runner_deployments(deployments, source=source), pool, source=source)


def _parse_flow(text: str) -> tuple[str, str | None]:
    entrypoint, _, name = text.partition("=")
    return entrypoint, name or None


def _parse_param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string such as a path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m judgebias.flows.runtime.workpool",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    dep = sub.add_parser("deploy", help="create the process work pool and deploy flows to it")
    dep.add_argument("--pool", default=DEFAULT_POOL, help="work pool name (created as type 'process')")
    dep.add_argument("--source", default=str(PROJECT_ROOT),
                     help="project directory as the WORKERS see it (default: this checkout)")
    dep.add_argument("--flow", action="append", type=_parse_flow, default=[], metavar="PATH.py:FUNC[=NAME]",
                     help="deploy this flow (repeatable); default: the project's standard deployments")
    dep.add_argument("--cron", help="schedule for the --flow deployments (e.g. '0 3 * * *')")
    dep.add_argument("--param", action="append", type=_parse_param, default=[], metavar="KEY=VALUE",
                     help="default parameter of the --flow deployments (VALUE parsed as JSON if it can be)")
    args = parser.parse_args(argv)

    if args.flow:
        specs = [DeploymentSpec(entrypoint, name or Path(entrypoint.partition(":")[0]).stem.replace("_", "-"),
                                cron=args.cron, parameters=dict(args.param))
                 for entrypoint, name in args.flow]
    else:
        if args.cron or args.param:
            parser.error("--cron and --param apply to --flow deployments only")
        specs = list(DEFAULT_DEPLOYMENTS)
    try:
        deployed = deploy_flows(specs, args.pool, source=args.source)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, deployment_id in deployed.items():
        print(f"deployed {name} ({deployment_id}) to work pool {args.pool!r}")
    print(f"start a worker with: prefect worker start --pool {args.pool} --type process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
