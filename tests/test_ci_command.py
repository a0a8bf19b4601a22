"""CI runs exactly the README's test command, and that command records where the suite's time goes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readmes_test_command():
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    (readme,) = [b.strip() for b in blocks if "pytest" in b]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if "pytest" in line and not line.lstrip().startswith("#")]
    assert ci == [readme]
    # The 30 slowest tests' setup, call and teardown times end every CI log (pytest's --durations).
    assert re.search(r"-m pytest .*--durations=30\b", readme), readme
