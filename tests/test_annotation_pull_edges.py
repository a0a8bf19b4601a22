"""``annotate pull`` against a REAL Label Studio server in two states a user meets: right after a push
(no label yet: it said "the population is empty" and failed), and with annotations whose values the
labelling config does not offer (a choice it lacks, several choices for one pair: dropped or cut
without a word)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_annotation_selection import scenario_table

from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger
from judgebias.tables.files import write_table

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(find_label_studio() is None and not os.environ.get("CI"),
                       reason="label-studio not installed (scripts/labelstudio_install.sh)"),
]


def _annotate(sdk, task_id: int, choices: list[str]) -> int:
    result = [{"from_name": "preference", "to_name": "prompt", "type": "choices",
               "value": {"choices": choices}}]
    return int(sdk.annotations.create(id=task_id, result=result, was_cancelled=False).id)


def test_pull_right_after_a_push_and_with_values_the_config_does_not_offer(ls_server, tmp_path):
    from judgebias.annotation.labelstudio import LabelStudioClient

    table = write_table(scenario_table(), tmp_path / "judgments.jsonl")
    env = {**os.environ, "LABEL_STUDIO_URL": ls_server.settings.url,
           "LABEL_STUDIO_API_KEY": ls_server.settings.api_key,
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}

    def annotate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "judgebias", "annotate", *args], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=600)

    pushed = annotate("push", str(table), "--judge", "J", "--budget", "10",
                      "--project-title", "judgebias pull edges")
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    first = annotate("pull", str(table), "--judge", "J")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "no drawn pair labelled yet (6 drawn)" in first.stdout
    assert "Traceback" not in first.stderr and "population is empty" not in first.stdout + first.stderr

    tasks = Ledger(tmp_path / "judgments.labels.sqlite").tasks().sort_values("pair_id")
    sdk = LabelStudioClient(ls_server.settings)._ls
    ids = [int(t) for t in tasks["task_id"]]
    good = _annotate(sdk, ids[0], ["left"])
    several = _annotate(sdk, ids[1], ["left", "right"])
    unknown = _annotate(sdk, ids[2], ["maybe"])
    second = annotate("pull", str(table), "--judge", "J")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    lines = [line for line in second.stdout.splitlines() if line.startswith("not counted:")]
    assert len(lines) == 1 and lines[0].startswith("not counted: 2 annotation(s)"), second.stdout[-3000:]
    assert f"annotation {several}: several choices ['left', 'right']" in lines[0]
    assert f"annotation {unknown}: unknown choice 'maybe'" in lines[0]
    assert f"annotation {good}" not in lines[0]
    assert "pulled: new 1" in second.stdout
