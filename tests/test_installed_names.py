"""What an environment with judgebias installed can import: the adapters kept at the repository's
top (flows/, tasks/, tracking/, annotation/) and the command line only under the project's own name,
so a user's own ``cli`` or ``tasks`` package is never shadowed by ours."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    # -P and a foreign working directory: nothing of the checkout is on sys.path, only the install
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_the_adapters_and_the_cli_are_installed_under_judgebias(tmp_path):
    out = _python("import judgebias.flows.runtime.task_runners, judgebias.tasks, "
                  "judgebias.tracking.settings, "
                  "judgebias.annotation.sampling, judgebias.cli, judgebias.annotation as a; "
                  "from importlib import resources; "
                  "print(resources.files(a).joinpath('labeling_config.xml').is_file())", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"  # the package data travels with its renamed package


def test_no_common_top_level_name_is_installed(tmp_path):
    for name in ("cli", "flows", "tasks", "tracking", "annotation"):
        out = _python(f"import {name}", tmp_path)
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, f"'import {name}' worked"


def test_python_dash_m_judgebias_is_the_command_line(tmp_path):
    out = subprocess.run([sys.executable, "-P", "-m", "judgebias", "--version"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
