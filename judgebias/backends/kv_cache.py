"""The KV-cache argument of a transformers forward pass under both of its names.

transformers 5 renamed ``past_key_values`` (and the output field of the same name) to ``cache``;
the old name still works but warns (a FutureWarning and a log line per forward pass that reuses a
prefix). The project supports transformers from 4.57, which knows only the old name, so the name is
read from the model's own signature.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.cache
def _name_for(forward_type: type) -> str:
    params = inspect.signature(forward_type.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def with_cache(body, cache) -> dict[str, Any]:
    """``{name: cache}`` for ``body``'s forward (the decoder the backend calls)."""
    return {_name_for(type(body)): cache}


def returned_cache(out):
    """The KV cache a forward pass returned, under whichever name this transformers gives it."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
