"""The suite's worker groups hold (README's test command runs `-n 2 --dist loadgroup`): tests sharing
a costly fixture must meet on one worker. With pytest 9.2 and pytest-xdist 3.8 the groups were ignored
without a word (every group split over both workers, the tiny experiment built twice); this runs a
small session of its own and fails if that comes back."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_tests_of_one_group_run_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent("""
        import os
        import pytest

        @pytest.mark.parametrize("i", range(6))
        @pytest.mark.xdist_group("shared")
        def test_grouped(i):
            with open("workers.txt", "a") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

        @pytest.mark.parametrize("i", range(6))
        def test_free(i):
            pass
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                          "--dist", "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_a_module_fixture_makes_its_module_one_group():
    from conftest import WORKER_GROUPS, worker_group

    class Def:
        def __init__(self, scope):
            self.scope = scope

    class Item:
        def __init__(self, nodeid, fixtures, scopes):
            self.nodeid, self.fixturenames = nodeid, fixtures
            self._fixtureinfo = type("Info", (), {"name2fixturedefs": {
                f: [Def(s)] for f, s in zip(fixtures, scopes, strict=True)}})

    assert worker_group(Item("tests/test_a.py::t", ["tmp_path", "server"], ["function", "module"])) \
        == "tests/test_a.py"
    assert worker_group(Item("tests/test_a.py::t", ["tmp_path"], ["function"])) is None
    assert worker_group(Item("tests/test_b.py::t", ["experiment_run", "srv"], ["session", "module"])) \
        == WORKER_GROUPS[0][0]


def test_the_longest_free_tests_go_first_and_groups_keep_their_order():
    from types import SimpleNamespace

    from conftest import longest_first

    names = ("a::g1", "a::fast", "b::g2", "b::slow", "c::new", "c::slower")
    items = [SimpleNamespace(nodeid=n) for n in names]
    ordered = longest_first(items, {"a::g1", "b::g2"}, {"a::fast": 0.5, "b::slow": 3.0, "c::slower": 9.0})
    # groups first in file order; then 9.0, 3.0, 0.5 s; an unrecorded test counts as 0 s
    assert [i.nodeid for i in ordered] == ["a::g1", "b::g2", "c::slower", "b::slow", "a::fast", "c::new"]


def test_recorded_durations_name_tests_of_this_suite():
    import json

    from conftest import DURATIONS

    recorded = json.loads(DURATIONS.read_text())
    files = {nodeid.split("::")[0] for nodeid in recorded}
    assert recorded and all((DURATIONS.parents[1] / f).is_file() for f in files), files
    assert all(seconds >= 1.0 for seconds in recorded.values())


def test_a_worker_uses_its_share_of_the_cores():
    import os

    import pytest
    import torch
    from conftest import THREAD_SHARE

    from judgebias.coverage.runner import usable_cores

    if THREAD_SHARE is None:
        pytest.skip("not under xdist, or OMP_NUM_THREADS set beforehand: kept as given")
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    assert max(1, usable_cores() // workers) == THREAD_SHARE
    assert torch.get_num_threads() == THREAD_SHARE and os.environ["OMP_NUM_THREADS"] == str(THREAD_SHARE)
