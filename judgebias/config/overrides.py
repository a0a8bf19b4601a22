"""Overrides of a config file from the command line (``judgebias run --sample/--dtype``): nested
mappings that win over the file, plus keys that are not config keys themselves."""

from __future__ import annotations

from judgebias.backends.kinds import CAPABILITIES

# An override key (``judgebias run --dtype``), not a config key: sets ``dtype`` on every local
# generator, judge and rewriter, whatever the file says.
LOCAL_DTYPE = "local_dtype"


def with_local_dtype(data: dict, dtype: str) -> dict:
    out = dict(data)
    for key in ("generators", "judges"):
        if isinstance(out.get(key), list):
            out[key] = [_set_dtype(e, dtype) for e in out[key]]
    ablations = out.get("ablations")
    if isinstance(ablations, dict) and isinstance(ablations.get("style_rewrite"), dict):
        out["ablations"] = {**ablations, "style_rewrite": _set_dtype(ablations["style_rewrite"], dtype)}
    return out


def _set_dtype(entry, dtype: str):
    # Only weights loaded in this process take the run's dtype (an unknown kind is the config's to name).
    if isinstance(entry, dict) and "in_process" in CAPABILITIES.get(entry.get("backend", "local"), ()):
        return {**entry, "dtype": dtype}
    return entry


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
