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


def template_digest(name: str) -> str:
    """A digest of judge template ``name`` as it reads (both its chat and few-shot variants rendered
    on placeholder texts), so a run tagged with it says whether two runs asked with the same words;
    "" for a name that is no pairwise template (a pointwise one: its own name and version say it)."""
    import hashlib

    from judgebias.prompts import JUDGE_TEMPLATES

    template = JUDGE_TEMPLATES.get(name)
    if template is None:
        return ""
    builders = {True: template.chat_builder, False: template.raw_builder}
    rendered = [template.build("{question}", "{first}", "{second}", chat=chat) if builder else None
                for chat, builder in builders.items()]
    return hashlib.sha256(json.dumps([template.tag(True), rendered], default=str).encode()).hexdigest()[:16]
