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

# Config dicts of real architectures (from each model's published config.json), for random-weights
# benchmarks: same shapes and FLOPs as the real model without needing its weights.
# Deliberate parallel: the entries repeat the same keys because each copies its model's published
# config; sharing "defaults" between architectures would hide which values a model really has.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(
        model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
        bos_token_id=1, eos_token_id=2),
    "qwen2.5-0.5b": dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
        bos_token_id=151643, eos_token_id=151643),
    "qwen2.5-1.5b": dict(
        model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
        bos_token_id=151643, eos_token_id=151643),
    "llama-3.1-8b": dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu",
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        bos_token_id=128000, eos_token_id=128001),
    # Two layers, 64 wide: fast enough for unit tests, still a real Llama forward pass.
    "tiny-llama": dict(
        model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=49152, max_position_embeddings=4096,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
        bos_token_id=1, eos_token_id=2),
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
