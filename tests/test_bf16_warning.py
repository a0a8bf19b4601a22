"""bfloat16 asked for on a CPU without bf16 matmul units is said to be slow before the run starts."""

from __future__ import annotations

from typer.testing import CliRunner

from judgebias.backends import loading
from judgebias.backends.loading import slow_bf16_warning


def test_warned_only_for_bf16_on_a_cpu_without_the_units():
    assert "without AVX512-BF16 or AMX" in slow_bf16_warning("bfloat16", "cpu", [])
    # Units present, another dtype, or a GPU: nothing to say.
    assert slow_bf16_warning("bfloat16", "cpu", ["amx_bf16"]) is None
    assert slow_bf16_warning("float32", "cpu", []) is None
    assert slow_bf16_warning("auto", "cpu", []) is None
    assert slow_bf16_warning("bfloat16", "cuda", []) is None


def test_run_prints_the_warning_before_anything_starts(monkeypatch, tmp_path):
    from judgebias.cli import app

    monkeypatch.setattr(loading, "native_bf16_units", lambda: [])
    monkeypatch.setattr(loading, "default_device", lambda: "cpu")
    # A config that does not load: the command stops there, after the options are read.
    config = tmp_path / "broken.yaml"
    config.write_text("name: [unclosed\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(config), "--dtype", "bfloat16"])
    assert result.exit_code != 0
    assert "--dtype bfloat16 on a CPU without AVX512-BF16 or AMX" in result.output
