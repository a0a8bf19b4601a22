"""Objects kept loaded between uses in one process, the least recently used released first.

Two callers hold models this way: the experiment's stages (``backends.builder.resident_model``:
plain weights reused across generate, judge, perplexity, attention and the ablations) and a
distributed worker (``engine.workers.worker_backend``: the built backend reused across the chunks it gets).
How many stay is read from an environment variable at each use, so a run can be tuned without code.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ClassVar


class Resident:
    """The last ``capacity`` objects built by key. ``capacity`` comes from ``env`` (``default`` when
    unset) and is at least ``minimum``; 0 keeps nothing (each use builds anew)."""

    _instances: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, env: str, default: int, minimum: int = 0) -> None:
        self.env, self.default, self.minimum = env, default, minimum
        self._held: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()  # one build per key even when several threads ask at once
        self.builds: dict[Hashable, int] = {}
        Resident._instances.add(self)

    @classmethod
    def any_held(cls) -> bool:
        """Whether any cache of this kind in the process holds an object now (the stages' models, a
        distributed worker's backends)."""
        return any(len(r) for r in list(cls._instances))

    def capacity(self) -> int:
        try:
            return max(self.minimum, int(os.environ.get(self.env, str(self.default))))
        except ValueError:
            raise ValueError(f"{self.env} must be a whole number, got {os.environ[self.env]!r}") from None

    def get(self, key: Hashable, build: Callable[[], Any]) -> tuple[Any, bool]:
        """(the object for ``key``, whether it was built just now)."""
        capacity = self.capacity()
        with self._lock:
            if capacity <= 0:
                self._drop(len(self._held))
            elif key in self._held:
                self._held.move_to_end(key)
                return self._held[key], False
            else:
                # Release before building: peak memory holds ``capacity`` objects, not one more.
                self._drop(len(self._held) - capacity + 1)
            obj = build()
            self.builds[key] = self.builds.get(key, 0) + 1
            if capacity > 0:
                self._held[key] = obj
            return obj, True

    def holds(self, key: Hashable) -> bool:
        """Whether ``get(key, ...)`` would return a held object now, building nothing."""
        with self._lock:
            return key in self._held and self.capacity() > 0

    def __len__(self) -> int:
        return len(self._held)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self.builds.clear()
        gc.collect()

    def _drop(self, count: int) -> None:
        for _ in range(max(0, count)):
            self._held.popitem(last=False)
        if count > 0:
            gc.collect()
