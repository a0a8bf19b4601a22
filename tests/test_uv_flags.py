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
                "find-links": "/opt/wheels", "constraint": "/etc/caps.txt", "cert": "/etc/ca.pem",
                "timeout": "180"}
    assert uv_flags.uv_flags(settings) == [
        "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
        "--find-links", "/opt/wheels", "--constraint", "/etc/caps.txt",
        "--index-strategy", "unsafe-best-match",
        "UV_INDEX_URL=https://mirror.example/simple", "SSL_CERT_FILE=/etc/ca.pem"]
    assert uv_flags.uv_flags({"no-index": "true"})[:1] == ["--no-index"]


def test_reads_pips_merged_settings_with_the_environment_winning(uv_flags, tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /from/global\nextra-index-url = file:///x/simple\n"
                    "[install]\nconstraint = /from/install.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/env")
    settings = uv_flags.pip_settings(sys.executable)
    assert settings["find-links"] == "/from/env"
    assert settings["constraint"] == "/from/install.txt"
    assert settings["extra-index-url"] == "file:///x/simple"
    flags = uv_flags.uv_flags(settings)
    assert flags[flags.index("--find-links") + 1] == "/from/env"
