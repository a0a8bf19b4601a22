"""The CI snippets of docs/watch.md run: every ``judgebias`` command of the GitHub Actions job and of the
GitLab job, in a shell, on the bundled LLMBar table as ``JUDGED_TABLE``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from judgebias.bundled import BUNDLED

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "watch.md"


def _snippets() -> dict[str, list[str]]:
    blocks = [
        yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    ]
    github = next(b for b in blocks if "jobs" in b)
    gitlab = next(b for b in blocks if "judge-gate" in b)
    steps = [s["run"] for s in github["jobs"]["gate"]["steps"] if "run" in s]
    return {"github": steps, "gitlab": gitlab["judge-gate"]["script"]}


@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_ci_snippet_runs(ci, tmp_path):
    commands = [c for c in _snippets()[ci] if c.startswith("judgebias ")]
    assert [c.split()[1] for c in commands] == ["analyze", "gate"]
    shim = tmp_path / "bin" / "judgebias"  # the installed console script, for this checkout
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m judgebias "$@"\n')
    shim.chmod(0o755)
    llmbar = next(b for b in BUNDLED if b.name == "llmbar-natural")
    env = {
        **os.environ,
        "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "JUDGED_TABLE": str(llmbar.path()),
    }
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert (tmp_path / "metrics.json").is_file()
    # the same gate fails where the rule is broken: the snippet's gate is not a pass by construction
    broken = commands[-1].replace("GPT-4/Vanilla", "ChatGPT/Vanilla")
    done = subprocess.run(["bash", "-c", broken], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "FAIL [ChatGPT/Vanilla] no caution on verbosity_bias" in done.stdout
