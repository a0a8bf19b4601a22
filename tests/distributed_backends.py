"""Backend factories for tests/test_distributed.py (importable by name in worker processes):
a local model whose worker process dies once in the middle of a chunk, and a model-free backend
whose generations fail for prompts that say so."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from judgebias.backends.protocol import Generation

MARKER_ENV = "JUDGEBIAS_TEST_CRASH_MARKER"


class _DiesOnce:
    def __init__(self, inner, marker: Path) -> None:
        self.inner, self.marker, self.calls = inner, marker, 0
        self.name = inner.name

    def __getattr__(self, attr: str):
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def identity(self) -> dict:
        return self.inner.identity()  # same cache keys as the plain model

    def score_options(self, prompts, options):
        self.calls += 1
        if self.calls == 2:
            try:  # exactly one process in the whole run wins this and dies
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os._exit(17)
        return self.inner.score_options(prompts, options)


def dies_once(spec):
    from judgebias.backends.local import LocalBackend

    return _DiesOnce(LocalBackend(spec.model, name=spec.name), Path(os.environ[MARKER_ENV]))


class FlakyEcho:
    """Echoes each prompt's text; a prompt containing "FAIL" fails while ``FLAKY_FAIL`` is set."""

    name = "flaky-echo"
    calls: ClassVar[list[int]] = []  # prompts forwarded per generate() call, across instances

    def identity(self) -> dict:
        return {"backend": "test-echo", "model": "echo-1"}

    def generate(self, prompts, params):
        FlakyEcho.calls.append(len(prompts))
        failing = os.environ.get("FLAKY_FAIL") == "1"
        return [Generation(text="", error="simulated timeout") if failing and "FAIL" in p.text
                else Generation(text=p.text.upper(), completion_tokens=1) for p in prompts]


def flaky_echo(spec):
    return FlakyEcho()
