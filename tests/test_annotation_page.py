"""The labelling page an annotator sees, in a real Label Studio rendered by a headless Chromium:
the responses' markdown reads as formatted text, a hostile response stays text (nothing runs), and
the two responses get the width the unused Regions panel took (issue 45: it kept 22%)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

MARKDOWN = ("## Plan\n\nHere is **the answer**:\n\n1. first step\n2. second step\n\n"
            "```python\nprint('<b>')\n```\n")
HOSTILE = ("<script>window.__jbxss=1</script> <img src=x onerror=\"window.__jbxss=2\"> "
           "[click me](javascript:window.__jbxss=3) <a href=\"javascript:window.__jbxss=4\">link</a> end")


def test_the_labelling_page_renders_markdown_inertly_at_full_width(ls_server, tmp_path):
    pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="dev extra PyQt6-WebEngine not installed")
    from judgebias.annotation.labelstudio import LabelStudioClient
    from judgebias.annotation.store import Ledger

    client = LabelStudioClient(ls_server.settings)
    ledger = Ledger(tmp_path / "labels.sqlite")
    chosen = pd.DataFrame([{"pair_id": "page-1", "pair_key": "pk-page-1", "prompt": "Explain **X**",
                            "response_a": MARKDOWN, "response_b": HOSTILE}])
    pushed = client.push(chosen, ledger, project_title="judgebias page check", seed=1)
    task_id = int(ledger.tasks()["task_id"].iloc[0])
    url = f"{ls_server.url}/projects/{pushed.project_id}/data?tab=&task={task_id}"
    shot = tmp_path / "task.png"
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("render_ls_task.py")), ls_server.url,
                           ls_server.username, ls_server.password, url, str(shot)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen["columns"]) == 2, seen.get("text", "")[:2000]
    # Formatted: a heading, bold, a numbered list with its numbers; no markdown noise.
    assert {"h2", "strong", "ol", "li", "pre"} <= set(seen["tags"])
    assert seen["list_style"] == ["decimal", "decimal"]
    assert "## Plan" not in seen["text"] and "**the answer**" not in seen["text"]
    # Inert: the hostile markup is shown as text, and none of it became an element or ran.
    assert "<script>window.__jbxss=1</script>" in seen["text"]
    assert not {"script", "img", "a", "iframe"} & set(seen["tags"]) and seen["xss"] is None
    # Full width: the Regions panel is hidden and its room given to the texts.
    assert seen["side"] == {"width": 0, "display": "none"}
    assert sum(seen["columns"]) >= 0.95 * seen["page"]
