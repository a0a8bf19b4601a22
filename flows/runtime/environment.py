"""Environment for running flows without a Prefect server (ephemeral mode), set BEFORE prefect is
imported: importing prefect creates ``$PREFECT_HOME`` (default ``~/.prefect``) and reads its settings.

Only defaults are set; anything the user exported wins. With ``PREFECT_API_URL`` set, flows report
to that server instead and only the console level below still applies.

The console: Prefect's console handler shows warnings and errors only (``CONSOLE_LEVEL``), so a run
prints no "Finished in state Completed()" per task, no flow-run start/end lines and no temporary-
server notices; each stage's one line comes from ``judgebias.tasks.stage_lines``. The Prefect API (and its UI)
still receives every log line. ``PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL=INFO`` (or ``judgebias run
--verbose``) shows them all again.
"""

from __future__ import annotations

import os
from pathlib import Path

# A loaded 2-core machine starts the temporary server slower than Prefect's 20 s default.
EPHEMERAL_STARTUP_TIMEOUT_S = "120"
# Prefect reads its logging settings from PREFECT_LOGGING_[PATH]_[TO]_[KEY] (prefect/logging/logging.yml).
CONSOLE_LEVEL_VAR = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"
CONSOLE_LEVEL = "WARNING"


def prepare(project_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Set project-local Prefect/MLflow defaults; returns what was set (for the report)."""
    base = Path(project_dir or Path.cwd()).resolve()
    defaults = {
        "PREFECT_HOME": str(base / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": EPHEMERAL_STARTUP_TIMEOUT_S,
        "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "1",
        CONSOLE_LEVEL_VAR: CONSOLE_LEVEL,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    applied = {}
    for key, value in defaults.items():
        if key not in os.environ:
            os.environ[key] = value
            applied[key] = value
    return applied
