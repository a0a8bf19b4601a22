"""Prefect's temporary server dies with the process that started it, even on SIGKILL.

Without ``PREFECT_API_URL`` a flow runs against a temporary Prefect server that Prefect starts as a
child process (uvicorn, 230-260 MB) and stops from an exit handler. A SIGKILLed run (OOM killer,
``kill -9``, a lost container) runs no exit handler, so each such kill used to leave one server
running for good. ``guard_temporary_server()`` makes Prefect start the server under this module's
small guard process instead: it runs the server as its own child, forwards SIGTERM/SIGINT to it,
and stops it as soon as the process that started the guard is gone. On Linux the server also dies
with the guard itself (a SIGKILLed guard, which Prefect sees as its server process).

    python -m judgebias.flows.runtime.server_guard PARENT_PID -- COMMAND...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
GRACE_S = 10.0


def _stop(child: subprocess.Popen) -> int:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
    return child.wait()


def _die_with_guard(guard: int) -> None:
    """In the server's process before it runs (Linux): the kernel sends it SIGTERM when the guard
    dies, even by SIGKILL, which runs no handler of the guard's; a server whose guard was killed
    would otherwise run on with nobody left to stop it."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != guard:  # the guard died before the request took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m judgebias.flows.runtime.server_guard PARENT_PID -- COMMAND...",
              file=sys.stderr)
        return 2
    parent = int(argv[0])
    guard = os.getpid()
    child = subprocess.Popen(argv[2:], preexec_fn=(lambda: _die_with_guard(guard))
                             if sys.platform.startswith("linux") else None)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    while True:
        code = child.poll()
        if code is not None:
            return code
        if stopping or os.getppid() != parent:  # asked to stop, or orphaned: the starter is gone
            return _stop(child)
        time.sleep(POLL_S)


class _GuardedSubprocess:
    """The ``subprocess`` module as Prefect's server module sees it: ``Popen`` runs the command under
    the guard; everything else is the real module."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs):
        guard = [sys.executable, "-m", "judgebias.flows.runtime.server_guard", str(os.getpid()), "--"]
        return subprocess.Popen([*guard, *args], **kwargs)


def guard_temporary_server() -> bool:
    """Make Prefect start its temporary server under the guard (idempotent). False when this
    Prefect version starts it some other way, in which case nothing changes."""
    try:
        from prefect.server.api import server
    except ImportError:
        return False
    current = getattr(server, "subprocess", None)
    if isinstance(current, _GuardedSubprocess):
        return True
    if current is not subprocess or not hasattr(server, "SubprocessASGIServer"):
        return False
    server.subprocess = _GuardedSubprocess()
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
