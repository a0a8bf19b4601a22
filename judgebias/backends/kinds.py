"""What a model entry may say, in one place: the backend kinds and what each can do, the dtypes, the
prompt kinds and the rules that tie them together.

The config's model entry (``judgebias.config.base``) and the builder's ``ModelSpec`` both take their
field types and their checks from here, so a new backend kind or dtype is one edit and both
reject a bad entry with the same words. Nothing heavy is imported: the config loads this without
pulling in any backend.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from judgebias.backends.quantization import check_quantization

BackendKind = Literal["local", "openai", "vllm"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
PromptKind = Literal["auto", "chat", "few-shot"]
GenerationPromptKind = Literal["chat", "few-shot"]  # a generator says which; "auto" is for judges
BACKENDS: tuple[str, ...] = get_args(BackendKind)
DTYPES: tuple[str, ...] = get_args(Dtype)
# Whether a prompt kind asks for chat prompts; None ("auto") leaves it to the model.
PROMPT_KINDS: dict[str, bool | None] = {"auto": None, "chat": True, "few-shot": False}

# What a backend kind can do. Stages, flows, workers and the config ask for a capability
# (``can(kind, "perplexity")``), never for a kind's name, so a new engine gets every stage its
# capabilities allow by one line here (and a branch in ``builder.build_backend``).
Capability = Literal[
    "generation",       # generate(): responses, rewrites, explanations
    "option_logprobs",  # score_options(): P(A) from the log-probs of named option tokens
    "perplexity",       # continuation_logprobs() on every item: the perplexity analysis
    "attention",        # the model's attention weights: the attention analysis
    "finetune",         # LoRA training of its weights: the fine-tune ablation
    "in_process",       # weights loaded in this process: kept resident, one call at a time, a
                        # thread count, --dtype, the float32 re-score of a reduced-precision judge
]
CAPABILITIES: dict[str, frozenset[str]] = {
    "local": frozenset(get_args(Capability)),
    # vLLM in its own environment: prompt log-probs too (vllm_backend.continuation_logprobs).
    "vllm": frozenset({"generation", "option_logprobs", "perplexity"}),
    # An endpoint gives prompt log-probs only where it echoes them (per-item errors otherwise), so
    # the perplexity analysis is not planned on it.
    "openai": frozenset({"generation", "option_logprobs"}),
}
# A backend built by a spec's ``factory`` is only known to implement the protocol.
PROTOCOL_CAPABILITIES: frozenset[str] = frozenset({"generation", "option_logprobs"})


def can(backend: str, capability: Capability) -> bool:
    """Whether a backend of kind ``backend`` can do ``capability``."""
    if capability not in get_args(Capability):
        raise ValueError(f"unknown capability {capability!r}; use one of {', '.join(get_args(Capability))}")
    if backend not in CAPABILITIES:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    return capability in CAPABILITIES[backend]


def check_model(*, backend: str, dtype: str = "auto", quantize: str = "none", base_url: str | None = None,
                api_key_env: str | None = None, option_tokenizer: str | None = None,
                concurrency: int | str = "adaptive", rpm: float | None = None,
                tpm: float | None = None) -> None:
    """Raise ``ValueError`` (without the model's name: the caller says which entry) where the fields
    of one model description contradict each other."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    check_quantization(quantize, what="quantize")
    if backend != "openai" and (base_url or api_key_env):
        hint = "; for a vLLM server use backend 'openai' with its base_url" if backend == "vllm" else ""
        raise ValueError(f"base_url/api_key_env only apply to backend 'openai'{hint}")
    if backend == "openai" and dtype != "auto":
        raise ValueError("dtype only applies to backend 'local'")
    if backend != "local" and quantize != "none":
        raise ValueError("quantize only applies to backend 'local' "
                         "(a server or vLLM quantizes its own weights)")
    if option_tokenizer and backend != "openai":
        raise ValueError("option_tokenizer only applies to backend 'openai' "
                         "(a local or vllm judge reads every option token itself)")
    from judgebias.backends.rate_control import ADAPTIVE, parse_concurrency

    fixed = parse_concurrency(concurrency) != ADAPTIVE
    if backend != "openai" and (fixed or rpm or tpm):
        raise ValueError("concurrency/rpm/tpm only apply to backend 'openai' (requests to an endpoint)")
    for what, budget in (("rpm", rpm), ("tpm", tpm)):
        if budget is not None and not 0 < budget < float("inf"):
            raise ValueError(f"{what} must be a number > 0, got {budget}")


def chat_for(prompt_kind: str) -> bool | None:
    """A ``prompt_kind`` as a chat flag: True (chat template), False (a base model's few-shot text) or
    None ("auto": the model decides, see ``uses_chat``)."""
    if prompt_kind not in PROMPT_KINDS:
        raise ValueError(f"unknown prompt kind {prompt_kind!r}; use one of {', '.join(PROMPT_KINDS)}")
    return PROMPT_KINDS[prompt_kind]


def uses_chat(backend: Any, chat: bool | None = None) -> bool:
    """``chat`` where it is set, else the backend's own answer: chat prompts unless it says it is a
    base model (``is_chat`` False; an API model says nothing and gets chat)."""
    return bool(getattr(backend, "is_chat", True)) if chat is None else chat
