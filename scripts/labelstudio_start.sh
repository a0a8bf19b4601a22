#!/usr/bin/env bash
# Start a Label Studio server in the background, non-interactively, bound to 127.0.0.1, and wait
# until /health answers. Credentials come from the environment; any that is unset is generated and
# saved (mode 0600) with the URL in $DATA_DIR/labelstudio.env, which you can `source` to use the
# CLI. The API token is never printed.
#   LABEL_STUDIO_DATA_DIR   data directory (default: <repo>/.labelstudio)
#   LABEL_STUDIO_PORT       port (default: 8080)
#   LABEL_STUDIO_VENV       venv with label-studio (default: <repo>/.lsvenv, else /opt/lsvenv)
#   LABEL_STUDIO_USERNAME / LABEL_STUDIO_PASSWORD / LABEL_STUDIO_API_KEY   admin credentials
#   LABEL_STUDIO_START_TIMEOUT  seconds to wait for health (default: 180)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${LABEL_STUDIO_DATA_DIR:-$repo/.labelstudio}"
port="${LABEL_STUDIO_PORT:-8080}"
timeout="${LABEL_STUDIO_START_TIMEOUT:-180}"
venv="${LABEL_STUDIO_VENV:-$repo/.lsvenv}"
[[ -x "$venv/bin/label-studio" ]] || venv=/opt/lsvenv
ls_bin="$venv/bin/label-studio"
[[ -x "$ls_bin" ]] || { echo "label-studio not found in $venv; run scripts/labelstudio_install.sh" >&2; exit 1; }

mkdir -p "$data"
chmod 700 "$data"
pidfile="$data/labelstudio.pid"
envfile="$data/labelstudio.env"
url="http://127.0.0.1:$port"

if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "Label Studio already running (pid $(cat "$pidfile")); credentials in $envfile"
    exit 0
fi

# Credentials: environment first, then the file of an earlier start (the token only counts when the
# organization is first created, so a restart must reuse it), then fresh random values.
if [[ -f "$envfile" ]]; then
    # shellcheck disable=SC1090
    saved_user="$(. "$envfile"; echo "${LABEL_STUDIO_USERNAME:-}")"
    saved_pass="$(. "$envfile"; echo "${LABEL_STUDIO_PASSWORD:-}")"
    saved_key="$(. "$envfile"; echo "${LABEL_STUDIO_API_KEY:-}")"
fi
rand() { "$venv/bin/python" -c "import secrets; print(secrets.token_hex($1))"; }
user="${LABEL_STUDIO_USERNAME:-${saved_user:-admin@judgebias.local}}"
pass="${LABEL_STUDIO_PASSWORD:-${saved_pass:-$(rand 16)}}"
key="${LABEL_STUDIO_API_KEY:-${saved_key:-$(rand 20)}}"
( umask 077
  printf 'export LABEL_STUDIO_URL=%q\nexport LABEL_STUDIO_USERNAME=%q\nexport LABEL_STUDIO_PASSWORD=%q\nexport LABEL_STUDIO_API_KEY=%q\n' \
      "$url" "$user" "$pass" "$key" > "$envfile" )
chmod 600 "$envfile"

log="$data/labelstudio.log"
# setsid: own process group, so the stop script's SIGTERM reaches the server and nothing else.
LABEL_STUDIO_BASE_DATA_DIR="$data" \
LATEST_VERSION_CHECK=false COLLECT_ANALYTICS=false \
LABEL_STUDIO_USERNAME="$user" LABEL_STUDIO_PASSWORD="$pass" LABEL_STUDIO_USER_TOKEN="$key" \
LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true \
    setsid "$ls_bin" start --no-browser --internal-host 127.0.0.1 --host "$url" --port "$port" \
    --data-dir "$data" >"$log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$pidfile"

deadline=$((SECONDS + timeout))
healthy() {  # the server venv's python, not curl: one dependency fewer on slim images
    "$venv/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "$url/health" >/dev/null 2>&1
}
until healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "Label Studio exited during start; last log lines ($log):" >&2
        tail -n 20 "$log" >&2
        rm -f "$pidfile"
        exit 1
    fi
    if (( SECONDS >= deadline )); then
        echo "Label Studio did not become healthy at $url within ${timeout}s; see $log" >&2
        exit 1
    fi
    sleep 1
done
echo "Label Studio is up at $url (pid $pid, data $data)."
echo "Credentials (user, password, API token) are in $envfile: run  source $envfile"
