"""Prefect tasks of a watched judge: the look (``judgebias.stages.watch``) and its MLflow run."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from judgebias.stages import watch as stage
from judgebias.tracking import watch_run


@task(name="watch-look", cache_policy=NO_CACHE)
def look(config_path: str) -> dict:
    return stage.look(config_path)


@task(name="watch-mlflow", cache_policy=NO_CACHE)
def log_look(record: dict) -> str:
    return watch_run.log_look(record)
