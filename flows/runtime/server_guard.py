"""Prefect's temporary server dies with the process that started it, even on SIGKILL.

Without ``PREFECT_API_URL`` a flow runs against a temporary Prefect server that Prefect starts as a
child process (uvicorn, 230-260 MB) and stops from an exit handler. A SIGKILLed run (OOM killer,
``kill -9``, a lost container) runs no exit handler, so each such kill used to leave one server
running for good. ``guard_temporary_server()`` makes Prefect start the server under this module's
small guard process instead: it runs the server as its own child, forwards SIGTERM/SIGINT to it,
and stops it as soon as the process that started the guard is gone. On Linux the server also dies
with the guard itself (a SIGKILLed guard, which Prefect sees as its server process).

The other way round, a server that dies while the run goes on (killed, out of memory) leaves the
run talking to a dead API: Prefect's client retries every call and the run hung for over ten
minutes before it ended. The run process watches the guard and, when it ends without Prefect
having asked it to, calls the command's handler at once (``on_server_lost``), which says so in one
line and ends the run; finished stages are in the run folder, so the same command resumes.
The guard runs in a session of its own, so a Ctrl-C at the terminal reaches the run, which reports
its stop to a server still there, and not the server.

    python -m judgebias.flows.runtime.server_guard PARENT_PID -- COMMAND...
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

POLL_S = 0.5
GRACE_S = 10.0
LOG_DELIVERY_S = 5.0  # Prefect's own bound on the flush at exit


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


# uvicorn's exit code when the port is taken: Prefect starts another server on another port.
_PORT_TAKEN = 3


class _Guard(subprocess.Popen):
    """The guard's process as Prefect holds it: a stop Prefect asks for (``terminate``/``kill``
    both go through ``send_signal``) is told apart from a death nobody asked for."""

    def __init__(self, *args, **kwargs):
        self.stop_requested = False
        super().__init__(*args, **kwargs)

    def send_signal(self, sig: int) -> None:
        if not self.stop_requested and self.poll() is None:
            flush_run_log_worker()
        self.stop_requested = True
        super().send_signal(sig)


def flush_run_log_worker(timeout: float = LOG_DELIVERY_S) -> None:
    """Flush Prefect's run-log worker while its temporary server is still up.

    Prefect flushes that worker from logging's exit handler, which Python runs after the handler
    that stops the temporary server (registered later). Against a stopped server the flush waited
    out its whole 5 s timeout: a run stopped by Ctrl-C ended 6.2-6.5 s after the key, 1.2-1.5 s once
    flushed here, as Prefect asks the server to stop (docs/benchmarks.md). From an event loop (where
    Prefect's flush returns a coroutine instead of waiting) nothing is done: the exit handler
    stays the fallback."""
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    try:
        from prefect.logging.handlers import APILogWorker
    except ImportError:  # another Prefect: its own exit handler flushes, as before
        return
    APILogWorker.drain_all(timeout=timeout)


class _GuardedSubprocess:
    """The ``subprocess`` module as Prefect's server module sees it: ``Popen`` runs the command under
    the guard, in a session of its own, watched by a thread; everything else is the real module."""

    def __init__(self, on_lost: Callable[[int], None] | None) -> None:
        self.on_lost = on_lost

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    def Popen(self, args, **kwargs):
        guard = [sys.executable, "-m", "judgebias.flows.runtime.server_guard", str(os.getpid()), "--"]
        proc = _Guard([*guard, *args], start_new_session=True, **kwargs)
        if self.on_lost is not None:
            threading.Thread(target=self._watch, args=(proc,), name="prefect-server-watch",
                             daemon=True).start()
        return proc

    def _watch(self, proc: _Guard) -> None:
        code = proc.wait()
        if not proc.stop_requested and code != _PORT_TAKEN and self.on_lost is not None:
            self.on_lost(code)


def _reports_to_a_server() -> bool:
    """Whether Prefect's settings (the environment, the active profile or a settings context) name an
    API: flows report to that server and Prefect starts no temporary one, so nothing is guarded and
    Prefect's server code (some 4 s of imports on a loaded 2-core machine) is not loaded."""
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url)


def guard_temporary_server(on_server_lost: Callable[[int], None] | None = None) -> bool:
    """Make Prefect start its temporary server under the guard. ``on_server_lost(exit_code)`` is
    called from a watching thread when a server this process started ends without Prefect asking
    (the latest call's handler counts). False when this Prefect version starts its server some other
    way, or when Prefect reports to a server of its own (``PREFECT_API_URL``), in which case nothing
    changes."""
    if _reports_to_a_server():
        return False
    try:
        from prefect.server.api import server
    except ImportError:
        return False
    current = getattr(server, "subprocess", None)
    if isinstance(current, _GuardedSubprocess):
        current.on_lost = on_server_lost
        return True
    if current is not subprocess or not hasattr(server, "SubprocessASGIServer"):
        return False
    server.subprocess = _GuardedSubprocess(on_server_lost)
    return True


def end_this_process(message: str, code: int) -> None:
    """For an ``on_server_lost`` handler: print ``message`` to stderr, stop this process's children
    (SIGTERM, then SIGKILL after a grace period) and exit with ``code`` at once, from any thread.
    Nothing is left to unwind: the main thread is stuck in the client's retries, and what the run
    finished is already on disk, as after a SIGKILL."""
    print(message, file=sys.stderr, flush=True)
    try:
        import psutil
    except ImportError:  # psutil comes with accelerate and distributed; without it, the exit alone
        os._exit(code)
    try:
        children = psutil.Process().children(recursive=True)
        for child in children:
            child.terminate()
        _gone, alive = psutil.wait_procs(children, timeout=GRACE_S)
        for child in alive:
            child.kill()
    except psutil.Error:
        pass  # a child that ended meanwhile
    finally:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
