"""The CI snippets of docs/watch.md run: every ``judgebias`` command of the GitHub Actions job and of the
GitLab job, in a shell, on the bundled LLMBar table as ``JUDGED_TABLE``. The two jobs run the same
commands: each is run once (``_Shell``) and both jobs' tests assert on its results."""

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


class _Shell:
    """Runs a job's commands in a shell, one after the other in a folder; a command that already ran
    after the same commands (the other CI's job runs the same ones) is not run again: its result is
    reused, and so is the folder of the jobs that start with the same command."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.folders: dict[str, Path] = {}
        self.done: dict[tuple[str, ...], subprocess.CompletedProcess] = {}
        shim = base / "bin" / "judgebias"  # the installed console script, for this checkout
        shim.parent.mkdir()
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m judgebias "$@"\n')
        shim.chmod(0o755)
        llmbar = next(b for b in BUNDLED if b.name == "llmbar-natural")
        self.env = {
            **os.environ,
            "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "JUDGED_TABLE": str(llmbar.path()),
        }

    def run(self, commands: list[str]) -> tuple[Path, list[subprocess.CompletedProcess]]:
        """The folder and the results of ``commands``, up to the first that failed."""
        if commands[0] not in self.folders:
            self.folders[commands[0]] = self.base / f"job-{len(self.folders)}"
            self.folders[commands[0]].mkdir()
        folder, results = self.folders[commands[0]], []
        for i, command in enumerate(commands):
            key = tuple(commands[: i + 1])
            if key not in self.done:
                self.done[key] = subprocess.run(["bash", "-c", command], cwd=folder, env=self.env,
                                                capture_output=True, text=True)
            results.append(self.done[key])
            if results[-1].returncode != 0:
                break
        return folder, results


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> _Shell:
    return _Shell(tmp_path_factory.mktemp("watch-docs"))


@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_ci_snippet_runs(ci, shell):
    commands = [c for c in _snippets()[ci] if c.startswith("judgebias ")]
    assert [c.split()[1] for c in commands] == ["analyze", "gate"]
    folder, results = shell.run(commands)
    for command, done in zip(commands, results, strict=False):  # up to the first that failed
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    assert (folder / "metrics.json").is_file()
    # the same gate fails where the rule is broken: the snippet's gate is not a pass by construction
    broken = commands[-1].replace("GPT-4/Vanilla", "ChatGPT/Vanilla")
    _, (*_, done) = shell.run([*commands, broken])
    assert done.returncode == 1 and "FAIL [ChatGPT/Vanilla] no caution on verbosity_bias" in done.stdout
