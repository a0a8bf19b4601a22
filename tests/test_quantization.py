"""Weight-only int8 judges (torchao): smaller weights, a cache key of their own, the same verdicts
within the quantization's error, and clear errors where the option does not apply."""

from __future__ import annotations

import sys

import pytest
import yaml

from judgebias.backends.builder import JudgeSpec, ModelSpec, build_backend, cached
from judgebias.backends.call_cache import ResponseCache
from judgebias.backends.protocol import Prompt

pytest.importorskip("torchao", reason="the `quant` extra (torchao) is not installed")

PROMPTS = [Prompt.chat(("user", f"Question {i}: which is better?\nA: yes\nB: no\nAnswer A or B."))
           for i in range(4)]


def test_int8_stores_linear_weights_in_a_quarter_of_fp32_and_says_so(tiny_models):
    from judgebias.backends import loading as models
    from judgebias.backends.quantization import quantize_weights, weight_bytes

    plain = models.load_model(tiny_models["tiny-a"], dtype="float32", device="cpu")
    before = weight_bytes(plain.model)
    quantized = [m.weight for m in plain.model.modules() if type(m).__name__ == "Linear"
                 and m.weight is not plain.model.get_input_embeddings().weight]
    linear, rows = sum(w.numel() for w in quantized), sum(w.shape[0] for w in quantized)
    q = quantize_weights(plain, "int8")
    after = weight_bytes(q.model)
    # Each linear weight goes from 4 bytes to 1, plus a scale per output row (tiny-llama: 2 layers
    # x 512 rows); the embedding, the output layer tied to it and the norms stay fp32.
    assert 3 * linear - 8 * rows <= before - after < 3 * linear
    assert q.identity["quantization"] == "int8-weight-only" and q.identity["torchao"]
    assert quantize_weights(q, "int8") is q  # asking twice quantizes once
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        quantize_weights(q, "int4")


def test_quantized_judge_has_its_own_cache_key_and_tracks_the_plain_one(tiny_models, tmp_path):
    cache = ResponseCache(tmp_path / "calls")
    spec = JudgeSpec(name="ta", model=tiny_models["tiny-a"], device="cpu", dtype="float32")
    plain = cached(build_backend(spec), spec, cache)
    quant_spec = JudgeSpec(name="ta", model=tiny_models["tiny-a"], device="cpu", dtype="float32",
                           quantize="int8")
    quant = cached(build_backend(quant_spec), quant_spec, cache)
    assert quant.inner.identity()["quantization"] == "int8-weight-only"
    assert "quantize" in quant_spec.model_key() and "quantize" not in spec.model_key()
    p = plain.score_options(PROMPTS, ["A", "B"])
    q = quant.score_options(PROMPTS, ["A", "B"])
    # Not served from the plain judge's cache: the quantized model computed its own answers.
    assert quant.stats.calls == len(PROMPTS) and quant.stats.hits == 0
    for a, b in zip(p, q, strict=True):
        assert a.error is None and b.error is None
        assert abs(p_a(a) - p_a(b)) < 0.05
    assert [s.probs for s in quant.score_options(PROMPTS, ["A", "B"])] == [s.probs for s in q]


def p_a(scores) -> float:
    return scores.probs["A"] / (scores.probs["A"] + scores.probs["B"])


def test_quantize_applies_to_local_models_only_and_names_the_choices(tiny_models, tmp_path):
    with pytest.raises(ValueError, match="quantize only applies to backend 'local'"):
        ModelSpec(name="api", model="gpt", backend="openai", base_url="http://x", quantize="int8")
    with pytest.raises(ValueError, match="use one of none, int8"):
        ModelSpec(name="j", model=tiny_models["tiny-a"], quantize="int3")

    from judgebias.config.experiment import ConfigError, load_config

    base = {"name": "q", "dataset": {"source": "mt-bench-40", "sample": 2},
            "generators": [{"name": "g1", "model": tiny_models["tiny-a"]},
                           {"name": "g2", "model": tiny_models["tiny-b"]}],
            "judges": [{"name": "g1", "model": tiny_models["tiny-a"]}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base))
    plain_hash = load_config(path).config_hash()
    base["judges"][0]["quantize"] = "none"
    path.write_text(yaml.safe_dump(base))
    assert load_config(path).config_hash() == plain_hash  # saying the default keeps the run folder
    base["judges"][0]["quantize"] = "int8"
    path.write_text(yaml.safe_dump(base))
    cfg = load_config(path)
    assert cfg.config_hash() != plain_hash
    assert cfg.judges[0].to_spec().quantize == "int8"
    base["judges"][0].update(backend="openai", base_url="http://127.0.0.1:1/v1", model="m")
    path.write_text(yaml.safe_dump(base))
    with pytest.raises(ConfigError, match="quantize only applies to backend 'local'"):
        load_config(path)


def test_without_torchao_a_quantized_judge_is_an_error_not_full_weights(tiny_models, monkeypatch):
    from judgebias.backends import loading as models
    from judgebias.backends.quantization import quantize_weights

    plain = models.load_model(tiny_models["tiny-a"], dtype="float32", device="cpu")
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(RuntimeError, match=r"needs torchao.*judgebias\[quant\]"):
        quantize_weights(plain, "int8")


def test_judge_command_rejects_an_unknown_scheme_naming_the_option(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    table = tmp_path / "t.jsonl"
    table.write_text('{"prompt": "q", "response_a": "a", "response_b": "b"}\n')
    result = CliRunner().invoke(app, ["judge", str(table), "--out", str(tmp_path / "o.jsonl"),
                                      "--judge", "smollm2-135m-instruct", "--quantize", "int4"],
                             env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "unknown --quantize 'int4'; use one of none, int8" in result.output


def test_bench_rows_of_a_quantized_engine_name_it_and_weigh_both_copies(monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model=None, arch="tiny-llama", n_pairs=3, prompt_tokens=0, explain_pairs=1,
                                 explain_tokens=4, modes=["batched", "unbatched"], device="cpu",
                                 token_budget=None, batch_size=8, quantize="int8")
    modes = report["modes"]
    # Same dtype, quantized: the fp32 reference runs as is, the engine's int8 copy beside it.
    assert [(m, r["dtype"]) for m, r in modes.items()] == [
        ("batched", "float32+int8"), ("unbatched", "float32"), ("unbatched-float32+int8", "float32+int8")]
    assert 0 < modes["unbatched"]["max_abs_p_diff"] < 0.05  # the int8 weights' cost in P(A)
    assert modes["unbatched-float32+int8"]["max_abs_p_diff"] < 1e-4  # batching adds nothing to it
    w = report["weights_gib"]
    assert w["engine"] < w["reference"]
    table = bench.markdown(report)
    assert "| batched | float32+int8 |" in table and "Weights in memory" in table

    alone = bench.run_benchmark(model=None, arch="tiny-llama", n_pairs=2, prompt_tokens=0, explain_pairs=1,
                                explain_tokens=4, modes=["batched"], device="cpu", token_budget=None,
                                batch_size=8, quantize="int8")
    assert alone["modes"]["batched"]["dtype"] == "float32+int8"


def test_random_gguf_writer_maps_every_tensor_and_pads_the_vocabulary(tmp_path):
    # The file llama.cpp is benchmarked on (docs/benchmarks.md): every HF tensor under its GGUF
    # name, matrices in the asked quantization, the tokenizer padded to the architecture's vocab.
    import importlib.util
    from pathlib import Path

    import gguf

    script = Path(__file__).parents[1] / "benchmarks" / "write_random_gguf.py"
    spec = importlib.util.spec_from_file_location("write_random_gguf", script)
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    info = writer.write("tiny-llama", tmp_path / "t.gguf", "Q8_0", vocab_size=49152 + 64)
    reader = gguf.GGUFReader(info["file"])
    tensors = {t.name: t for t in reader.tensors}
    # tiny-llama: embedding + final norm + 2 layers x (2 norms + q, k, v, o + gate, up, down); tied head.
    assert len(tensors) == 2 + 2 * 9 and "output.weight" not in tensors
    assert tensors["blk.1.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 49152 + 64 and tokens.contents()[-1] == "<|unused_63|>"
    assert tensors["token_embd.weight"].shape.tolist() == [64, 49152 + 64]
    assert reader.fields["general.architecture"].contents() == "llama"
    with pytest.raises(ValueError, match="no GGUF name"):
        writer.gguf_name("model.layers.0.mlp.experts.weight")
