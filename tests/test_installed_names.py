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


def test_ruff_refuses_an_import_of_a_linked_folder_by_its_bare_name(tmp_path):
    # `from tracking.x import y` works in a checkout run from its root (the folder is on sys.path) and
    # breaks in the wheel; the lint step of the README's test command refuses it (TID251).
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    probe = root / "tests" / f"_bare_import_probe_{tmp_path.name}.py"
    probe.write_text("import flows\nimport tasks.experiment\nfrom tracking.settings import x\n"
                     "from annotation import sampling\nimport judgebias.flows\n"
                     "from judgebias.tracking.settings import y\n")
    try:
        out = subprocess.run([ruff, "check", "--no-cache", "--select", "TID251", "--output-format", "concise",
                              str(probe)], capture_output=True, text=True, cwd=root, timeout=120)
    finally:
        probe.unlink()
    banned = sorted(line.split("`")[1] for line in out.stdout.splitlines() if "TID251" in line)
    assert banned == ["annotation", "flows", "tasks", "tracking"], out.stdout + out.stderr
