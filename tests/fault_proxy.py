"""A forwarding HTTP proxy in front of a real server that injects one fault: HTTP 500 on the paths
named, or, at the first request whose path names ``kill_on``, the server killed and the proxy
gone (later connections refused, as from a dead server)."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@contextmanager
def fault_proxy(upstream: str, *, fail: tuple[str, ...] = (), kill_on: str | None = None,
                kill: Callable[[], None] | None = None) -> Iterator[dict]:
    """Yields ``{"url": proxy URL, "seen": [paths], "failed": int, "killed": bool}``."""
    target = urlsplit(upstream)
    state: dict = {"seen": [], "failed": 0, "killed": False}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                state["seen"].append(self.path)
                dying = kill_on is not None and kill_on in self.path and not state["killed"]
                if dying:
                    state["killed"] = True
            if dying or state["killed"]:
                if dying:
                    if kill:
                        kill()
                    threading.Thread(target=lambda: (server.shutdown(), server.server_close()),
                                     daemon=True).start()
                self.close_connection = True
                return  # the connection drops without an answer, as the killed server's did
            if any(p in self.path for p in fail):
                with lock:
                    state["failed"] += 1
                payload = b'{"error_code": "INTERNAL_ERROR", "message": "injected fault"}'
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            self.send_response(reply.status)
            for k, v in reply.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        if not state["killed"]:
            server.shutdown()
            server.server_close()
