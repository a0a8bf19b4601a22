"""How many requests an OpenAI-compatible endpoint gets at once, and how fast.

``AdaptiveLimit`` (pure, times passed in) finds the number of requests in flight a provider allows:
it starts at 4, grows by one per answered request (doubling per round trip) until the first sign
of congestion, then by one per round trip; a 429 (or a rate-limit header saying nothing is left)
cuts it by a tenth, at most once per round trip (requests sent before the last cut say
nothing new); a smoothed latency above twice the fastest seen holds it where it is (a server
queueing requests answers slower, not faster). ``TokenBucket`` paces what a user declared
(``rpm`` / ``tpm``). ``RequestGovernor`` puts both behind a lock for the client's threads, with a
pause every request waits out when the server asked for one (Retry-After, ``x-ratelimit-reset-*``).

Nothing here is part of what a call returns, so none of it is in a cache key.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Literal

ADAPTIVE = "adaptive"
Concurrency = int | Literal["adaptive"]
ADAPTIVE_START = 4  # the fixed value this client used before it adapted
ADAPTIVE_CEILING = 256
CUT_FACTOR = 0.9
LATENCY_TOLERANCE = 2.0
LATENCY_SMOOTHING = 0.2  # weight of the newest latency in the running average

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_concurrency(value: str | int | None) -> Concurrency:
    """``"adaptive"`` (or None) or a whole number >= 1; ``ValueError`` otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() == ADAPTIVE):
        return ADAPTIVE
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or (isinstance(value, float) and value != n):
        raise ValueError(f"concurrency must be 'adaptive' or a whole number >= 1, got {value!r}")
    return n


def parse_duration(text: str | None) -> float | None:
    """Seconds in a rate-limit reset header: ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"0.5"``; None when
    absent or unreadable."""
    if not text:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(a) * scale[b] for a, b in parts)


def header_number(headers: Mapping[str, str] | None, name: str) -> float | None:
    if not headers:
        return None
    value = headers.get(name)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The server's Retry-After in seconds (only the number-of-seconds form), else None."""
    value = header_number(headers, "retry-after")
    return max(0.0, value) if value is not None else None


def exhausted_for(headers: Mapping[str, str] | None, tokens_next: float = 0.0) -> float | None:
    """Seconds to wait when the ``x-ratelimit-remaining-requests/tokens`` headers say the budget is
    spent (no request left, or fewer tokens left than the next request needs): the matching reset
    header, else one second; None when nothing is spent or nothing is said."""
    waits = []
    for what, need in (("requests", 1.0), ("tokens", max(tokens_next, 1.0))):
        left = header_number(headers, f"x-ratelimit-remaining-{what}")
        if left is not None and left < need:
            reset = parse_duration((headers or {}).get(f"x-ratelimit-reset-{what}"))
            waits.append(1.0 if reset is None else reset)
    return max(waits) if waits else None


class AdaptiveLimit:
    """Requests in flight, additive increase and multiplicative decrease (``limit`` is a float; the
    whole part is what may be sent)."""

    def __init__(self, start: int = ADAPTIVE_START, ceiling: int = ADAPTIVE_CEILING,
                 cut: float = CUT_FACTOR, tolerance: float = LATENCY_TOLERANCE) -> None:
        if not 1 <= start <= ceiling:
            raise ValueError(f"need 1 <= start <= ceiling, got start={start}, ceiling={ceiling}")
        if not 0 < cut < 1 or not tolerance > 1:
            raise ValueError(f"need 0 < cut < 1 and tolerance > 1, got cut={cut}, tolerance={tolerance}")
        self.limit = float(start)
        self.ceiling, self.cut_factor, self.tolerance = ceiling, cut, tolerance
        self.slow_start = True
        self.last_cut = -math.inf
        self.fastest = math.inf
        self.smoothed: float | None = None
        self.cuts = 0
        self.holds = 0

    @property
    def allowed(self) -> int:
        return max(1, int(self.limit))

    def answered(self, latency: float) -> None:
        """A request was answered after ``latency`` seconds."""
        if not latency >= 0:
            raise ValueError(f"latency must be >= 0, got {latency}")
        self.fastest = min(self.fastest, latency)
        self.smoothed = latency if self.smoothed is None else (
            (1 - LATENCY_SMOOTHING) * self.smoothed + LATENCY_SMOOTHING * latency)
        if self.fastest > 0 and self.smoothed > self.tolerance * self.fastest:
            self.slow_start = False  # the server queues: grow no further while it does
            self.holds += 1
            return
        self.limit = min(float(self.ceiling), self.limit + (1.0 if self.slow_start else 1.0 / self.limit))

    def throttled(self, sent_at: float, now: float) -> bool:
        """The server refused a request sent at ``sent_at`` for its rate; True when that cut the limit
        (a refusal of a request sent before the last cut is the same congestion, counted once)."""
        if sent_at < self.last_cut:
            return False
        self.slow_start = False
        self.limit = max(1.0, self.limit * self.cut_factor)
        self.last_cut = now
        self.cuts += 1
        return True


class TokenBucket:
    """A declared budget per minute (requests or tokens), one second of it as burst; ``reserve``
    takes what a request needs and says how long to wait before sending it (a debt is paid back
    at the budget's rate, so no minute holds more than the budget plus one second's burst)."""

    def __init__(self, per_minute: float, now: float) -> None:
        if not per_minute > 0 or math.isinf(per_minute):
            raise ValueError(f"a budget per minute must be a number > 0, got {per_minute}")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.at = now

    def reserve(self, amount: float, now: float) -> float:
        if amount < 0:
            raise ValueError(f"amount must be >= 0, got {amount}")
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        self.level -= amount
        return max(0.0, -self.level / self.rate)


class RequestGovernor:
    """What the client's threads ask before each item (``acquire_slot``/``release_slot``: requests
    in flight) and before each HTTP attempt (``pace``: declared budgets and the server's pause), and
    what they tell it after (``answered``, ``throttled``)."""

    def __init__(self, concurrency: Concurrency = ADAPTIVE, *, rpm: float | None = None,
                 tpm: float | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        concurrency = parse_concurrency(concurrency)
        self.adaptive = concurrency == ADAPTIVE
        self.fixed = None if self.adaptive else int(concurrency)
        self.control = AdaptiveLimit() if self.adaptive else None
        self.clock, self.sleep = clock, sleep
        now = clock()
        self.rpm = TokenBucket(rpm, now) if rpm is not None else None
        self.tpm = TokenBucket(tpm, now) if tpm is not None else None
        self.paused_until = -math.inf
        self.inflight = self.peak = 0
        self.requeued = 0  # refused requests waiting for a place again
        self.refusals = 0
        self._cond = threading.Condition()

    @property
    def ceiling(self) -> int:
        """The most threads the client may need."""
        return self.fixed if self.fixed is not None else ADAPTIVE_CEILING

    @property
    def limit(self) -> int:
        return self.fixed if self.fixed is not None else self.control.allowed

    def acquire_slot(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for room for one more request in flight (and for the end
        of a pause the server asked for); True when taken."""
        deadline = self.clock() + timeout
        with self._cond:
            while True:
                now = self.clock()
                if self.requeued == 0 and self._free(now):
                    self._take()
                    return True
                left = deadline - now
                if left <= 0:
                    return False
                self._cond.wait(min(left, self.paused_until - now) if now < self.paused_until else left)

    def _free(self, now: float) -> bool:
        return self.inflight < self.limit and now >= self.paused_until

    def _take(self) -> None:
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        self._cond.notify_all()

    def release_slot(self) -> None:
        with self._cond:
            self.inflight -= 1
            self._cond.notify_all()

    def requeue(self) -> None:
        """A refused request gives up its place and waits for one under the limit as it is now (the
        requests refused together would otherwise all come back together), ahead of new items (so
        that no item is refused again and again while others pass)."""
        with self._cond:
            self.inflight -= 1
            self.requeued += 1
            self._cond.notify_all()
            while not self._free(self.clock()):
                now = self.clock()
                self._cond.wait(min(1.0, self.paused_until - now) if now < self.paused_until else 1.0)
            self.requeued -= 1
            self._take()

    def pace(self, tokens: float) -> float:
        """Wait until one more HTTP attempt of about ``tokens`` tokens may go; the send time."""
        with self._cond:
            now = self.clock()
            wait = max(0.0, self.paused_until - now)
            if self.rpm is not None:
                wait = max(wait, self.rpm.reserve(1.0, now))
            if self.tpm is not None:
                wait = max(wait, self.tpm.reserve(tokens, now))
        if wait > 0:
            self.sleep(wait)
        return self.clock()

    def answered(self, sent_at: float, latency: float, headers: Mapping[str, str] | None = None,
                 tokens_next: float = 0.0) -> None:
        spent = exhausted_for(headers, tokens_next)
        with self._cond:
            if self.control is not None:
                self.control.answered(latency)
            if spent is not None:
                self._pause(spent)
                if self.control is not None:
                    self.control.throttled(sent_at, self.clock())
            self._cond.notify_all()

    def throttled(self, sent_at: float, headers: Mapping[str, str] | None = None) -> float | None:
        """A 429: pause for what the server asked (Retry-After, else its reset headers) and cut the
        adaptive limit; the pause in seconds, None when the server named none."""
        wait = retry_after(headers)
        if wait is None:
            wait = exhausted_for(headers)
        with self._cond:
            self.refusals += 1
            if wait is not None:
                self._pause(wait)
            if self.control is not None:
                self.control.throttled(sent_at, self.clock())
            self._cond.notify_all()
        return wait

    def pause(self, seconds: float) -> None:
        """No request is sent for ``seconds`` (a server's Retry-After on a 5xx)."""
        with self._cond:
            self._pause(seconds)

    def _pause(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, self.clock() + seconds)

    def summary(self) -> dict[str, float | int | str]:
        with self._cond:
            out: dict[str, float | int | str] = {
                "concurrency": ADAPTIVE if self.adaptive else int(self.fixed or 0),
                "peak_in_flight": self.peak, "refused_429": self.refusals}
            if self.control is not None:
                out |= {"final_limit": self.control.allowed, "cuts": self.control.cuts}
            return out
