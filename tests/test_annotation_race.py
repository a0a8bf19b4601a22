"""Two ledgers pushing the same pairs under one project title at the same moment, against a REAL Label
Studio server (issue 34, item 4: two projects with the same pairs in 1 of 3 trials, so annotators
would label each pair twice). No lock can serialise them (the ledgers may sit in different folders or
on different machines), so the interleaving that lost is forced: each pusher waits, after listing, until
the other has listed too, then both create.
"""

from __future__ import annotations

import os
import threading

import pytest
from test_annotation_selection import scenario_table

from judgebias.annotation.keys import keyed_pairs
from judgebias.annotation.labelstudio import LabelStudioClient
from judgebias.annotation.server import find_label_studio
from judgebias.annotation.store import Ledger

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(
        find_label_studio() is None and not os.environ.get("CI"),
        reason="label-studio not installed (scripts/labelstudio_install.sh)",
    ),
]


class _AfterFirstList:
    """Wraps an SDK ``list``: its first call returns only once every racer's first call has returned."""

    def __init__(self, inner, barrier: threading.Barrier):
        self.inner, self.barrier, self.first = inner, barrier, True

    def __call__(self, *args, **kwargs):
        listed = list(self.inner(*args, **kwargs))
        if self.first:
            self.first = False
            self.barrier.wait(timeout=60)
        return listed


def _racing_client(ls_server, projects: threading.Barrier, tasks: threading.Barrier) -> LabelStudioClient:
    client = LabelStudioClient(ls_server.settings)
    client._ls.projects.list = _AfterFirstList(client._ls.projects.list, projects)
    client._ls.tasks.list = _AfterFirstList(client._ls.tasks.list, tasks)
    return client


def test_two_ledgers_pushing_one_title_at_once_make_one_project_and_one_task_per_pair(world, ls_server,
                                                                                      tmp_path):
    title = "judgebias two-ledger race"
    chosen = keyed_pairs(scenario_table()).reset_index().head(4)
    ledgers = [Ledger(tmp_path / f"ledger{i}" / "labels.sqlite") for i in range(2)]
    projects, tasks = threading.Barrier(2), threading.Barrier(2)
    clients = [_racing_client(ls_server, projects, tasks) for _ in ledgers]
    results, errors = [None, None], []

    def push(i: int) -> None:
        try:
            # Different swap seeds: each ledger must record the left/right order of the task it shares.
            results[i] = clients[i].push(chosen, ledgers[i], project_title=title, seed=i)
        except Exception as exc:  # reported below with the other thread's outcome
            errors.append(exc)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    sdk = world["sdk"]
    same_titled = [p for p in sdk.projects.list(title=title) if p.title == title]
    assert len(same_titled) == 1, f"{len(same_titled)} projects titled {title!r}"
    project = int(same_titled[0].id)
    assert {r.project_id for r in results} == {project}
    on_server = {int(t.id): t.data for t in sdk.tasks.list(project=project, fields="all")}
    assert sorted(d["pair_key"] for d in on_server.values()) == sorted(chosen["pair_key"])  # one task a pair
    for ledger in ledgers:
        recorded = ledger.tasks()
        assert set(recorded["task_id"]) == set(on_server)
        for row in recorded.itertuples():
            pair = chosen.set_index("pair_key").loc[row.pair_key]
            shown_left = on_server[row.task_id]["left"]
            assert shown_left == (pair["response_b"] if row.swapped else pair["response_a"])
