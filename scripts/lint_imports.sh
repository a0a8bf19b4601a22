#!/usr/bin/env bash
# The import contracts (pyproject.toml) checked over the package as it is installed: flows/, tasks/,
# tracking/ and annotation/ sit at the repository's top and are installed as judgebias.flows ...;
# import-linter only sees what lies inside the package's own folder, so it reads a staged install.
# The sources are copied first: a build from the checkout would reuse a stale build/ folder.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python="$root/${JUDGEBIAS_VENV:-.venv}/bin/python"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/src"
cp -r judgebias flows tasks tracking annotation setup.py pyproject.toml README.md "$stage/src/"
isolation=()
"$python" -c 'import setuptools' 2>/dev/null && isolation=(--no-build-isolation)
"$python" -m pip install -q --disable-pip-version-check --no-deps --no-compile "${isolation[@]}" \
  --target "$stage/site" "$stage/src"
cd "$stage/site"
PYTHONPATH="$stage/site" "$(dirname "$python")/lint-imports" "$root/pyproject.toml" "$@"
