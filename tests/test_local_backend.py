"""The local transformers backend on a tiny random-weights Llama with SmolLM2's real tokenizer.

The fast paths (length-sorted batches, right padding, last-token-only output layer) must give
what a plain one-prompt forward pass gives.
"""

from __future__ import annotations

import math

import pytest
import torch

from judgebias.backends import loading as models
from judgebias.backends.local import MIN_SHARED_PREFIX, LocalBackend
from judgebias.backends.protocol import Backend, GenerationParams, Prompt
from judgebias.backends.random_weights import random_model
from judgebias.backends.token_batching import option_variants, pair_groups, token_batches
from judgebias.prompts import DBG_AB

ALIAS = "smollm2-135m-instruct"

QUERIES = [
    ("What is 2+2?", "4", "5"),
    ("Name a color.", "Blue is a color that is often associated with the sky and the sea.", "dog"),
    ("Why is the sky blue?", "Because of Rayleigh scattering " * 8, "no idea"),
    ("Say hi.", "hi", "Hello there! How can I help you today?"),
]


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer(ALIAS)


@pytest.fixture(scope="module")
def tiny(tokenizer):
    # initializer_range 0.2: peaked enough that greedy choices are not near-ties.
    lm = random_model("tiny-llama", tokenizer=tokenizer, seed=0, device="cpu", initializer_range=0.2)
    return LocalBackend(lm, token_budget=512, max_batch=3)


def _prompts():
    return ([DBG_AB.build(*q) for q in QUERIES] + [DBG_AB.build(q, b, a, chat=False) for q, a, b in QUERIES])


def test_is_a_backend(tiny):
    assert isinstance(tiny, Backend)
    ident = tiny.identity()
    assert ident["backend"] == "local" and ident["kind"] == "random" and len(ident["config_sha256"]) == 64


def test_random_model_is_seeded(tokenizer):
    a = random_model("tiny-llama", tokenizer=tokenizer, seed=3, device="cpu")
    b = random_model("tiny-llama", tokenizer=tokenizer, seed=3, device="cpu")
    c = random_model("tiny-llama", tokenizer=tokenizer, seed=4, device="cpu")
    wa, wb, wc = (m.model.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_option_variants_are_the_letter_alone(tokenizer):
    v = option_variants(tokenizer, ("A", "B"))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in ("A", "ĠA", "B", "ĠB", "An", "About")}
    assert {ids["A"], ids["ĠA"]} <= set(v["A"]) and {ids["B"], ids["ĠB"]} <= set(v["B"])
    assert ids["An"] not in v["A"] and ids["About"] not in v["A"]
    assert not set(v["A"]) & set(v["B"])
    for i in v["A"]:
        s = tokenizer.decode([i]).lstrip()
        assert s.startswith("A") and (len(s) == 1 or not s[1].isalnum())


def _variants_by_plain_scan(tokenizer, texts: list[str], options) -> dict[str, list[int]]:
    """The definition, token by token: every non-special token whose text, left spaces stripped, is
    an option followed by nothing or by a character that is not a letter or digit."""
    special = set(tokenizer.all_special_ids)
    out = {o: [] for o in options}
    for i, text in enumerate(texts):
        s = text.lstrip()
        if i in special or not s:
            continue
        alone = [o for o in options if s.startswith(o) and (len(s) == len(o) or not s[len(o)].isalnum())]
        if alone:
            out[alone[0]].append(i)
    return out


def test_option_variants_are_those_of_a_plain_scan_of_the_vocabulary(tokenizer):
    # The fast path (the Rust decoder in one call, tokens passed over by their first character) against
    # the definition on SmolLM2's 49,152 tokens, each decoded alone by ``decode``; "" has no first
    # character and turns the filter off.
    texts = [tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
             for i in range(len(tokenizer))]
    for options in (("A", "B"), ("1", "2", "3", "4", "5"), ("Output (a)", "Output (b)", "A"), ("", "A")):
        want = _variants_by_plain_scan(tokenizer, texts, options)
        if all(want.values()):
            assert option_variants(tokenizer, options) == want, options
        else:
            with pytest.raises(ValueError, match="no token for option"):
                option_variants(tokenizer, options)


def test_a_tokenizer_with_its_own_decoding_is_read_through_batch_decode(tokenizer):
    from judgebias.backends.token_batching import _decodes_through_backend, single_token_texts

    assert _decodes_through_backend(type(tokenizer))  # SmolLM2's: transformers' fast tokenizer as it is
    own = type("OwnDecode", (type(tokenizer),), {"_decode": lambda self, ids, **kw: f"<{ids[0]}>"})
    assert not _decodes_through_backend(own)

    class Slow:  # no Rust backend at all: batch_decode is asked, with no clean-up
        all_special_ids = (0,)

        def __len__(self):
            return 4

        def batch_decode(self, ids, skip_special_tokens, clean_up_tokenization_spaces):
            assert (skip_special_tokens, clean_up_tokenization_spaces) == (False, False)
            return ["<s>", " A", "About", "B."][ids[0][0]:ids[-1][0] + 1]

    assert single_token_texts(Slow()) == ["<s>", " A", "About", "B."]
    # id 1 " A" is A alone; 2 "About" goes on with a letter; 3 "B." ends in punctuation
    assert option_variants(Slow(), ["A", "B"]) == {"A": [1], "B": [3]}


def test_scores_sum_probability_over_variants_like_a_plain_forward_pass(tiny):
    variants = tiny.variants(("A", "B"))
    for prompt in _prompts()[:3]:
        ids = torch.tensor([tiny.encode(prompt)])
        with torch.inference_mode():
            probs = torch.softmax(tiny.model(ids).logits[0, -1].double(), -1)
        pa, pb = (float(probs[variants[o]].sum()) for o in ("A", "B"))
        s = tiny.score_options([prompt], ["A", "B"])[0]
        assert s.error is None
        assert s.mass == pytest.approx(pa + pb, rel=1e-4)
        assert s.probs["A"] == pytest.approx(pa / (pa + pb), abs=1e-5)
        assert s.probs["A"] + s.probs["B"] == pytest.approx(1.0)


def test_batched_scoring_equals_one_at_a_time(tiny):
    prompts = _prompts()
    lengths = [len(tiny.encode(p)) for p in prompts]
    assert len(set(lengths)) > 3 and len(token_batches(lengths, tiny.token_budget, tiny.max_batch)) > 1
    batched = tiny.score_options(prompts, ["A", "B"])
    for p, b in zip(prompts, batched, strict=True):
        single = tiny.score_options([p], ["A", "B"])[0]
        assert abs(single.probs["A"] - b.probs["A"]) < 1e-4
        assert abs(single.mass - b.mass) <= 1e-4 * single.mass


def test_bf16_engine_tracks_the_fp32_reference(tiny):
    # Same weights cast to bf16 (the opt-in fast CPU dtype): the fast paths stay close to a plain
    # bf16 forward pass, and bf16 as a whole stays close to fp32. The dtype is in the cache identity.
    half = models.LoadedModel(model=random_model(
        "tiny-llama", tokenizer=tiny.tokenizer, seed=0, device="cpu", initializer_range=0.2).model.to(
        torch.bfloat16), tokenizer=tiny.tokenizer, name="tiny-bf16", identity={"dtype": "bfloat16"})
    fast = LocalBackend(half, token_budget=512, max_batch=3)
    assert fast.identity()["dtype"] == "bfloat16" != tiny.identity()["dtype"]
    prompts = _prompts()
    variants = fast.variants(("A", "B"))
    for p, b, ref in zip(prompts, fast.score_options(prompts, ["A", "B"]),
                         tiny.score_options(prompts, ["A", "B"]), strict=True):
        with torch.inference_mode():
            probs = torch.softmax(fast.model(torch.tensor([fast.encode(p)])).logits[0, -1].double(), -1)
        pa, pb = (float(probs[variants[o]].sum()) for o in ("A", "B"))
        assert abs(b.probs["A"] - pa / (pa + pb)) < 5e-3
        assert abs(b.probs["A"] - ref.probs["A"]) < 0.05


def test_dtype_names_resolve_per_device():
    assert models.resolve_dtype("auto", "cpu") is torch.float32
    assert models.resolve_dtype(None, "cuda") is torch.bfloat16
    assert models.resolve_dtype("bfloat16", "cpu") is torch.bfloat16
    assert models.resolve_dtype(torch.float16, "cpu") is torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        models.resolve_dtype("int8", "cpu")


def test_duplicate_prompts_give_identical_scores_in_input_order(tiny):
    prompts = _prompts()
    mixed = [prompts[2], prompts[0], prompts[2], prompts[5]]
    out = tiny.score_options(mixed, ["A", "B"])
    assert out[0] == out[2]
    assert abs(out[1].probs["A"] - tiny.score_options([prompts[0]], ["A", "B"])[0].probs["A"]) < 1e-4


def test_too_long_prompt_is_an_error_not_a_crash(tokenizer):
    lm = random_model("tiny-llama", tokenizer=tokenizer, seed=0, device="cpu",
                             max_position_embeddings=64)
    be = LocalBackend(lm)
    long_p, short_p = DBG_AB.build("q " * 100, "a", "b"), Prompt.raw("Answer: ")
    out = be.score_options([long_p, short_p], ["A", "B"])
    assert "exceeds the model's context of 64" in out[0].error and math.isnan(out[0].probs["A"])
    assert out[1].error is None


def test_chat_prompt_on_a_model_without_chat_template_is_refused(tokenizer):
    base_tok = models.load_tokenizer(ALIAS)
    base_tok.chat_template = None
    lm = random_model("tiny-llama", tokenizer=base_tok, seed=0, device="cpu")
    be = LocalBackend(lm)
    assert not be.is_chat
    with pytest.raises(ValueError, match="no chat template"):
        be.score_options([DBG_AB.build("q", "a", "b")], ["A", "B"])


def test_batched_greedy_generation_equals_one_at_a_time(tiny):
    prompts = _prompts()[1:3] + _prompts()[5:7]  # chat and few-shot, different lengths
    params = GenerationParams(max_new_tokens=8)
    batched = tiny.generate(prompts, params)
    for p, b in zip(prompts, batched, strict=True):
        assert tiny.generate([p], params)[0].text == b.text
    assert all(g.completion_tokens > 0 and g.prompt_tokens > 0 for g in batched)
    assert len({g.text for g in batched}) > 1


def test_stop_strings_cut_each_row(tiny):
    prompts = _prompts()[:3]
    full = tiny.generate(prompts, GenerationParams(max_new_tokens=8))
    word = full[0].text.split()[2]
    cut = tiny.generate(prompts, GenerationParams(max_new_tokens=8, stop=(word,)))
    assert cut[0].text == full[0].text[: full[0].text.index(word)]
    for f, c in zip(full[1:], cut[1:], strict=True):
        assert c.text == (f.text[: f.text.index(word)] if word in f.text else f.text)


def test_continuation_logprobs_batched_equal_manual(tiny):
    contexts = [Prompt.chat(("user", "What is 2+2?")), Prompt.chat(("user", "What is 2+2?")),
                Prompt.raw("Q: hi\nA:")]
    conts = ["2+2 equals 4.", "The answer is 5, obviously, and more words here.", " hello"]
    batched = tiny.continuation_logprobs(contexts, conts)
    for c, t, b in zip(contexts, conts, batched, strict=True):
        ctx = tiny.encode(c)
        cont = tiny.tokenizer(t, add_special_tokens=False).input_ids
        with torch.inference_mode():
            logp = torch.log_softmax(tiny.model(torch.tensor([ctx + cont])).logits[0].double(), -1)
        manual = [float(logp[len(ctx) - 1 + k, tok]) for k, tok in enumerate(cont)]
        assert b.n_tokens == len(cont)
        assert b.logprobs == pytest.approx(manual, abs=1e-4)
        assert math.isfinite(b.perplexity) and b.perplexity > 1
    empty = tiny.continuation_logprobs([contexts[0]], [""])[0]
    assert empty.error == "empty continuation" and math.isnan(empty.perplexity)


def test_token_batches_respect_budget_and_cover_everything():
    lengths = [5, 50, 7, 300, 20, 20, 1]
    batches = token_batches(lengths, token_budget=100, max_batch=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 100
    assert batches[0] == [3]  # longest first, alone when over budget


def test_resolve_rejects_unknown_specs(tmp_path):
    with pytest.raises(models.ModelNotFound, match="unknown model"):
        models.resolve("no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(models.ModelNotFound, match=r"without config\.json"):
        models.resolve(tmp_path / "empty")
    with pytest.raises(models.ModelNotFound, match="does not exist"):
        models.resolve(tmp_path / "x.gguf")
    assert models.resolve("org/name").kind == "hf"  # a hub id is resolved, never fetched here


def test_file_sha256_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGEBIAS_MODEL_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "w.gguf"
    f.write_bytes(b"weights")
    import hashlib
    assert models.file_sha256(f) == hashlib.sha256(b"weights").hexdigest()
    assert (tmp_path / "cache" / "fingerprints.json").exists()


def test_attention_summary_matches_eager_output_attentions(tiny):
    from judgebias.engine import attention
    from judgebias.tables.records import Pair

    pair = Pair(pair_id="p", prompt="Name a color.", response_a="Blue, like the sky.", response_b="dog")
    (ab,) = attention.summarize(tiny, [pair], DBG_AB, order="ab")
    (ba,) = attention.summarize(tiny, [pair], DBG_AB, order="ba")
    assert len(ab.per_layer["a"]) == len(ab.per_layer["b"]) == 2
    assert all(0 < x < 1 for x in ab.per_layer["a"] + ab.per_layer["b"])
    assert ab.per_layer != ba.per_layer  # position matters to the judge
    # Reference: full eager attentions of a fresh model load, final row, head mean, span mean.
    prompt = DBG_AB.build(pair.prompt, pair.response_a, pair.response_b)
    rendered = tiny.render(prompt)
    enc = tiny.tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    tiny.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            att = tiny.model(torch.tensor([enc["input_ids"]]), output_attentions=True).attentions
    finally:
        tiny.model.set_attn_implementation("sdpa")
    span_a, _ = attention.char_spans(rendered, DBG_AB.markers, pair.response_a, pair.response_b)
    idx = attention.token_indices(enc["offset_mapping"], span_a)
    assert tiny.tokenizer.decode([enc["input_ids"][i] for i in idx]).strip() == pair.response_a
    expected = [float(layer[0, :, -1, idx].mean()) for layer in att]
    assert ab.per_layer["a"] == pytest.approx(expected, rel=1e-4)
    assert tiny.model.config._attn_implementation == "sdpa"


def test_shared_prefix_reuse_is_exact(tiny):
    # Both orders of each pair: they also share the query after the template's shared instructions.
    prompts = _prompts() + [DBG_AB.build(q, b, a) for q, a, b in QUERIES]
    chat, fewshot = prompts[:4], prompts[4:8]
    for group in (chat, fewshot):
        encoded = [tiny.encode(p) for p in group]
        size, _ = tiny._shared_prefix(encoded)
        assert size >= 16 and all(e[:size] == encoded[0][:size] for e in encoded)
    chat_both = prompts[:4] + prompts[8:]
    encoded = [tiny.encode(p) for p in chat_both]
    start = tiny._shared_prefix(encoded)[0]
    groups = pair_groups([encoded[i] for i in (0, 4, 1, 2)], start, MIN_SHARED_PREFIX)
    assert [(m, s > 0) for m, s in groups] == [([0, 1], True), ([2], False), ([3], False)]
    plain = LocalBackend(tiny.loaded, token_budget=tiny.token_budget, max_batch=tiny.max_batch,
                         reuse_prefix=False)
    assert tiny.reuse_prefix and not plain.reuse_prefix
    for group in (prompts, chat_both):  # mixed: per-batch groups only; chat: global prefix + pairs
        reused, recomputed = tiny.score_options(group, ["A", "B"]), plain.score_options(group, ["A", "B"])
        for a, b in zip(reused, recomputed, strict=True):
            assert abs(a.probs["A"] - b.probs["A"]) < 1e-4 and abs(a.mass - b.mass) <= 1e-4 * b.mass


TINY_GEMMA3 = dict(
    model_type="gemma3_text", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=49152,
    layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096,
    final_logit_softcapping=30.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)


@pytest.mark.parametrize("window, reused", [(4096, True), (48, False)], ids=["fits-window", "exceeds-window"])
def test_sliding_window_models_reuse_prefixes_only_inside_the_window(tokenizer, monkeypatch, window, reused):
    # Gemma 3 attends within a sliding window in most layers: a reused prefix is exact while every
    # prompt fits the window (windowed = full attention there), and is left off beyond it.
    lm = random_model(dict(TINY_GEMMA3, sliding_window=window), tokenizer=tokenizer, seed=0,
                             device="cpu", initializer_range=0.2)
    fast = LocalBackend(lm, token_budget=512, max_batch=3)
    plain = LocalBackend(lm, token_budget=512, max_batch=3, reuse_prefix=False)
    assert fast.reuse_prefix and fast.window == window
    prompts = [DBG_AB.build(*q) for q in QUERIES] + [DBG_AB.build(q, b, a) for q, a, b in QUERIES]
    assert min(len(fast.encode(p)) for p in prompts) > 48
    calls = []
    shared = LocalBackend._shared_prefix
    monkeypatch.setattr(LocalBackend, "_shared_prefix",
                        lambda self, rows: calls.append(shared(self, rows)) or calls[-1])
    got = fast.score_options(prompts, ["A", "B"])
    assert (calls[0] is not None) == reused
    for a, b in zip(got, plain.score_options(prompts, ["A", "B"]), strict=True):
        assert abs(a.probs["A"] - b.probs["A"]) < 1e-4 and abs(a.mass - b.mass) <= 1e-4 * b.mass


def test_bench_runs_all_modes_on_a_tiny_model(monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model=None, arch="tiny-llama", n_pairs=2, prompt_tokens=0, explain_pairs=1,
                                 explain_tokens=4, modes=["batched", "unbatched", "explain"], device="cpu",
                                 token_budget=None, batch_size=8)
    modes = report["modes"]
    assert set(modes) == {"batched", "unbatched", "explain"}
    assert modes["unbatched"]["verdict_agreement_with_batched"] == 1.0
    assert modes["unbatched"]["max_abs_p_diff"] < 1e-4
    assert all(m["pairs_per_s"] > 0 and m["tflops"] > 0 for m in modes.values())
    assert modes["unbatched"]["batched_speedup"] == pytest.approx(
        modes["batched"]["pairs_per_s"] / modes["unbatched"]["pairs_per_s"])
    table = bench.markdown(report)
    assert "| batched | float32 |" in table and "not measured" in table
    from judgebias.bench.hardware import gpu_peak_tflops

    assert gpu_peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert gpu_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_peak_tflops("NVIDIA H200") == 989.0 and gpu_peak_tflops("Some GPU") is None


def test_bench_pairs_stay_distinct_past_the_bundled_rows():
    # The engine computes identical prompts once: with 78 bundled rows, the old pairing repeated
    # every pair from the 79th on, and a 512-pair GPU run counted 1024 prompts while computing 156.
    from judgebias.bench.throughput import bench_pairs

    pairs = bench_pairs(400, 0, None, None)
    assert len({(p.prompt, p.response_a, p.response_b) for p in pairs}) == 400
    assert all(p.response_a != p.response_b for p in pairs)
    assert [p.human for p in pairs[:4]] == [("a",), ("b",), ("a",), ("b",)]


def test_bench_separates_the_dtype_gain_from_the_batching_gain(monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model=None, arch="tiny-llama", n_pairs=3, prompt_tokens=0, explain_pairs=1,
                                 explain_tokens=4, modes=["batched", "unbatched"], device="cpu",
                                 token_budget=None, batch_size=8, dtype="bfloat16")
    modes = report["modes"]
    assert report["dtype"] == "bfloat16" and report["baseline_dtype"] == "float32"
    assert [(m, r["dtype"]) for m, r in modes.items()] == [
        ("batched", "bfloat16"), ("unbatched", "float32"), ("unbatched-bfloat16", "bfloat16")]
    # The same weights cast: bf16 rounding moves P(A) a little, never flips it wholesale.
    assert 0 < modes["unbatched"]["max_abs_p_diff"] < 0.05
    assert modes["unbatched-bfloat16"]["max_abs_p_diff"] < 0.05
    assert "| unbatched-bfloat16 | bfloat16 |" in bench.markdown(report)


def test_packaged_model_loads_as_plain_weights_in_any_dtype():
    # The dequantized copy must not drag GGUF's quantizer along (it warned that bf16 made its
    # packed kernels cast every matmul, which these plain weights never use).
    full = models.load_model(ALIAS, device="cpu")
    half = models.load_model(ALIAS, device="cpu", dtype="bfloat16")
    assert not hasattr(half.model.config, "quantization_config")
    assert half.identity["weights_sha256"] == full.identity["weights_sha256"]
    ref = full.model.state_dict()
    assert all(torch.equal(ref[k].to(torch.bfloat16), v) for k, v in half.model.state_dict().items())
