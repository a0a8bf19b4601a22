"""Turning a packaged GGUF into plain weights once per machine, safely and once.

transformers de-quantizes a GGUF on every load; ``judgebias.backends.loading`` keeps the result in the
model cache. This module holds what makes that first conversion cheaper and safe to overlap: one parse
of the GGUF per conversion, and one conversion of a model at a time across threads and processes (the
prefetch child that converts the next models ahead of need is ``judgebias.backends.loading.prefetch``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
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
