"""Helpers shared by the stages: timing, names, and opening (cached) backends.

Every stage has the same calling convention, ``stage(cfg, store, <subject>, <input>, *, variant=...,
progress=...)``, so the flows' tasks can wrap any of them alike; the signatures look the same to a
duplicate finder on purpose (a deliberate parallel). What they share beyond the signature lives
here: ``timed`` (the stage's time in the run store) and ``model_stage`` (timed, with its model's
cached backend open)."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from judgebias.config.experiment import ExperimentConfig
from judgebias.runstore import RunStore

log = logging.getLogger("judgebias.stages")

Progress = Callable[[str], None]


def noop(_: str) -> None:
    pass




@contextlib.contextmanager
def timed(store: RunStore, stage: str, **info: Any) -> Iterator[dict]:
    extra: dict[str, Any] = dict(info)
    start = time.perf_counter()
    yield extra
    store.record_stage(stage, time.perf_counter() - start, **extra)




def call_cache_dir(cfg: ExperimentConfig) -> str:
    """The run's model-call cache folder as an absolute path, so that workers in other processes
    open the same file."""
    from judgebias.backends.call_cache import default_cache_dir

    return str(Path(cfg.cache_dir or default_cache_dir()).expanduser().absolute())


def call_cache(cfg: ExperimentConfig):
    from judgebias.backends.call_cache import ResponseCache

    return ResponseCache(call_cache_dir(cfg))


@contextlib.contextmanager
def open_backend(ref, *, name: str, cache, loaded=None) -> Iterator[Any]:
    """A cached backend for a generator/judge/rewriter entry of the config. A local model's plain
    weights stay resident between stages (``resident_model``: the last two models loaded); a
    fine-tuned one (``loaded``) is released on exit."""
    from judgebias.backends.builder import build_backend, cached, resident_model

    gc.collect()  # the previous stage's fine-tuned model (and a peft wrapper's reference cycles) goes first
    spec = ref.to_spec(name=name)
    if loaded is None and spec.backend == "local" and not spec.factory:
        loaded = resident_model(spec)
    inner = build_backend(spec, loaded=loaded)
    try:
        yield cached(inner, spec, cache)
    finally:
        del inner
        gc.collect()


@contextlib.contextmanager
def model_stage(cfg: ExperimentConfig, store: RunStore, stage: str, ref, *, name: str,
                adapter: dict | None = None, loaded=None) -> Iterator[tuple[dict, Any]]:
    """The skeleton of every stage that runs a model: timed as ``stage`` in the run store (``info``
    joins the record), with ``ref``'s backend behind the run's call cache open for its duration:
    ``loaded`` when given, else with ``adapter`` merged in (its loading is timed), else resident."""
    with timed(store, stage) as info:
        if loaded is None:
            loaded = adapted_model(ref, adapter)
        with open_backend(ref, name=name, cache=call_cache(cfg), loaded=loaded) as backend:
            yield info, backend


def adapted_model(ref, adapter: dict | None):
    """A ``LoadedModel`` of ``ref``'s model with a LoRA adapter merged in, or None (plain model)."""
    if not adapter:
        return None
    from judgebias.ablations.finetune import merge_adapter
    from judgebias.backends.loading import LoadedModel, load_model

    base = load_model(ref.model, dtype=ref.dtype)
    merged = merge_adapter(base.model, adapter["adapter_dir"])
    identity = {**base.identity, "model": f"{base.name}+lora", "adapter_sha256": adapter["adapter_sha256"]}
    return LoadedModel(
        model=merged,
        tokenizer=base.tokenizer,
        name=f"{base.name}+lora",
        identity=identity,
        load_seconds=base.load_seconds,
    )


def estimate_entry(compute: Callable[[], Any]) -> dict:
    """A figure's JSON for a stage's output: the estimate's record, or why there was too little data
    for it (``skipped``), so a figure a probe could not compute is said, never dropped."""
    from judgebias.stats import InsufficientData

    try:
        return compute().to_dict()
    except InsufficientData as exc:
        return {"value": None, "skipped": str(exc)}
