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
