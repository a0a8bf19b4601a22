#!/usr/bin/env bash
# Rebuild the real third-party judgment tables bundled in judgebias/data/ (the demo's findings)
# from the upstream files: PandaLM's data/ folder and LLMBar's Dataset/Natural folder.
#   bash scripts/bundle_real_data.sh /path/to/PandaLM/data /path/to/LLMBar/Dataset/Natural
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$#" -ne 2 ]; then
  echo "usage: bash scripts/bundle_real_data.sh /path/to/PandaLM/data /path/to/LLMBar/Dataset/Natural" >&2
  exit 2
fi
pandalm="$1"
llmbar="$2"
jb="${JUDGEBIAS:-$here/.venv/bin/judgebias}"
"$jb" import pandalm "$pandalm" --out "$here/judgebias/data/pandalm_testset.parquet"
"$jb" import llmbar "$llmbar" --out "$here/judgebias/data/llmbar_natural.parquet"
install -m 644 "$pandalm/LICENSE" "$here/judgebias/data/LICENSE.pandalm"
