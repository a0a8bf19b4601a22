#!/usr/bin/env bash
# Install the Label Studio SERVER into its own virtualenv (idempotent).
# It must not share the project's environment: its pins would downgrade openai and others there.
#   LABEL_STUDIO_VENV   where to put it (default: <repo>/.lsvenv)
#   LABEL_STUDIO_SPEC   pip requirement (default: label-studio)
#   PYTHON              interpreter to build the venv with (default: python3)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LABEL_STUDIO_VENV:-$repo/.lsvenv}"
spec="${LABEL_STUDIO_SPEC:-label-studio}"
py="${PYTHON:-python3}"

if [[ -x "$venv/bin/label-studio" ]] && "$venv/bin/python" -c "import label_studio" 2>/dev/null; then
    echo "Label Studio already installed in $venv ($("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("label-studio"))'))"
    exit 0
fi
echo "Installing $spec into $venv (about 90 s, ~1 GB)"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "$spec"
# Do not call `label-studio --version`: it starts a server on 0.0.0.0.
echo "Installed label-studio $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("label-studio"))') in $venv"
