"""Helpers shared by the stages: the stage skeleton, timing, names, and opening (cached) backends.

Every stage has the same calling convention, ``stage(cfg, store, <subject>, <input>, *, variant=...,
progress=...)``, so the flows' tasks can wrap any of them alike; the signatures look the same to a
duplicate finder on purpose (a deliberate parallel). What they share beyond the signature lives
here: ``stage_output`` (read back from the run folder, or computed, timed and written atomically),
with ``frame``/``document``/``judgment_table``/``frames`` saying where the output lives, and ``open_model``
(a model's backend behind the run's call cache)."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.store import RunStore

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


@dataclass(frozen=True)
class Output:
    """Where a stage's output lives in the run folder (``names``: all of them present means done)
    and how it is read back and written (through the run store, atomically)."""

    names: tuple[str, ...]
    read: Callable[[RunStore], Any]
    write: Callable[[RunStore, Any], Any]

    def present(self, store: RunStore) -> bool:
        return all(store.has(n) for n in self.names)


def frame(name: str) -> Output:
    """A data frame (Parquet)."""
    return Output((name,), lambda store: store.read_frame(name),
                  lambda store, df: store.write_frame(name, df))


def document(name: str) -> Output:
    """A JSON document."""
    return Output((name,), lambda store: store.read_json(name),
                  lambda store, doc: store.write_json(name, doc))


def judgment_table(name: str) -> Output:
    """A judgment table, validated when read back (``judgebias.tables.files``)."""
    from judgebias.tables.files import read_table, write_table

    return Output((name,), lambda store: read_table(store.path(name))[0],
                  lambda store, df: write_table(df, store.path(name)))


def frames(names: dict[str, str]) -> Output:
    """One data frame per key (``names``: key -> its file), done when every one is there."""

    def write(store: RunStore, by_key: dict) -> None:
        for key, name in names.items():
            store.write_frame(name, by_key[key])

    return Output(tuple(names.values()), lambda store: {k: store.read_frame(n) for k, n in names.items()},
                  write)


def stage_output(store: RunStore, output: Output, stage: str | None, compute: Callable[[dict], Any],
                 *, then: Callable[[Any], Any] | None = None) -> Any:
    """The skeleton of every stage: its ``output`` read back when the run folder holds it (the
    console's line says "reused", and nothing is computed); else ``compute(info)``, timed as
    ``stage`` in the run store's manifest (``info``: fields ``compute`` adds to that record;
    ``stage`` None: a cheap step that is not timed), its result written atomically as ``output``
    (the line says "ran"), then ``then(result)``, still timed: what reads the written output back
    (the run's page)."""
    if output.present(store):
        return output.read(store)
    with (timed(store, stage) if stage is not None else contextlib.nullcontext({})) as info:
        result = compute(info)
        output.write(store, result)
        if then is not None:
            then(result)
    return result


def call_cache_dir(cfg: ExperimentConfig) -> str:
    """The run's model-call cache folder as an absolute path, so that workers in other processes
    open the same file."""
    from judgebias.backends.call_cache import default_cache_dir

    return str(Path(cfg.cache_dir or default_cache_dir()).expanduser().absolute())


def call_cache(cfg: ExperimentConfig):
    from judgebias.backends.call_cache import ResponseCache

    return ResponseCache(call_cache_dir(cfg))


# Whether the last model opened was not a resident one (``open_backend``): the next open collects.
_non_resident_since_collection = False


@contextlib.contextmanager
def open_backend(ref, *, name: str, cache, loaded=None) -> Iterator[Any]:
    """A cached backend for a generator/judge/rewriter entry of the config. A local model's plain
    weights stay resident between stages (``resident_model``: the last two models loaded); a
    fine-tuned one (``loaded``) is released on exit.

    A full collection costs ~0.5 s in a process holding torch, Prefect and MLflow, and the stages
    open a model 5-10 times a run: it runs before a model is loaded (room for it), when a
    non-resident one is let go, and at the next open after one (a fine-tuned copy held in peft's
    reference cycles, which its caller still holds at this exit); never around resident weights."""
    from judgebias.backends.builder import build_backend, cached, is_resident, resident_model

    global _non_resident_since_collection
    spec = ref.to_spec(name=name)
    resident = loaded is None and spec.can("in_process")
    if not (resident and is_resident(spec)) or _non_resident_since_collection:
        gc.collect()
    if resident:
        loaded = resident_model(spec)
    # Capacity 0 (JUDGEBIAS_RESIDENT_MODELS) keeps nothing: that copy is non-resident too.
    apart = not (resident and is_resident(spec))
    _non_resident_since_collection = apart
    inner = build_backend(spec, loaded=loaded)
    try:
        yield cached(inner, spec, cache)
    finally:
        del inner, loaded
        if apart:
            gc.collect()


@contextlib.contextmanager
def open_model(cfg: ExperimentConfig, ref, *, name: str, adapter: dict | None = None,
               loaded=None) -> Iterator[Any]:
    """``ref``'s backend behind the run's call cache, open for the block: ``loaded`` when given,
    else with ``adapter`` merged in, else resident (``open_backend``)."""
    if loaded is None:
        loaded = adapted_model(ref, adapter)
    with open_backend(ref, name=name, cache=call_cache(cfg), loaded=loaded) as backend:
        yield backend


def on_route(cfg: ExperimentConfig, ref, *, name: str, adapter: dict | None, chunks,
             sharded: Callable[[Any], tuple[Any, Any]], local: Callable[[Any], Any]) -> tuple[Any, int, int]:
    """A model's work where it runs, with its (model calls, call-cache hits): spread over the flow's
    workers when there is a chunk route (``chunks``) and no adapter, by ``sharded(spec)`` -> (result,
    the chunks' summary), the spec naming the run's call cache so every worker shares it; else here,
    by ``local(backend)`` on ``open_model`` (a fine-tuned adapter is merged in this process only)."""
    if chunks is not None and not adapter:
        result, summary = sharded(ref.to_spec(call_cache_dir(cfg), name=name))
        return result, summary.calls, summary.hits
    with open_model(cfg, ref, name=name, adapter=adapter) as backend:
        return local(backend), backend.calls, backend.hits


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
