"""The live processes as Linux's ``/proc`` lists them: each one's parent, process group and state,
read once per call. What a backend that runs children (vLLM's worker) needs to find them again: the
processes of a group to stop, the tree under a process to measure. Empty where there is no /proc."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    ppid: int
    pgrp: int
    state: str  # "Z": a zombie, gone but for its exit status


def process_table() -> dict[int, ProcessEntry]:
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            # After "pid (comm)", where comm may hold spaces and parentheses: state, ppid, pgrp, ...
            state, ppid, pgrp = text[text.rindex(")") + 2:].split()[:3]
            pid = int(stat.parent.name)
            table[pid] = ProcessEntry(pid, int(ppid), int(pgrp), state)
        except (OSError, ValueError):
            continue  # a process that ended meanwhile
    return table


def command_line(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces; empty once it has ended."""
    try:
        raw = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in process_table().values():
        children.setdefault(entry.ppid, []).append(entry.pid)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def group_members(pgrp: int) -> dict[int, str]:
    """The live (not zombie) processes of group ``pgrp`` and their command lines."""
    return {e.pid: command_line(e.pid) for e in process_table().values() if e.pgrp == pgrp and e.state != "Z"}
