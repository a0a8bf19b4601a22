"""Write a random-weights model from a real architecture's config as a quantized GGUF file, so
llama.cpp (llama-server, llama-cpp-python's server) can be timed beside the in-process engine on a
judge larger than the packaged ones, on a machine that cannot download one.

    python benchmarks/write_random_gguf.py --arch qwen2.5-1.5b --type Q4_0 --out /tmp/qwen1.5b-q4_0.gguf

The weights are those of ``judgebias.backends.random_weights.random_model(arch, seed=...)`` (the engine's
bench rows use the same seed), quantized by the ``gguf`` package's own numpy quantizers; the
tokenizer is the packaged SmolLM2 one (as in the engine's random-weights rows), its vocabulary
padded with unused tokens to the architecture's size. Only the Qwen2 and Llama layouts are mapped.
Random weights give the speed and the memory of the real shapes, not a judge's answers: a server
returns its top log-probabilities, and a near-uniform random model rarely has "A" or "B" in them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

QUANT_TYPES = ("Q4_0", "Q4_1", "Q8_0", "F16")
_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.{i}.<rest>
    if parts[:2] == ["model", "layers"] and ".".join(parts[3:]) in _LAYER:
        return f"blk.{parts[2]}.{_LAYER['.'.join(parts[3:])]}"
    raise ValueError(f"no GGUF name for tensor {hf!r}")


def _llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp's Llama rope pairs adjacent dims; HF's rotate_half pairs the two halves of a head.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write(arch: str, out: Path, qtype: str, seed: int = 0, **overrides) -> dict:
    """Write ``arch`` (config ``overrides`` applied) with seeded random weights to ``out``."""
    import gguf
    import torch

    from judgebias.backends import loading as models
    from judgebias.backends.random_weights import random_model

    start = time.perf_counter()
    lm = random_model(arch, seed=seed, device="cpu", dtype="float32", **overrides)
    cfg = lm.model.config
    if cfg.model_type not in ("qwen2", "llama"):
        raise ValueError(f"{arch}: only qwen2 and llama layouts are mapped, not {cfg.model_type}")
    source = gguf.GGUFReader(str(models.resolve("smollm2-135m-instruct").source))

    def field(name: str):
        f = source.fields[name]
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]]

    w = gguf.GGUFWriter(str(out), cfg.model_type)
    w.add_name(f"{arch}-random-s{seed}")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_theta if hasattr(cfg, "rope_theta") else
                               cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{qtype}", gguf.LlamaFileType.MOSTLY_F16))
    tokens = list(field("tokenizer.ggml.tokens"))
    types = list(field("tokenizer.ggml.token_type"))
    pad = cfg.vocab_size - len(tokens)
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_tokenizer_pre(field("tokenizer.ggml.pre"))
    w.add_token_list(tokens + [f"<|unused_{i}|>" for i in range(pad)])
    w.add_token_types(types + [int(gguf.TokenType.UNUSED)] * pad)
    w.add_token_merges(list(field("tokenizer.ggml.merges")))
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                     ("padding", w.add_pad_token_id)):
        add(int(field(f"tokenizer.ggml.{key}_token_id")))
    w.add_chat_template(field("tokenizer.chat_template"))

    quant = getattr(gguf.GGMLQuantizationType, qtype)
    for name, tensor in lm.model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = tensor.to(torch.float32).numpy()
        if cfg.model_type == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            data = _llama_permute(data, heads)
        if data.ndim == 2:  # matrices quantized; norms and biases stay f32, as llama.cpp's converter does
            packed = gguf.quants.quantize(data, quant)
            w.add_tensor(gguf_name(name), packed, raw_shape=packed.shape, raw_dtype=quant)
        else:
            w.add_tensor(gguf_name(name), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"file": str(out), "bytes": out.stat().st_size, "parameters": lm.n_params,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="qwen2.5-1.5b")
    parser.add_argument("--type", default="Q4_0", choices=QUANT_TYPES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(write(args.arch, args.out, args.type, args.seed))


if __name__ == "__main__":
    main()
