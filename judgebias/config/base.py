"""The base of every config section: frozen, unknown keys rejected; names; where a model runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from judgebias.backends.kinds import BackendKind, Capability, Dtype, can, check_model
from judgebias.backends.quantization import Quantization
from judgebias.redaction import redact_uri

if TYPE_CHECKING:
    from judgebias.backends.builder import ModelSpec

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")]


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelRef(Strict):
    """Where a model runs: in-process (``local``: a packaged name or a local folder), in vLLM (``vllm``:
    the same model names, vLLM in its own environment, ``scripts/install.sh --vllm``) or behind an
    OpenAI-compatible endpoint (``openai``: needs ``base_url``; the key is read from ``api_key_env``)."""

    model: str = Field(min_length=1)
    backend: BackendKind = "local"
    base_url: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    # Local models only. "auto": bf16 on a GPU, fp32 (exact) on CPU; "bfloat16" on a CPU with
    # AVX512-BF16/AMX judges ~3x faster at a cost in P(A) that docs/benchmarks.md reports.
    dtype: Dtype = "auto"
    # Local models only: "int8" stores the linear weights as int8 (torchao, the `quant` extra), a
    # larger judge in about half the memory of bf16 (docs/benchmarks.md, "Judges that fit in memory").
    quantize: Quantization = "none"
    # backend "openai" only: the served model's tokenizer (alias, folder, hub id), for exact P(A) from
    # a server that returns named token ids (vLLM); others keep their top-20 bounds.
    option_tokenizer: str | None = None
    # backend "openai" only: requests in flight, "adaptive" (found from the provider's 429s,
    # rate-limit headers and latency) or a fixed number; rpm/tpm: the most requests/tokens a minute.
    concurrency: int | Literal["adaptive"] = "adaptive"
    rpm: float | None = Field(None, gt=0)
    tpm: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _endpoint(self):
        # A config names its endpoint; only `judgebias judge --backend openai` falls back to the
        # client's default one.
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs base_url")
        check_model(backend=self.backend, dtype=self.dtype, quantize=self.quantize, base_url=self.base_url,
                    api_key_env=self.api_key_env, option_tokenizer=self.option_tokenizer,
                    concurrency=self.concurrency, rpm=self.rpm, tpm=self.tpm)
        return self

    @field_serializer("base_url", when_used="json")
    def _base_url_without_password(self, url: str | None) -> str | None:
        # Every JSON form of a config holds the URL with its password masked: Prefect's flow-run
        # parameters (kept in its database), MLflow params, the config hash (a new password for the
        # same server keeps the run folder, as it keeps the call cache). The object keeps it for the calls.
        return redact_uri(url) if url else url

    def can(self, capability: Capability) -> bool:
        """Whether this entry's backend can do ``capability`` (``judgebias.backends.kinds.CAPABILITIES``):
        what the stages ask instead of the backend's name."""
        return can(self.backend, capability)

    def to_spec(self, cache_dir: str | None = None, **extra: Any) -> ModelSpec:
        """The builder's spec of this entry (``name`` defaults to the entry's own; a rewriter has none)."""
        from judgebias.backends.builder import ModelSpec

        return ModelSpec(**self._spec_fields(cache_dir, extra))

    def _spec_fields(self, cache_dir: str | None, extra: dict[str, Any]) -> dict[str, Any]:
        extra.setdefault("name", getattr(self, "name", None) or self.model)
        return dict(model=self.model, backend=self.backend, base_url=self.base_url,
                    api_key_env=self.api_key_env, batch_size=getattr(self, "batch_size", 8),
                    cache_dir=cache_dir, dtype=self.dtype, quantize=self.quantize,
                    option_tokenizer=self.option_tokenizer, concurrency=self.concurrency, rpm=self.rpm,
                    tpm=self.tpm, **extra)
