"""scripts/uv_flags.py: pip's settings carried over to uv, so that install.sh's switch to uv keeps the
machine's wheel folder, indexes, constraints and certificate (uv reads none of pip's configuration)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "uv_flags.py"


@pytest.fixture(scope="module")
def uv_flags():
    spec = importlib.util.spec_from_file_location("uv_flags", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_setting_becomes_its_flag_or_variable(uv_flags):
    settings = {"index-url": "https://mirror.example/simple", "extra-index-url": "file:///a/simple  file:///b/simple",
                "find-links": "https://wheels.example/", "constraint": "/etc/caps.txt", "cert": "/etc/ca.pem",
                "timeout": "180", "trusted-host": "mirror.example", "proxy": "http://proxy:3128",
                "progress-bar": "off"}
    assert uv_flags.uv_flags(settings) == [
        "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
        "--find-links", "https://wheels.example/", "--constraint", "/etc/caps.txt",
        "--allow-insecure-host", "mirror.example",
        "--index-strategy", "unsafe-best-match",
        "UV_INDEX_URL=https://mirror.example/simple", "SSL_CERT_FILE=/etc/ca.pem", "UV_HTTP_TIMEOUT=180",
        "HTTPS_PROXY=http://proxy:3128", "HTTP_PROXY=http://proxy:3128"]
    assert uv_flags.uv_flags({"no-index": "true"})[:1] == ["--no-index"]


def test_a_find_links_folder_that_is_not_there_is_skipped_as_pip_skips_it(uv_flags, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    links = f"{tmp_path / 'gone'} {wheels} file://{tmp_path / 'gone-too'} https://example.org/wheels/"
    flags = uv_flags.uv_flags({"find-links": links})
    assert flags[:4] == ["--find-links", str(wheels), "--find-links", "https://example.org/wheels/"]


def test_reads_pips_merged_settings_with_the_environment_winning(uv_flags, tmp_path, monkeypatch):
    from_env = tmp_path / "from-env"
    from_env.mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nfind-links = {tmp_path}\nextra-index-url = file:///x/simple\n"
                    "[install]\nconstraint = /from/install.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", str(from_env))
    settings = uv_flags.pip_settings(sys.executable)
    assert settings["find-links"] == str(from_env)
    assert settings["constraint"] == "/from/install.txt"
    assert settings["extra-index-url"] == "file:///x/simple"
    flags = uv_flags.uv_flags(settings)
    assert flags[flags.index("--find-links") + 1] == str(from_env)
