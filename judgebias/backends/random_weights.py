"""Seeded random-weights models from a real architecture's config: the same shapes and FLOPs as the
real model without its weights (benchmarks), or a tiny Llama that runs a real forward pass in
milliseconds (tests)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from judgebias.backends.loading import LoadedModel, default_device, dtype_name, resolve_dtype

# Real architectures' configs (each from its model's published config.json), for random-weights
# benchmarks: same shapes and FLOPs as the real model without needing its weights. One row a model,
# every value spelled in its row (no defaults shared between architectures: a row shows what its
# model really has); ``_EXTRA`` holds the keys only some models have.
_COLUMNS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps",
            "tie_word_embeddings", "hidden_act", "bos_token_id", "eos_token_id")
_ROWS: dict[str, tuple] = {
    "smollm2-135m": ("llama", 576, 1536, 30, 9, 3, 49152, 8192, 100000.0, 1e-5, True, "silu", 1, 2),
    "qwen2.5-0.5b": ("qwen2", 896, 4864, 24, 14, 2, 151936, 32768, 1000000.0, 1e-6, True, "silu",
                     151643, 151643),
    "qwen2.5-1.5b": ("qwen2", 1536, 8960, 28, 12, 2, 151936, 32768, 1000000.0, 1e-6, True, "silu",
                     151643, 151643),
    "llama-3.1-8b": ("llama", 4096, 14336, 32, 32, 8, 128256, 131072, 500000.0, 1e-5, False, "silu",
                     128000, 128001),
    # Two layers, 64 wide: fast enough for unit tests, still a real Llama forward pass.
    "tiny-llama": ("llama", 64, 128, 2, 4, 2, 49152, 4096, 10000.0, 1e-5, True, "silu", 1, 2),
}
_EXTRA: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
}
ARCHITECTURES: dict[str, dict[str, Any]] = {
    name: {**dict(zip(_COLUMNS, row, strict=True)), **_EXTRA.get(name, {})} for name, row in _ROWS.items()
}


def make_config(config: str | dict | Any, **overrides):
    """A transformers config from an architecture name, a config dict or a config object."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, str):
        try:
            config = dict(ARCHITECTURES[config])
        except KeyError:
            raise ValueError(f"unknown architecture {config!r}; known: {', '.join(ARCHITECTURES)}") from None
    if isinstance(config, PretrainedConfig):
        config = config.to_dict()
    config = {**config, **overrides}
    model_type = config.pop("model_type")
    return AutoConfig.for_model(model_type, **config)


def _check_fits(cfg, dtype, device: str) -> None:
    """Refuse early (with the numbers) a model that cannot fit, instead of an OOM kill mid-way."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    need = n_params * torch.empty((), dtype=dtype).element_size()
    if str(device).startswith("cuda"):
        free, _ = torch.cuda.mem_get_info()
        have, where = free, "free GPU memory"
    else:
        have, where = _available_ram(), "available RAM"
    if have and need > 0.9 * have:
        raise MemoryError(f"{cfg.model_type} with {n_params / 1e9:.2f} B parameters needs "
                          f"{need / 2**30:.1f} GiB in {dtype_name(dtype)}; only "
                          f"{have / 2**30:.1f} GiB {where}")


def _available_ram() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def random_model(config: str | dict | Any, *, tokenizer=None, seed: int = 0, device: str | None = None,
                 dtype=None, attn_implementation: str = "sdpa", name: str | None = None,
                 **overrides) -> LoadedModel:
    """A seeded random-weights model (same seed and config => same weights, on one machine).

    ``tokenizer`` is required for text in and out; a real one with a vocabulary no larger than the
    config's keeps every token id valid (the SmolLM2 tokenizer for the bundled architectures).
    """
    import torch
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    cfg = make_config(config, **overrides)
    if tokenizer is not None and len(tokenizer) > cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than the config's vocab_size "
                         f"{cfg.vocab_size}")
    device = device or default_device()
    dtype = resolve_dtype(dtype, device)
    cfg._attn_implementation = attn_implementation
    _check_fits(cfg, dtype, device)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.eval()
    label = name or (config if isinstance(config, str) else cfg.model_type) + f"-random-s{seed}"
    digest = hashlib.sha256(json.dumps(cfg.to_diff_dict(), sort_keys=True, default=str).encode()).hexdigest()
    identity = {"model": label, "kind": "random", "seed": seed, "config_sha256": digest,
                "dtype": dtype_name(dtype)}
    return LoadedModel(model=model, tokenizer=tokenizer, name=label, identity=identity,
                       load_seconds=time.perf_counter() - start)
