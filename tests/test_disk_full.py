"""A full disk ends a command in one line: the file being written, what is kept, the command that
resumes; exit code 74, no traceback (Prefect's own reports of it included).

The disk is made full at the OS boundary: the bytes of one file go to Linux's /dev/full, whose every
write the kernel refuses with ENOSPC, so the library's own error (pyarrow's, matplotlib's) is what
the command meets."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shlex
import sqlite3
import stat
import sys

import pandas as pd
import pytest

from judgebias.runs.diskfull import DiskFullError, HideDiskFull, find

DEV_FULL = "/dev/full"


def _require_dev_full() -> None:
    try:
        if stat.S_ISCHR(os.stat(DEV_FULL).st_mode):
            return
    except OSError:
        pass
    pytest.skip("no /dev/full (a Linux device) here")


def _to_dev_full(monkeypatch, cls, method: str, needle: str) -> None:
    """``cls.method(path, ...)`` writes to /dev/full when ``needle`` is in ``path``. Only libraries
    that write in place go there: one that writes a temporary file and renames it over the target
    (safetensors does) would replace the device node when run as root."""
    real = getattr(cls, method)

    def write(self, path, *args, **kwargs):
        return real(self, DEV_FULL if needle in str(path) else path, *args, **kwargs)

    monkeypatch.setattr(cls, method, write)


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from judgebias.cli import main

    monkeypatch.setattr(sys, "argv", ["judgebias", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return stop.value.code, out.out, out.err


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


# --- recognition ---------------------------------------------------------------------------------
def test_a_full_disk_is_found_however_the_library_and_prefect_wrap_it():
    class SafetensorError(Exception):  # safetensors' own type: only its text says what happened
        pass

    plain = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x/a.parquet.k3j.tmp")
    assert find(plain).path == "/runs/x/a.parquet.k3j.tmp"
    wrapped = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert find(wrapped) is not None and find(wrapped).path is None
    sqlite_full = sqlite3.OperationalError("database or disk is full")
    assert find(sqlite_full) is not None

    # Raised from (a task's failure re-raised by the flow) and during (an error while cleaning up)
    # the disk's error, and inside an exception group: found, and the innermost file name kept.
    try:
        try:
            raise plain
        except OSError as exc:
            raise RuntimeError("task failed") from exc
    except RuntimeError as exc:
        chained = exc
    assert find(chained).path == "/runs/x/a.parquet.k3j.tmp"
    for cut in (False, True):
        try:
            try:
                raise wrapped
            except SafetensorError:
                if cut:
                    raise KeyError("said otherwise") from None
                raise KeyError("cleanup failed too")  # noqa: B904 (an error while handling the disk's)
        except KeyError as exc:
            during = exc
        # ``from None`` cuts the chain on purpose (as tracebacks do): the raiser chose what to say.
        assert (find(during) is None) == cut
    group = ExceptionGroup("two tasks", [ValueError("x"), RuntimeError("y")])
    assert find(group) is None
    group = ExceptionGroup("two tasks", [ValueError("x"), RuntimeError("a: No space left on device")])
    assert find(group) is not None

    # A quota is the same remedy; its own words are kept.
    assert find(OSError(errno.EDQUOT, "Disk quota exceeded")).reason == "disk quota exceeded"
    # Not a full disk: a refused permission, a missing folder, a plain bug.
    for other in (PermissionError(errno.EACCES, "Permission denied", "/x"), FileNotFoundError("/y"),
                  ValueError("bad column")):
        assert find(other) is None


def test_the_writer_names_the_file_it_was_writing_and_leaves_no_half_file(tmp_path, monkeypatch):
    _require_dev_full()
    from judgebias.runs.store import RunStore

    store = RunStore(tmp_path / "run")
    store.write_frame("pairs.parquet", pd.DataFrame({"a": [1, 2]}))
    _to_dev_full(monkeypatch, pd.DataFrame, "to_parquet", "judgments")
    with pytest.raises(DiskFullError) as raised:
        store.write_frame("judgments/ta.parquet", pd.DataFrame({"a": [1, 2]}))
    # pyarrow's error names no file; the run store's names the stage's file, not its temporary one.
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "run" / "judgments" / "ta.parquet")
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.filename is None
    assert find(raised.value).path == raised.value.filename
    import pickle  # a Dask worker's error reaches the flow pickled

    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is DiskFullError and again.filename == raised.value.filename
    assert sorted(p.name for p in (tmp_path / "run").rglob("*") if p.is_file()) == ["pairs.parquet"]


def test_prefect_reports_of_a_full_disk_are_dropped_and_others_kept():
    hide = HideDiskFull("prefect")

    def record(name: str, msg: str, exc: BaseException | None = None) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None,
                                 (type(exc), exc, None) if exc else None)

    full = OSError(errno.ENOSPC, "No space left on device")
    assert not hide.filter(record("prefect.task_runs", "Task run failed with exception", full))
    assert not hide.filter(record("prefect.flow_runs", "Finished in state Failed('OSError: [Errno 28] "
                                                       "No space left on device')"))
    assert hide.filter(record("prefect.task_runs", "Task run failed with exception", ValueError("x")))
    # Another library's record is not Prefect's to drop.
    assert hide.filter(record("mlflow.store", "No space left on device", full))


def test_the_resume_command_is_one_the_user_can_paste():
    from judgebias.cli.full_disk import resume_command

    assert resume_command(["judgebias", "run", "my config.yaml"]) == "judgebias run 'my config.yaml'"
    module = resume_command(["/x/judgebias/__main__.py", "demo"])
    assert module == f"{shlex.quote(sys.executable)} -m judgebias demo"


# --- commands ------------------------------------------------------------------------------------
def test_analyze_on_a_full_disk_ends_in_one_line_naming_the_plot(tmp_path, monkeypatch, capsys):
    _require_dev_full()
    from matplotlib.figure import Figure
    from test_analyze import synthetic

    table = tmp_path / "t.jsonl"
    synthetic(n_pairs=20, ppl=False).to_json(table, orient="records", lines=True)
    out = tmp_path / "m.json"
    _to_dev_full(monkeypatch, Figure, "savefig", "verbosity_")
    code, stdout, stderr = _main(monkeypatch, capsys, "analyze", str(table), "--out", str(out), "--no-mlflow",
                                 "--reps", "100")
    assert code == 74, stdout + stderr
    assert "Traceback" not in stdout + stderr
    [line] = _error_lines(stderr)
    plot = next(iter(sorted((tmp_path / "m_plots").glob("*.png"))), None)
    assert line.startswith(f"error: disk full (no space left on device) while writing {tmp_path}/m_plots/"
                           "verbosity_"), line
    assert line.endswith(f". Free some space, then run the same command again: judgebias analyze {table} "
                         f"--out {out} --no-mlflow --reps 100"), line
    assert out.exists() and plot is not None  # what was written before the disk filled stays
    assert not list((tmp_path / "m_plots").glob("verbosity_*"))  # no half PNG passing for a plot


@pytest.mark.slow
def test_judge_on_a_full_disk_says_its_calls_are_cached_and_resumes(tiny_models, tmp_path, monkeypatch,
                                                                    capsys):
    _require_dev_full()
    from test_analyze import synthetic

    from judgebias.backends.call_store import default_cache_dir

    table = tmp_path / "t.jsonl"
    synthetic(n_pairs=4, ppl=False).to_json(table, orient="records", lines=True)
    out = tmp_path / "judged.parquet"
    args = ("judge", str(table), "--judge", tiny_models["tiny-a"], "--out", str(out), "--batch-size", "4")
    with monkeypatch.context() as m:
        _to_dev_full(m, pd.DataFrame, "to_parquet", "judged.parquet")
        code, stdout, stderr = _main(m, capsys, *args)
    assert code == 74, stdout + stderr
    assert "Traceback" not in stdout + stderr
    [line] = _error_lines(stderr)
    cache = default_cache_dir() / "calls.sqlite"
    assert line == (f"error: disk full (no space left on device) while writing {out}; the model calls "
                    f"already answered are kept in the call cache {cache}. Free some space, then run the "
                    f"same command to resume: judgebias {shlex.join(args)}")
    assert not out.exists() and not list(tmp_path.glob("judged.parquet*"))
    # As the line says: the same command again, and every model call comes from the cache.
    code, stdout, _ = _main(monkeypatch, capsys, *args)
    assert code in (0, None) and "computed 0" in stdout, stdout


# `judgebias run` stopped by a full disk as a user meets it (a process of its own, Prefect's temporary
# server and console handler): one line, the finished stages kept, the command that resumes, and the
# resume reading them back: tests/test_console.py, whose console checks read the same three runs.


def test_torch_save_on_a_nearly_full_disk_names_the_folder_and_elsewhere_stays_torchs_error(tmp_path,
                                                                                            monkeypatch):
    # torch.save to a path says only "[enforce fail at inline_container.cc:...] unexpected pos ..." (its
    # C++ writer keeps no errno): a full disk only where the file system has under 1 MiB left. The
    # file is a link to /dev/full inside the temporary folder: torch writes in place, through it.
    _require_dev_full()
    torch = pytest.importorskip("torch")
    from judgebias.runs import diskfull
    from judgebias.runs.store import RunStore

    store = RunStore(tmp_path / "run")

    def fill(folder) -> None:
        os.symlink(DEV_FULL, folder / "adapter_model.bin")
        torch.save({"w": torch.zeros(1000)}, str(folder / "adapter_model.bin"))

    with pytest.raises(RuntimeError) as plain:  # space left: torch's own error, not a full disk
        store.write_dir("adapters/g1", fill)
    assert not isinstance(plain.value, DiskFullError) and find(plain.value) is None
    assert diskfull.io_error(plain.value), str(plain.value)  # what torch says is one of the words read
    real = os.statvfs

    def nearly_full(path):  # the same file system, with 4 blocks of 4 KiB left
        st = real(path)
        return type("S", (), {"f_bavail": 4, "f_frsize": 4096, "f_blocks": st.f_blocks})()

    monkeypatch.setattr(diskfull.os, "statvfs", nearly_full)
    with pytest.raises(DiskFullError) as full:
        store.write_dir("adapters/g1", fill)
    assert full.value.filename == str(tmp_path / "run" / "adapters" / "g1")
    assert full.value.errno == errno.ENOSPC and isinstance(full.value.__cause__, RuntimeError)
    assert not (tmp_path / "run" / "adapters").exists() or not any((tmp_path / "run" / "adapters").iterdir())
    st = os.stat(DEV_FULL)  # the device is still the device (nothing renamed over it)
    assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 7)


def test_torch_save_to_an_open_file_keeps_the_os_error_in_its_chain():
    # To a file object, Python's own write fails: OSError(ENOSPC) itself (a small file: at torch's
    # last flush) or as the context of torch's RuntimeError "unexpected pos", found whatever the space.
    _require_dev_full()
    torch = pytest.importorskip("torch")
    fh = open(DEV_FULL, "wb")  # noqa: SIM115 (its close fails too: closed below, that error dropped)
    try:
        with pytest.raises((RuntimeError, OSError)) as raised:
            torch.save({"w": torch.zeros(1000)}, fh)
    finally:
        with contextlib.suppress(OSError):
            fh.close()
    assert find(raised.value) is not None and find(raised.value).reason == "no space left on device"
