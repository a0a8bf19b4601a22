"""Turning a packaged GGUF into plain weights once per machine, and doing it ahead of need.

transformers de-quantizes a GGUF on every load; ``judgebias.models`` keeps the result in the model
cache. This module holds what makes that first conversion cheaper and safe to overlap: one parse of
the GGUF per conversion, one conversion of a model at a time across threads and processes, and the
prefetch child that converts the next models while a cold run's first stages work.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# One conversion at a time in this process (with a file lock across processes, ``exclusive``),
# which also keeps the GGUF-reader patch of ``gguf_parsed_once`` to one thread.
_CONVERSION = threading.Lock()


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """transformers parses a GGUF's metadata anew for the config, for the weights and for the
    tokenizer; with gemma-3's 262k-token vocabulary each parse is ~16 s of pure Python (measured:
    48 s of a 51 s load were parsing, 4 s de-quantizing). One parse per file while converting, read
    through a plain view (``plain_view_reader``), and the metadata-only reading of the config and
    of the tokenizer's config (3.5 s each for gemma-3: a Python call per vocabulary entry) done once."""
    try:
        import gguf
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # transformers then says itself that GGUF loading needs the package
        yield
        return
    original_load = gguf_utils.load_gguf_checkpoint
    metadata: dict[str, Any] = {}

    def load(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:
            return original_load(path, return_tensors, **kwargs)
        if str(path) not in metadata:
            metadata[str(path)] = original_load(path, return_tensors=False)
        # Callers read and may edit the config; the 262k-entry vocabulary lists are only read.
        return {key: copy.deepcopy(value) if key == "config" else copy.copy(value)
                for key, value in metadata[str(path)].items()}

    original = gguf.GGUFReader
    fast = plain_view_reader(original)
    readers: dict[tuple[str, str], Any] = {}

    def reader(path, mode="r"):
        key = (str(path), mode)
        if key not in readers:
            readers[key] = fast(path, mode)
        return readers[key]

    # transformers imports both from their modules at each call
    gguf.GGUFReader, gguf_utils.load_gguf_checkpoint = reader, load
    try:
        yield
    finally:
        gguf.GGUFReader, gguf_utils.load_gguf_checkpoint = original, original_load


def plain_view_reader(base: type) -> type:
    """``base`` (gguf's GGUFReader) reading its fields through a plain ndarray view of the file.

    The reader slices its ``np.memmap`` once per value: gemma-3's 262k-token vocabulary makes that
    13 million slices, each paying memmap's Python-level ``__getitem__`` and ``__array_finalize__``
    (12 of the 20 s of one parse, measured). A plain view of the same mapping yields the same
    bytes and dtypes without that overhead; tests compare both readers field by field."""
    import numpy as np

    dtypes: dict[tuple[Any, str], Any] = {}

    class PlainViewReader(base):
        def _get(self, offset, dtype, count=1, override_order=None):
            plain = self.__dict__.get("_plain")
            if plain is None:
                plain = self._plain = self.data.view(np.ndarray)
            order = self.byte_order if override_order is None else override_order
            target = dtypes.get((dtype, order))
            if target is None:
                target = dtypes[(dtype, order)] = np.dtype(dtype).newbyteorder(order)
            count = int(count)
            return plain[offset : offset + target.itemsize * count].view(target)[:count]

    PlainViewReader.__name__ = PlainViewReader.__qualname__ = f"PlainView{base.__name__}"
    return PlainViewReader


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Held by one thread of one process at a time (the prefetch process, a stage, a second run):
    the others wait for the conversion or assembly of ``path`` and then find it done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _CONVERSION:
        try:
            import fcntl
        except ImportError:  # Windows: threads still wait; another process may redo the work
            yield
            return
        with open(path.with_name(path.name + ".lock"), "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def prefetch(specs: Iterable[str]) -> subprocess.Popen | None:
    """De-quantize the GGUF models among ``specs`` that are not yet converted, in order, in a child
    process, so a cold first run converts the next model while the current one works and while
    Prefect starts (a thread would fight the run for the GIL: GGUF parsing is pure Python). A stage
    that needs a model still converting waits for it (``exclusive``). Errors are left to that
    stage, which reports them with its context. None when nothing needs converting."""
    from judgebias.models import needs_conversion

    todo = [s for s in dict.fromkeys(str(s) for s in specs) if _quiet(needs_conversion, s)]
    if not todo:
        return None
    # -P: the working directory must not shadow the installed package (a checkout of another version)
    return subprocess.Popen([sys.executable, "-P", "-m", "judgebias.conversion", *todo])


def _quiet(check: Callable[[str], bool], spec: str) -> bool:
    try:
        return check(spec)
    except Exception:  # the stage that loads it raises it again, with its context
        return False


def _prefetch_main(specs: list[str]) -> None:
    from judgebias.models import cache_root, converted_by, local_folder, needs_conversion

    for spec in specs:
        if not _quiet(needs_conversion, spec):
            continue
        print(f"model {spec}: first use on this machine, de-quantizing its GGUF once into "
              f"{cache_root()} (10-30 s; later runs load it in ~1 s)", flush=True)
        start = time.perf_counter()
        try:
            _, folder = local_folder(spec)
        except Exception:  # the stage that loads it raises it again, with its context
            return
        if converted_by(folder) == os.getpid():
            print(f"model {spec}: ready ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":  # the prefetch child: python -m judgebias.conversion SPEC...
    _prefetch_main(sys.argv[1:])
