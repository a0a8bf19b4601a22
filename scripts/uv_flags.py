"""Print, one per line, the `uv pip install` flags that stand for this machine's pip settings.

uv reads none of pip's configuration, so an install that switches to uv would silently stop using a
private index, a local wheel folder or a constraint file that pip was told about (on the project's
machines: `find-links /opt/wheels`, which holds the CPU build of torch, and a cap on torch's release).
This reads pip's merged settings (files and PIP_* variables, as `pip config list` shows them) and
spells the ones that choose where packages come from and which releases are allowed.

    python scripts/uv_flags.py PYTHON     # PYTHON: an interpreter with pip (the new virtualenv's)

Lines of the form NAME=VALUE are environment variables for the caller to export (pip's `index-url`,
`cert`, `timeout` and `proxy`), unless the caller's environment sets them already.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# pip option -> uv flag; each may carry several whitespace-separated values in pip's files.
_MANY = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
         "trusted-host": "--allow-insecure-host"}
# pip option -> uv's environment variable: the caller exports these, so that a flag on the command line
# (install.sh's TORCH_INDEX_URL) overrides them as it overrides pip's settings.
_ENV = (("index-url", "UV_INDEX_URL"), ("cert", "SSL_CERT_FILE"), ("timeout", "UV_HTTP_TIMEOUT"),
        ("default-timeout", "UV_HTTP_TIMEOUT"),  # PIP_DEFAULT_TIMEOUT, as `pip config list` names it
        ("proxy", "HTTPS_PROXY"), ("proxy", "HTTP_PROXY"))


def pip_settings(python: str) -> dict[str, str]:
    """pip's merged settings by option name; an environment variable wins over a file, [install]
    over [global] (pip's own order)."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    rank = {"global": 0, "install": 1, ":env:": 2}
    chosen: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        section, _, option = key.rpartition(".")
        level = rank.get(section)
        if level is None:
            continue
        value = value.strip().strip("'\"")
        if option not in chosen or level >= chosen[option][0]:
            chosen[option] = (level, value)
    return {option: value for option, (_, value) in chosen.items()}


def _missing_folder(location: str) -> bool:
    """A find-links entry naming a local folder that is not there: pip skips it with a warning, uv
    stops the install ("Failed to read `--find-links` directory")."""
    if "://" in location and not location.startswith("file://"):
        return False
    return not Path(location.removeprefix("file://")).exists()


def uv_flags(settings: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for option, flag in _MANY.items():
        for value in settings.get(option, "").split():
            if option == "find-links" and _missing_folder(value):
                continue
            flags += [flag, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    # pip takes the best release found on any index; uv's default takes the first index that has the
    # package at all, which can pick an older release from a partial mirror.
    flags += ["--index-strategy", "unsafe-best-match"]
    flags += [f"{variable}={settings[option]}" for option, variable in _ENV if settings.get(option)]
    return flags


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/uv_flags.py PYTHON")
    print("\n".join(uv_flags(pip_settings(sys.argv[1]))))
