"""Judge names from a third-party table are data, never paths, terminal commands or HTML: analyze on
a table whose judges are named like an attack writes every figure, inside its folder, one file each,
and prints and renders the names as inert text."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

HOSTILE = ["..", "../x", "a/b", "a_b", "n" * 300, "nul\x00name", "\x1b]0;owned\x07\x1b[2Jclear",
           "<img src=x onerror=alert(1)>"]


def _table(path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        short, long = "short answer", " ".join(["a much longer answer"] * (2 + i % 5))
        a_long = i % 2 == 0
        human = ["a", "b"][rng.integers(2)]
        for judge in HOSTILE:
            rows.append({"pair_id": f"p{i}", "prompt": f"question {i}",
                         "response_a": long if a_long else short, "response_b": short if a_long else long,
                         "generator_a": "g1", "generator_b": "g2",
                         "judge": judge, "p_a": float(rng.uniform(0.05, 0.95)), "human": [human, human, "a"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_analyze_treats_hostile_judge_names_as_text(tmp_path):
    table = _table(tmp_path / "t.jsonl")
    plots = tmp_path / "plots"
    out = subprocess.run([sys.executable, "-m", "judgebias", "analyze", str(table), "--out",
                          str(tmp_path / "m.json"), "--plots-dir", str(plots), "--no-mlflow"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    # Printed names cannot drive the terminal: no escape, bell or NUL byte reaches it.
    assert not {"\x1b", "\x07", "\x00"} & set(out.stdout + out.stderr)
    assert "\\x1b]0;owned" in out.stdout
    # Every plot inside its folder, one file per judge: a/b and a_b do not overwrite each other.
    files = sorted(p for p in tmp_path.rglob("*.png"))
    assert files and all(p.parent == plots for p in files)
    verbosity = [p for p in files if p.name.startswith("verbosity_")
                 and p.name not in ("verbosity_humans.png", "verbosity_judges.png")]  # not per judge
    assert len(verbosity) == len(HOSTILE)
    assert all(len(p.name) < 120 for p in files)
    # The markdown report shows the HTML-looking name as text.
    md = (tmp_path / "m_report.md").read_text()
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md
