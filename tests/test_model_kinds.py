"""One model description: a config entry and the builder's spec share their kinds, dtypes and rules;
one prompt-kind mapping serves every stage."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from judgebias.backends.builder import JudgeSpec, ModelSpec
from judgebias.backends.kinds import (
    BACKENDS,
    DTYPES,
    PROMPT_KINDS,
    GenerationPromptKind,
    PromptKind,
    chat_for,
    uses_chat,
)
from judgebias.config.experiment import ConfigError, GeneratorConfig, JudgeConfig, parse_config
from judgebias.config.stages import StyleRewriteConfig

URL = "http://127.0.0.1:8000/v1"


def test_a_judge_entry_and_its_spec_agree_field_by_field():
    entry = JudgeConfig(name="j1", model="m1", dtype="bfloat16", quantize="int8", batch_size=4,
                        prompt_kind="few-shot", template="mtbench-pair")
    spec = entry.to_spec(cache_dir="/tmp/calls")
    assert type(spec) is JudgeSpec
    shared = {f.name for f in dataclasses.fields(JudgeSpec)} & set(JudgeConfig.model_fields)
    # name, model, backend, base_url, api_key_env, batch_size, dtype, quantize, option_tokenizer,
    # concurrency, rpm, tpm, template
    assert len(shared) == 13, shared
    assert {k: getattr(spec, k) for k in shared} == {k: getattr(entry, k) for k in shared}
    assert spec.chat is False and spec.cache_dir == "/tmp/calls"


def test_an_api_entry_and_its_spec_agree():
    entry = JudgeConfig(name="api", model="gpt-x", backend="openai", base_url=URL, api_key_env="MY_KEY",
                        option_tokenizer="smollm2-135m-instruct")
    spec = entry.to_spec(name="renamed")
    assert (spec.name, spec.backend, spec.base_url, spec.api_key_env, spec.option_tokenizer, spec.chat) == (
        "renamed", "openai", URL, "MY_KEY", "smollm2-135m-instruct", None)
    assert (spec.concurrency, spec.rpm, spec.tpm) == ("adaptive", None, None)
    paced = JudgeConfig(**{**entry.model_dump(), "concurrency": 16, "rpm": 500, "tpm": 200_000}
                        ).to_spec(name="renamed")
    assert (paced.concurrency, paced.rpm, paced.tpm) == (16, 500, 200_000)
    assert paced.model_key() == spec.model_key()  # how the calls go out, not what answers them


def test_concurrency_and_budgets_belong_to_api_entries_and_stay_out_of_the_run_hash():
    with pytest.raises(ValueError, match="concurrency/rpm/tpm only apply to backend 'openai'"):
        JudgeConfig(name="j", model="m", concurrency=8)
    with pytest.raises(ValueError, match="concurrency/rpm/tpm only apply to backend 'openai'"):
        ModelSpec(name="j", model="m", rpm=100)
    with pytest.raises(ValueError, match="must be 'adaptive' or a whole number"):
        ModelSpec(name="j", model="m", backend="openai", concurrency=0)
    base = {"name": "x", "dataset": {"source": "mt-bench-40", "sample": 2},
            "generators": [{"name": "g", "model": "smollm2-135m-instruct"},
                           {"name": "h", "model": "gemma-3-270m"}],
            "judges": [{"name": "j", "model": "gpt-x", "backend": "openai", "base_url": URL}]}
    paced = {**base, "judges": [{**base["judges"][0], "concurrency": 32, "rpm": 500, "tpm": 1e5}]}
    assert parse_config(base).config_hash() == parse_config(paced).config_hash()


def test_generator_and_rewriter_entries_give_plain_model_specs():
    gen = GeneratorConfig(name="g1", model="m1", batch_size=3, dtype="float32").to_spec()
    assert type(gen) is ModelSpec and (gen.name, gen.batch_size, gen.dtype) == ("g1", 3, "float32")
    rewriter = StyleRewriteConfig().to_spec()  # a rewriter has no name of its own: its model names it
    assert rewriter.name == rewriter.model == "smollm2-135m-instruct"


def test_the_config_offers_exactly_the_builders_kinds_and_dtypes():
    assert get_args(JudgeConfig.model_fields["backend"].annotation) == BACKENDS
    assert get_args(JudgeConfig.model_fields["dtype"].annotation) == DTYPES
    assert get_args(JudgeConfig.model_fields["prompt_kind"].annotation) == tuple(PROMPT_KINDS)
    assert set(get_args(GenerationPromptKind)) < set(get_args(PromptKind))


def test_a_bad_kind_names_the_field_in_the_config_and_the_model_in_the_spec():
    data = {"generators": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2"}],
            "judges": [{"name": "g1", "model": "m1", "backend": "tgi"}], "self_map": {"g1": "g1"}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "exp.yaml")
    assert info.value.problems[0].startswith("judges[0].backend: Input should be 'local', 'openai' or 'vllm'")
    with pytest.raises(ValueError, match=r"model 'j': unknown backend 'tgi'; use one of local, openai, vllm"):
        ModelSpec(name="j", model="m", backend="tgi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"model 'j': unknown dtype 'int4'"):
        ModelSpec(name="j", model="m", dtype="int4")  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "message"), [
    ({"backend": "openai", "base_url": URL, "dtype": "bfloat16"}, "dtype only applies to backend 'local'"),
    ({"backend": "vllm", "quantize": "int8"}, "quantize only applies to backend 'local'"),
    ({"backend": "local", "base_url": URL}, "base_url/api_key_env only apply to backend 'openai'"),
    ({"backend": "vllm", "base_url": URL}, "for a vLLM server use backend 'openai'"),
    ({"backend": "local", "option_tokenizer": "x"}, "option_tokenizer only applies to backend 'openai'"),
])
def test_the_entry_and_the_spec_refuse_the_same_contradictions_in_the_same_words(fields, message):
    with pytest.raises(ValueError) as from_config:
        JudgeConfig(name="j", model="m", **fields)
    with pytest.raises(ValueError) as from_spec:
        ModelSpec(name="j", model="m", **fields)
    spec_error = str(from_spec.value)
    assert spec_error.startswith("model 'j': ") and message in spec_error
    # pydantic wraps the config's message ("Value error, <message>"): the same words follow.
    assert spec_error.removeprefix("model 'j': ") in str(from_config.value)


def test_only_a_config_must_name_its_api_endpoint():
    with pytest.raises(ValueError, match="backend 'openai' needs base_url"):
        JudgeConfig(name="j", model="gpt-x", backend="openai")
    assert ModelSpec(name="j", model="gpt-x", backend="openai").base_url is None  # the client's default


class _Model:
    def __init__(self, is_chat: bool):
        self.is_chat = is_chat


def test_prompt_kind_mapping():
    assert [chat_for(k) for k in ("chat", "few-shot", "auto")] == [True, False, None]
    with pytest.raises(ValueError, match="unknown prompt kind 'fewshot'; use one of auto, chat, few-shot"):
        chat_for("fewshot")
    base, instruct, api = _Model(False), _Model(True), object()
    # "auto" leaves it to the model: a base model gets few-shot text, an API model (no is_chat) chat.
    assert [uses_chat(m) for m in (base, instruct, api)] == [False, True, True]
    # A named kind wins over the model.
    assert uses_chat(base, chat_for("chat")) is True and uses_chat(instruct, chat_for("few-shot")) is False


def test_the_judge_stage_reads_the_entrys_prompt_kind():
    from judgebias.stages.judge import judge_chat

    auto = JudgeConfig(name="a", model="m")
    few_shot = JudgeConfig(name="f", model="m", prompt_kind="few-shot")
    assert judge_chat(auto, _Model(False)) is False and judge_chat(auto, _Model(True)) is True
    assert judge_chat(few_shot, _Model(True)) is False


# --- capabilities: what the stages ask instead of a backend's name ------------------------------------
def test_each_kind_declares_its_capabilities_once():
    from judgebias.backends.kinds import CAPABILITIES, Capability, can

    assert set(CAPABILITIES) == set(BACKENDS)  # every kind declares, none is forgotten
    table = {cap: [k for k in BACKENDS if can(k, cap)] for cap in get_args(Capability)}
    every = ["local", "openai", "vllm"]
    assert table == {"generation": every, "option_logprobs": every, "perplexity": ["local", "vllm"],
                     "attention": ["local"], "finetune": ["local"], "in_process": ["local"]}
    with pytest.raises(ValueError, match="unknown capability 'logits'; use one of generation, "):
        can("local", "logits")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown backend 'tgi'"):
        can("tgi", "generation")


def test_a_spec_and_an_entry_answer_from_the_same_table_and_a_factory_gets_the_protocols_only():
    for kind, extra in (("local", {}), ("vllm", {}), ("openai", {"base_url": URL})):
        entry = JudgeConfig(name="j", model="m", backend=kind, **extra)
        spec = ModelSpec(name="j", model="m", backend=kind, **extra)
        for cap in ("generation", "perplexity", "attention", "finetune", "in_process"):
            assert entry.can(cap) == spec.can(cap) == entry.to_spec().can(cap), (kind, cap)
    built = ModelSpec(name="j", model="m", factory="my_judges:build")  # backend "local" by default
    assert [built.can(c) for c in ("generation", "option_logprobs", "perplexity", "in_process")] == [
        True, True, False, False]
    with pytest.raises(ValueError, match="unknown capability"):
        built.can("logits")  # type: ignore[arg-type]


def test_the_flow_plans_each_analysis_on_the_judges_that_can_do_it(tmp_path):
    import yaml

    from judgebias.config.experiment import load_config

    data = {"generators": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2", "backend": "vllm"}],
            "judges": [{"name": "g1", "model": "m1", "dtype": "bfloat16"},
                       {"name": "g2", "model": "m2", "backend": "vllm", "dtype": "bfloat16"},
                       {"name": "api", "model": "gpt-x", "backend": "openai", "base_url": URL}],
            "self_map": {"g1": "g1", "g2": "g2"}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    assert cfg.pairwise_judges_that_can("perplexity") == ["g1", "g2"]  # vLLM gives prompt log-probs
    assert cfg.pairwise_judges_that_can("attention") == cfg.pairwise_judges_that_can("in_process") == ["g1"]
    assert cfg.local_models() == ["m1"]  # only in-process weights are prepared ahead
    # `judgebias run --dtype` sets in-process models only; the vLLM entry keeps its own.
    again = load_config(path, {"local_dtype": "float32"})
    assert [j.dtype for j in again.judges] == ["float32", "bfloat16", "auto"]


def test_dtype_fidelity_is_asked_of_in_process_judges_only(tmp_path):
    from judgebias.config.experiment import parse_config
    from judgebias.runs.store import RunStore
    from judgebias.stages.judge import dtype_fidelity

    cfg = parse_config({"generators": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2"}],
                        "judges": [{"name": "g1", "model": "m1", "backend": "vllm", "dtype": "bfloat16"}],
                        "self_map": {"g1": "g1"}}, "exp.yaml")
    import pandas as pd
    # A vLLM judge in bf16 has no in-process weights to re-score in float32: no stage, no model load.
    assert dtype_fidelity(cfg, RunStore(tmp_path), "g1", pd.DataFrame()) is None


def test_finetune_refuses_a_generator_that_cannot_be_finetuned(tmp_path):
    from judgebias.config.experiment import parse_config
    from judgebias.runs.store import RunStore
    from judgebias.stages.finetune import finetune_generator

    cfg = parse_config({"generators": [{"name": "g1", "model": "m1", "backend": "vllm"},
                                       {"name": "g2", "model": "m2"}],
                        "judges": [{"name": "g1", "model": "m1"}], "self_map": {"g1": "g1"},
                        "run_dir": str(tmp_path / "runs")}, "exp.yaml")
    with pytest.raises(ValueError, match="generator 'g1' runs on backend 'vllm', which cannot be fine-tuned"):
        finetune_generator(cfg, RunStore(tmp_path / "run"), "g1")


def _doc_blocks() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "judges.md").read_text()
    section = text.split("## Your own backend (`factory`)", 1)[1]
    return [b.split("\n", 1)[1] for b in section.split("```python")[1:3]]


def test_the_documented_factory_example_runs_as_written(tmp_path, monkeypatch, capsys):
    module, usage = (b.split("```", 1)[0] for b in _doc_blocks())
    (tmp_path / "my_judges.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    exec(compile(usage, "docs/judges.md", "exec"), {})  # the doc's own example, as written
    printed = capsys.readouterr().out
    # Shown in both orders: A="Hi!" shorter -> P(A) 0.9; swapped, the shorter is B -> P(A) 0.1, i.e.
    # 0.9 for the original A once folded back: verdict "a" (the response listed as A).
    assert printed.split() == ["pair_id", "p_a", "verdict", "0", "p1", "0.9", "a"], printed
    from judgebias.backends.builder import ModelSpec, build_backend

    spec = ModelSpec(name="shorter", model="shorter@1", factory="my_judges:build")
    assert build_backend(spec).identity() == {"backend": "shorter", "model": "shorter@1"}
    with pytest.raises(ValueError, match="factory 'no_such_module:build' cannot be imported"):
        build_backend(ModelSpec(name="x", model="y", factory="no_such_module:build"))
