"""One way to build a model backend: from a small, frozen, picklable spec.

Every command builds its backends here: ``judgebias judge`` from its options, the experiment's
stages from the config's generator/judge entries, a distributed worker from the spec it was sent.
A spec names the model, not a loaded one, so it can travel to another process or machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from judgebias.backends.kinds import (
    BACKENDS,
    DTYPES,
    PROTOCOL_CAPABILITIES,
    BackendKind,
    Capability,
    Dtype,
    can,
    chat_for,
    check_model,
)
from judgebias.backends.protocol import Backend
from judgebias.backends.resident import Resident
from judgebias.redaction import redact_uri

__all__ = ["BACKENDS", "DTYPES", "JudgeSpec", "ModelSpec", "build_backend", "cached", "chat_for",
           "freeze_before_first_model", "is_resident", "load_local", "release_resident_models",
           "resident_model"]


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model backend.

    ``model`` is a local model spec (packaged alias, folder, ``.gguf``) for ``backend="local"`` (the
    in-process engine) and ``"vllm"`` (vLLM in its own environment, ``judgebias.backends.vllm_backend``) or
    the API's model name for ``"openai"`` (its key is read from ``api_key_env`` where the backend is
    built, never stored in the spec). A config's model entry makes its spec with ``to_spec()``; both
    check their fields with ``judgebias.backends.kinds.check_model``. ``batch_size`` is the number of
    items per model call and per call-cache transaction; within a call the cache also commits every
    few seconds what the backend reported, so a kill loses seconds.
    """

    name: str
    model: str
    backend: BackendKind = "local"
    base_url: str | None = None
    api_key_env: str | None = None
    batch_size: int = 8
    cache_dir: str | None = None  # None: $JUDGEBIAS_CACHE_DIR where the backend is built
    # "package.module:function": called with this spec to build any other Backend (an in-house
    # client, a wrapped model); importable wherever the spec is built. docs/judges.md, "Your own
    # backend".
    factory: str | None = None
    dtype: Dtype = "auto"
    device: str | None = None
    gguf_file: str | None = None
    max_batch: int | None = None  # local: most prompts per forward pass (None: the backend's default)
    token_budget: int | None = None  # local: most tokens per forward pass (None: by device)
    prefix_mode: str = "none"  # openai: how an answer prefix is sent
    quantize: str = "none"  # local: weight-only quantization (judgebias.backends.quantization)
    # openai: the served model's tokenizer (alias, folder, hub id): exact P(A) from a server that
    # returns named token ids (vLLM's logprob_token_ids); others keep their top-k bounds.
    option_tokenizer: str | None = None
    # openai: requests in flight ("adaptive" or a number) and the declared budgets per minute; how
    # calls are sent, not what they answer: not in model_key().
    concurrency: int | str = "adaptive"
    rpm: float | None = None
    tpm: float | None = None

    def __post_init__(self) -> None:
        try:
            check_model(backend=self.backend, dtype=self.dtype, quantize=self.quantize,
                        base_url=self.base_url, api_key_env=self.api_key_env,
                        option_tokenizer=self.option_tokenizer, concurrency=self.concurrency,
                        rpm=self.rpm, tpm=self.tpm)
        except ValueError as exc:
            raise ValueError(f"model {self.name!r}: {exc}") from None
        if self.batch_size < 1:
            raise ValueError(f"model {self.name!r}: batch_size must be >= 1, got {self.batch_size}")

    def can(self, capability: Capability) -> bool:
        """Whether the backend this spec builds can do ``capability`` (``kinds.CAPABILITIES``); one
        built by a ``factory`` only as much as the protocol promises."""
        if self.factory:
            can("local", capability)  # an unknown capability is refused here too
            return capability in PROTOCOL_CAPABILITIES
        return can(self.backend, capability)

    def model_key(self) -> str:
        """What identifies the built backend (not the batch size or the cache location)."""
        # A password in base_url is a credential, not an identity: never in a key or a chunk id.
        key = {"backend": self.backend, "model": self.model,
               "base_url": redact_uri(self.base_url) if self.base_url else self.base_url,
               "api_key_env": self.api_key_env, "name": self.name, "factory": self.factory}
        # Only when set, so the keys (and chunk ids) of specs that never set them stay as they were.
        for extra, default in (("dtype", "auto"), ("gguf_file", None), ("prefix_mode", "none"),
                               ("quantize", "none"), ("option_tokenizer", None)):
            if getattr(self, extra) != default:
                key[extra] = getattr(self, extra)
        return json.dumps(key, sort_keys=True)


@dataclass(frozen=True)
class JudgeSpec(ModelSpec):
    """A judge: a model plus the template it judges with. ``chat=None`` picks the chat prompt when
    the model has a chat template."""

    template: str = "dbg-ab"
    chat: bool | None = None

    def task_key(self) -> str:
        """What determines the judgments (for chunk ids): batch size and cache location do not."""
        return json.dumps({"model": self.model_key(), "template": self.template, "chat": self.chat},
                          sort_keys=True)


def build_backend(spec: ModelSpec, *, loaded: Any = None) -> Backend:
    """The uncached backend ``spec`` describes. ``loaded``: an already loaded local model (e.g. with
    a LoRA adapter merged in) to use instead of loading ``spec.model``."""
    if spec.factory:
        import importlib

        module, _, function = spec.factory.partition(":")
        try:
            build = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"model {spec.name!r}: factory {spec.factory!r} cannot be imported "
                             f"here ({exc})") from None
        return build(spec)
    if spec.backend == "openai":
        from judgebias.backends.openai_compat import OpenAICompatBackend

        kwargs: dict[str, Any] = {"name": spec.name or None, "prefix_mode": spec.prefix_mode,
                                  "option_tokenizer": spec.option_tokenizer,
                                  "concurrency": spec.concurrency, "rpm": spec.rpm, "tpm": spec.tpm}
        if spec.base_url:
            kwargs["base_url"] = spec.base_url
        if spec.api_key_env:
            # The key is read from the named environment variable by the backend; never in a spec.
            kwargs["api_key_env"] = spec.api_key_env
        from judgebias.backends.pricing import price_for

        listed = price_for(spec.model)  # a listed API model's cost is in its usage log
        if listed is not None:
            kwargs["prices"] = {spec.model: listed[1]}
        return OpenAICompatBackend(spec.model, **kwargs)
    if spec.backend == "vllm":
        # vLLM runs in its own environment (a child process); a clear error names it when missing.
        from judgebias.backends.vllm_backend import VLLMBackend

        return VLLMBackend(spec.model, name=spec.name or None, dtype=spec.dtype, gguf_file=spec.gguf_file)
    from judgebias.backends.local import LocalBackend

    if spec.quantize != "none":  # LocalBackend loads plain weights; a quantized model is handed to it
        from judgebias.backends.quantization import quantize_weights

        loaded = load_local(spec) if loaded is None else quantize_weights(loaded, spec.quantize)
    kwargs = {"name": spec.name or None, "device": spec.device, "dtype": spec.dtype,
              "gguf_file": spec.gguf_file, "token_budget": spec.token_budget}
    if spec.max_batch is not None:
        kwargs["max_batch"] = spec.max_batch
    return LocalBackend(loaded if loaded is not None else spec.model, **kwargs)


def cached(inner: Backend, spec: ModelSpec, cache: Any = None):
    """``inner`` behind the content-keyed call cache, one transaction per ``spec.batch_size`` calls
    and every ``COMMIT_SECONDS`` within one.
    ``cache``: a ``ResponseCache`` (default: ``spec.cache_dir``, else $JUDGEBIAS_CACHE_DIR)."""
    from judgebias.backends.call_cache import CachedBackend, ResponseCache

    if cache is None:
        cache = ResponseCache(spec.cache_dir) if spec.cache_dir else ResponseCache.from_env()
    return CachedBackend(inner, cache, chunk_size=spec.batch_size)


ENV_RESIDENT_MODELS = "JUDGEBIAS_RESIDENT_MODELS"
_RESIDENT = Resident(ENV_RESIDENT_MODELS, default=2)


def resident_model(spec: ModelSpec):
    """The loaded weights of a local ``spec``, kept between the stages of one process.

    An experiment opens each model 5-10 times (generate, judge, perplexity, attention, ablations);
    reloading gemma-3-270m in bf16 takes ~5 s each time. The last ``JUDGEBIAS_RESIDENT_MODELS``
    (default 2) stay loaded; 0 reloads every time. Only plain weights are shared: a fine-tuned
    model is built apart (``loaded=``), so no adapter can leak into another stage."""
    loaded, _ = _RESIDENT.get(_resident_key(spec), lambda: load_local(spec))
    return loaded


def is_resident(spec: ModelSpec) -> bool:
    """Whether ``resident_model(spec)`` would return weights already loaded (no load, no memory)."""
    return _RESIDENT.holds(_resident_key(spec))


def _resident_key(spec: ModelSpec) -> tuple:
    return (spec.model, spec.gguf_file, spec.device, spec.dtype, spec.quantize)


def load_local(spec: ModelSpec):
    """The local model ``spec`` names, freshly loaded (not the resident copy: a caller may change it,
    as fine-tuning does), in its dtype, quantized as it asks."""
    from judgebias.backends.loading import load_model
    from judgebias.backends.quantization import quantize_weights

    _freeze_if_first_model()

    plain = load_model(spec.model, gguf_file=spec.gguf_file, device=spec.device, dtype=spec.dtype)
    return quantize_weights(plain, spec.quantize)


def release_resident_models() -> None:
    _RESIDENT.clear()


_freeze = {"asked": False}


def freeze_before_first_model() -> None:
    """For a command: when it loads its first local model, what the process holds then lives as long
    as the command, so the garbage collector stops walking it (``gc.freeze``).

    The stages collect garbage before and after a model (``stages._common.open_backend``, the
    resident models' release), so that a released model's memory is back before the next one loads.
    In a process holding Prefect, torch and transformers each full collection walked ~470,000
    objects again: 13 collections were 6.0 s of a 30 s ``judgebias run`` of the tests' tiny config,
    2.3 s frozen (docs/benchmarks.md; what the stages import after the first load is still walked).
    The freeze waits for the first load, so a run whose stages are all in its run folder imports no
    torch for it. Nothing is frozen while a model is held (a resident one, a distributed worker's):
    frozen objects are never collected, and its reference cycles would outlive its release. A
    library caller (a notebook, the tests' in-process flows) is left as it is, for the same reason:
    a model it holds is out of sight here."""
    _freeze["asked"] = True


def _freeze_if_first_model() -> None:
    if not _freeze["asked"] or Resident.any_held():
        return
    import gc

    # The engine the load is about to import (torch; transformers' lazy model classes), frozen with
    # the rest.
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    _freeze["asked"] = False
    gc.collect()
    gc.freeze()
