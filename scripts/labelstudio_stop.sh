#!/usr/bin/env bash
# Stop the Label Studio server started by labelstudio_start.sh: SIGTERM by PID, wait, SIGKILL last.
#   LABEL_STUDIO_DATA_DIR   data directory (default: <repo>/.labelstudio)
#   LABEL_STUDIO_STOP_TIMEOUT  seconds to wait after SIGTERM (default: 30)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${LABEL_STUDIO_DATA_DIR:-$repo/.labelstudio}"
pidfile="$data/labelstudio.pid"
wait_s="${LABEL_STUDIO_STOP_TIMEOUT:-30}"
if [[ ! -f "$pidfile" ]]; then
    echo "no PID file at $pidfile: nothing to stop"
    exit 0
fi
pid="$(cat "$pidfile")"
if ! kill -0 "$pid" 2>/dev/null; then
    echo "Label Studio (pid $pid) is not running"
    rm -f "$pidfile"
    exit 0
fi
# The server was started with setsid, so its PID is also its process-group id.
kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
for ((i = 0; i < wait_s * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "Label Studio (pid $pid) stopped"; exit 0; }
    sleep 0.1
done
echo "Label Studio (pid $pid) ignored SIGTERM for ${wait_s}s; sending SIGKILL" >&2
kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
rm -f "$pidfile"
