"""An experiment config as MLflow parameters."""

from __future__ import annotations

import json
from typing import Any

from judgebias.config.experiment import ExperimentConfig


def flatten(cfg: ExperimentConfig) -> dict[str, str]:
    """Dotted ``key -> value`` view for tracking params. Only names of secret-holding environment
    variables appear in a config (never their values); they are dropped here all the same."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            if prefix.rsplit(".", 1)[-1] in ("api_key_env", "api_key", "url_env"):
                return
            out[prefix] = json.dumps(value) if isinstance(value, list | dict) else str(value)

    walk("", cfg.model_dump(mode="json"))
    return out
