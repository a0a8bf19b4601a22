"""Experiment config: every mistake is an error naming its key path; nothing unknown passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from judgebias.config.experiment import ConfigError, demo_config_path, load_config, parse_config
from judgebias.tracking.params import flatten

ROOT = Path(__file__).resolve().parents[1]


def minimal(**extra) -> dict:
    cfg = {
        "generators": [
            {"name": "g1", "model": "m1"},
            {"name": "g2", "model": "m2", "prompt_kind": "few-shot"},
        ],
        "judges": [{"name": "g1", "model": "m1"}, {"name": "g2", "model": "m2"}],
        "self_map": {"g1": "g1", "g2": "g2"},
    }
    cfg.update(extra)
    return cfg


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "exp.yaml")
    assert str(info.value).startswith("exp.yaml: invalid experiment config")
    return info.value.problems


def test_minimal_config_gets_defaults():
    cfg = parse_config(minimal())
    assert cfg.gold.panel == "all-others"
    assert cfg.judges[0].template == "dbg-ab"
    assert cfg.task_runner.kind == "thread"
    assert cfg.gold_panel("g1") == ["g2"]
    assert cfg.gold_panel("g1", exclude=("g2",)) == []


def test_unknown_keys_are_rejected_with_their_path():
    data = minimal()
    data["judges"][1]["bach_size"] = 4
    data["judgs"] = []
    assert problems(data) == [
        "judges[1].bach_size: unknown key (not part of the experiment config)",
        "judgs: unknown key (not part of the experiment config)",
    ]


def test_bad_values_name_the_key_path():
    data = minimal(
        ablations={"style_rewrite": {"styles": ["attractive", "sarcastic"]}, "finetune": {"lora": {"r": 0}}}
    )
    data["judges"][1]["backend"] = "sglang"  # not a backend (vllm is one since issue 33)
    data["generators"][0]["max_new_tokens"] = -1
    found = problems(data)
    assert any(p.startswith("generators[0].max_new_tokens: ") for p in found), found
    expected = "judges[1].backend: Input should be 'local', 'openai' or 'vllm'"
    assert any(p.startswith(expected) for p in found), found
    assert any(p.startswith("ablations.style_rewrite.styles[1]: ") for p in found), found
    assert any(p.startswith("ablations.finetune.lora.r: ") for p in found), found


def test_api_judge_needs_base_url_and_env_name_not_a_key():
    data = minimal()
    data["judges"][1] = {"name": "g2", "model": "gpt-x", "backend": "openai"}
    assert problems(data) == ["judges[1]: backend 'openai' needs base_url"]
    data["judges"][1].update(base_url="http://127.0.0.1:8000/v1", api_key_env="sk-secret")
    assert problems(data)[0].startswith("judges[1].api_key_env: String should match pattern")


def test_dtype_is_a_local_setting_and_part_of_the_hash():
    data = minimal()
    data["judges"][0]["dtype"] = "bfloat16"
    cfg = parse_config(data)
    assert cfg.judges[0].dtype == "bfloat16" and cfg.judges[1].dtype == "auto"
    assert cfg.config_hash() != parse_config(minimal()).config_hash()
    data["judges"][0]["dtype"] = "int4"
    assert problems(data)[0].startswith("judges[0].dtype: Input should be 'auto', 'float32'")
    data["judges"][0] = {"name": "g1", "model": "gpt-x", "backend": "openai",
                         "base_url": "http://127.0.0.1:8000/v1", "dtype": "bfloat16"}
    assert problems(data) == ["judges[0]: dtype only applies to backend 'local'"]


def test_local_dtype_override_sets_every_local_model_and_leaves_api_models(tmp_path):
    data = minimal()
    data["judges"].append({"name": "api", "model": "gpt-x", "backend": "openai",
                           "base_url": "http://127.0.0.1:8000/v1"})
    data["ablations"] = {"style_rewrite": {"enabled": True, "model": "m1"}}
    data["generators"][0]["dtype"] = "float32"  # the override wins over the file
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path, {"local_dtype": "bfloat16", "dataset": {"sample": 3}})
    assert [g.dtype for g in cfg.generators] == ["bfloat16", "bfloat16"]
    assert [j.dtype for j in cfg.judges] == ["bfloat16", "bfloat16", "auto"]
    assert cfg.ablations.style_rewrite.dtype == "bfloat16" and cfg.dataset.sample == 3
    assert cfg.config_hash() != load_config(path, {"dataset": {"sample": 3}}).config_hash()


def test_cross_references_name_each_bad_key():
    data = minimal(self_map={"g1": "g1", "ghost": "g2", "g2": "nope"}, gold={"panel": ["g1", "zed"]})
    assert problems(data) == [
        "self_map.ghost: no judge named 'ghost' (judges: ['g1', 'g2'])",
        "self_map.g2: no generator named 'nope' (generators: ['g1', 'g2'])",
        "gold.panel[1]: no judge named 'zed'",
    ]


def test_duplicate_names_and_unknown_template():
    data = minimal()
    data["generators"][1]["name"] = "g1"
    data["judges"][0]["template"] = "my-template"
    found = problems(data)
    assert any(p.startswith("judges[0].template: unknown judge template 'my-template'") for p in found), found


def test_finetune_needs_two_base_models():
    data = minimal(ablations={"finetune": {"enabled": True, "generators": ["g1"]}})
    assert problems(data) == [
        "ablations.finetune.generators: the ablation fine-tunes two different base "
        "models on the same data; name at least two generators"
    ]


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("generators: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid experiment config\n  not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="file does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_hash_ignores_tracking_and_ablations_but_not_models(tmp_path):
    base = parse_config(minimal())
    moved = parse_config(
        minimal(
            tracking={"experiment": "other"},
            run_dir=str(tmp_path),
            cache_dir="/x",
            ablations={"style_rewrite": {"enabled": True, "sample": 3}},
        )
    )
    assert base.config_hash() == moved.config_hash()
    assert base.ablation_hash("style_rewrite") != moved.ablation_hash("style_rewrite")
    changed = minimal()
    changed["generators"][0]["max_new_tokens"] = 7
    assert parse_config(changed).config_hash() != base.config_hash()


def test_flatten_drops_secret_env_names_and_keeps_the_rest():
    data = minimal()
    data["judges"][1] = {
        "name": "g2",
        "model": "gpt-x",
        "backend": "openai",
        "base_url": "http://h/v1",
        "api_key_env": "OPENAI_API_KEY",
    }
    flat = flatten(parse_config(data))
    assert flat["judges.1.base_url"] == "http://h/v1"
    assert flat["judges.0.batch_size"] == "8"
    assert not any("api_key" in k or "OPENAI_API_KEY" in v for k, v in flat.items())
    assert not any(k.endswith("url_env") for k in flat)


def test_bundled_demo_config_is_valid_and_is_the_one_in_configs():
    cfg = load_config(demo_config_path())
    assert {g.model for g in cfg.generators} == {"smollm2-135m-instruct", "gemma-3-270m"}
    assert cfg.ablations.style_rewrite.enabled and cfg.ablations.finetune.enabled
    # One file: configs/demo.yaml links to the packaged one (a wheel needs it inside the package).
    assert (ROOT / "configs" / "demo.yaml").resolve() == demo_config_path().resolve()


def test_overrides_are_validated_too():
    with pytest.raises(ConfigError, match=r"dataset\.sample: Input should be greater than or equal to 1"):
        load_config(demo_config_path(), {"dataset": {"sample": 0}})


def test_cli_run_reports_config_errors_with_key_paths(tmp_path):
    from typer.testing import CliRunner

    from judgebias.cli import app

    bad = tmp_path / "exp.yaml"
    data = minimal()
    data["judges"][0]["batch_size"] = 0
    bad.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    assert "judges[0].batch_size: Input should be greater than or equal to 1" in result.output


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    cfg = load_config(path)
    for judge in cfg.self_map:
        assert cfg.gold_panel(judge), f"{path.name}: judge {judge} has no gold panel"


def test_cluster_by_reaches_the_results_hash_only_when_set():
    base = parse_config(minimal())
    assert base.analyses.cluster_by is None and "cluster_by" not in base.results_part()["analyses"]
    flat = parse_config(minimal(analyses={"cluster_by": "none"}))
    assert flat.analyses.cluster_by == "none" and flat.config_hash() != base.config_hash()
    with pytest.raises(ConfigError):
        parse_config(minimal(analyses={"cluster_by": ""}))
