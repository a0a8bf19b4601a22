"""The base of every config section: frozen, unknown keys rejected; names; where a model runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judgebias.backends.quantization import Quantization

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _ModelRef(_Strict):
    """Where a model runs: in-process (``local``: a packaged name or a local folder), in vLLM (``vllm``:
    the same model names, vLLM in its own environment, ``scripts/install.sh --vllm``) or behind an
    OpenAI-compatible endpoint (``openai``: needs ``base_url``; the key is read from ``api_key_env``)."""

    model: str = Field(min_length=1)
    backend: Literal["local", "openai", "vllm"] = "local"
    base_url: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    # Local models only. "auto": bf16 on a GPU, fp32 (exact) on CPU; "bfloat16" on a CPU with
    # AVX512-BF16/AMX judges ~3x faster at a cost in P(A) that docs/benchmarks.md reports.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Local models only: "int8" stores the linear weights as int8 (torchao, the `quant` extra), a
    # larger judge in about half the memory of bf16 (docs/benchmarks.md, "Judges that fit in memory").
    quantize: Quantization = "none"
    # backend "openai" only: the served model's tokenizer (alias, folder, hub id), for exact P(A) from
    # a server that returns named token ids (vLLM); others keep their top-20 bounds.
    option_tokenizer: str | None = None

    @model_validator(mode="after")
    def _endpoint(self):
        if self.backend == "openai" and not self.base_url:
            raise ValueError("backend 'openai' needs base_url")
        if self.backend in ("local", "vllm") and (self.base_url or self.api_key_env):
            raise ValueError("base_url/api_key_env only apply to backend 'openai'")
        if self.backend == "openai" and self.dtype != "auto":
            raise ValueError("dtype only applies to backend 'local'")
        if self.backend != "local" and self.quantize != "none":
            raise ValueError("quantize only applies to backend 'local' (a server quantizes its own weights)")
        if self.option_tokenizer and self.backend != "openai":
            raise ValueError("option_tokenizer only applies to backend 'openai'")
        return self
