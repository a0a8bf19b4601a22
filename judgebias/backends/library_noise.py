"""Output of the model libraries that a judgebias user can do nothing about, switched off where the
libraries are called (model loading, adapter merging), each for a stated reason.

Only named loggers, and warnings matched by category, module and message: anything else a library
says still reaches the console. ``HF_HUB_DISABLE_PROGRESS_BARS=0`` (exported by the user) keeps
transformers' progress bars.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

_done = False

# Loggers whose warnings are about the library's own build, not about the user's models or data.
QUIET_LOGGERS = {
    # torchao (the optional int8 extra) says at import that its CUDA kernels (.so files built for GPUs)
    # could not load and that Triton is missing; on a CPU machine the int8 path needs neither.
    "torchao": logging.ERROR,
    # torch tells torchao's maintainers that registering Enum subclasses with pytree is deprecated,
    # once per enum torchao registers at import.
    "torch.utils._pytree": logging.ERROR,
}


def _bars_wanted() -> bool:
    value = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    return value is not None and value.strip().lower() in {"0", "false", "no", "off"}


def quiet_model_libraries() -> None:
    """Once per process, before a model is loaded: no weight-loading progress bars (one per model
    load, 13 in the demo, each finished in well under a second) and no import-time build notices."""
    global _done
    if _done:
        return
    _done = True
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    if not _bars_wanted():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


@contextlib.contextmanager
def peft_reads_deprecated_attributes() -> Iterator[None]:
    """Around a peft call on a transformers model: peft reads ``is_gradient_checkpointing``, which
    transformers 5 deprecated (FutureWarning, once per adapter loaded or created); the call is inside
    peft, so neither judgebias nor its user can change it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated",
                                category=FutureWarning, module=r"transformers\.modeling_utils")
        yield
