"""The run folder: every stage's output of one experiment, written atomically, found again on rerun.

One folder per (experiment name, config hash). A stage whose output file exists is done; a stage
killed half-way left no file (everything is written to a temporary name and moved into place), so a
rerun redoes exactly the unfinished stages, and the model-call cache makes even those cheap.
``manifest.json`` records when each stage finished and how long it took.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from judgebias.runs.diskfull import naming_full_disk
from judgebias.runs.layout import RunLayout

MANIFEST = RunLayout.manifest


@dataclass
class StageWatch:
    """What the code run inside ``watch()`` did with run folders: output it computed and wrote
    (``wrote``), output it found already there (``found``)."""

    wrote: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str | None:
        """"ran" (something was computed), "reused" (only found), or None (neither: not applicable)."""
        return "ran" if self.wrote else "reused" if self.found else None


_WATCH: contextvars.ContextVar[StageWatch | None] = contextvars.ContextVar("judgebias_stage_watch",
                                                                          default=None)


@contextlib.contextmanager
def watch() -> Iterator[StageWatch]:
    """Say whether a stage called inside computed its output or read it back (the console's
    ran/reused line); per context, so stages running in other threads are not counted."""
    w = StageWatch()
    token = _WATCH.set(w)
    try:
        yield w
    finally:
        _WATCH.reset(token)


def _saw(kind: str, name: str) -> None:
    w = _WATCH.get()
    if w is not None:
        getattr(w, kind).append(name)



def _umask() -> int:
    """The process umask, read without changing it where Linux tells it (os.umask can only set it,
    and setting it to read it races with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _as_created(path: str | Path, directory: bool = False) -> None:
    """Give a temporary file (mkstemp: 0600) or folder (mkdtemp: 0700) the mode a plain open or mkdir
    would have given it, so reports and tables can be shared like the rest of the run's outputs."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def sha256_file(path: Path, chunk: int = 8 * 2**20) -> str:
    """Hex SHA-256 of a file, read in chunks: the one digest a watch pins a table by and the one
    MLflow records as a table's dataset digest, so the two can be compared."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> Path:
    with naming_full_disk(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        _as_created(tmp)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def atomic_dir(target: Path, fill: Callable[[Path], Any]) -> Path:
    """Create folder ``target`` by letting ``fill`` write into a temporary sibling, then moving it
    into place: a process killed half-way leaves no half-written folder under the final name."""
    with naming_full_disk(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent))
        _as_created(tmp, directory=True)
        try:
            fill(tmp)
            if target.exists():  # an incomplete leftover of an interrupted run
                shutil.rmtree(target)
            tmp.replace(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def _json_default(obj: Any):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | tuple):
        return list(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


class RunStore:
    """Stage outputs of one run under ``root`` (created on first write)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def path(self, name: str) -> Path:
        return self.root / name

    def has(self, name: str) -> bool:
        present = self.path(name).exists()
        if present and name != MANIFEST:  # read by every stage that records its time
            _saw("found", name)
        return present

    # --- frames -----------------------------------------------------------------------------------
    def write_frame(self, name: str, df: pd.DataFrame) -> Path:
        _saw("wrote", name)
        path = self.path(name)
        with naming_full_disk(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
            os.close(fd)
            _as_created(tmp)
            try:
                df.to_parquet(tmp, index=False)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return path

    def read_frame(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.path(name))

    # --- json -------------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> Path:
        if name != MANIFEST:
            _saw("wrote", name)
        text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default)
        return atomic_write_text(self.path(name), text)

    def read_json(self, name: str) -> Any:
        return json.loads(self.path(name).read_text(encoding="utf-8"))

    # --- folders (adapters, plots) ----------------------------------------------------------------
    def write_dir(self, name: str, fill: Callable[[Path], Any]) -> Path:
        """Create folder ``name`` by letting ``fill`` write into a temporary sibling, then move it."""
        _saw("wrote", name)
        return atomic_dir(self.path(name), fill)

    # --- manifest ---------------------------------------------------------------------------------
    def manifest(self) -> dict:
        return self.read_json(MANIFEST) if self.has(MANIFEST) else {"stages": {}}

    def record_stage(self, stage: str, seconds: float, **info: Any) -> None:
        _saw("wrote", MANIFEST)
        m = self.manifest()
        m.setdefault("stages", {})[stage] = {"seconds": round(seconds, 3),
                                             "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                             **info}
        self.write_json(MANIFEST, m)

    def stage_seconds(self) -> dict[str, float]:
        return {k: float(v.get("seconds", 0.0)) for k, v in self.manifest().get("stages", {}).items()}
