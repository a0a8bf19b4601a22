"""How many requests an OpenAI-compatible endpoint gets at once, and how fast.

``AdaptiveLimit`` (pure, times passed in) finds the number of requests in flight a provider allows:
it starts at 4, grows by one per answered request (doubling per round trip) until the first sign
of congestion, then by one per round trip; a 429 (or a rate-limit header saying nothing is left)
cuts it, at most once per round trip (requests sent before the last cut say nothing new), by a
tenth and at least to a quarter above what the provider is answering: the answers per second of
the last moments times the latency (Little's law; a limit of requests a minute is a rate, and the
requests in flight it allows are that rate times the time one takes). A refusal also sets a send
rate, 3% under the answers per second of the last moments, that then rises by 2% of itself a
second until the next refusal: a provider's limit is a rate, and requests sent evenly at it are
not refused, where a burst of them is (the client of a limit of 10 a second, 0.2 s a request,
with only a limit on requests in flight was refused about once per answer). A smoothed latency
above twice the usual one (a slow running average) stops its growth and cuts it once a round trip
(a server queueing requests answers slower, not faster; a generation's time is taken per output
token); a request that times out cuts it like a 429. ``TokenBucket`` paces what a user declared
(``rpm`` / ``tpm``). ``RequestGovernor`` puts both behind a lock for the client's threads, with a
pause every request waits out when the server asked for one (Retry-After, ``x-ratelimit-reset-*``).

Nothing here is part of what a call returns, so none of it is in a cache key.
"""

from __future__ import annotations

import collections
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
LATENCY_SMOOTHING = 0.2  # weight of the newest latency in the recent running average
BASELINE_SMOOTHING = 0.02  # ... and in the usual one (a long memory: queueing shows against it)
IN_FLIGHT_MARGIN = 1.25  # a cut keeps this much above the requests in flight the answers sustain
RATE_WINDOW_S = 2.0  # the answers of the last moments that say what the provider sustains
RATE_BELOW = 0.97  # the send rate after a refusal, as a share of the answers per second
RATE_PROBE = 0.02  # how fast the send rate rises again: this share of itself per second

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
    spent (no request left, or fewer tokens left than the next request needs); None when nothing
    is spent or nothing is said. OpenAI's ``x-ratelimit-reset-*`` is the time until the whole budget
    is back; the wait is only until what is missing is back (the missing part over the
    ``x-ratelimit-limit-*`` per minute), at most that reset, else one second."""
    waits = []
    for what, need in (("requests", 1.0), ("tokens", max(tokens_next, 1.0))):
        left = header_number(headers, f"x-ratelimit-remaining-{what}")
        if left is None or left >= need:
            continue
        reset = parse_duration((headers or {}).get(f"x-ratelimit-reset-{what}"))
        per_minute = header_number(headers, f"x-ratelimit-limit-{what}")
        back = (need - left) * 60.0 / per_minute if per_minute and per_minute > 0 else None
        options = [w for w in (reset, back) if w is not None]
        waits.append(min(options) if options else 1.0)
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
        # kind -> (the usual latency: a slow running average; the recent one: a fast average)
        self.kinds: dict[str, tuple[float, float]] = {}
        self.cuts = 0
        self.holds = 0
        self.recent: collections.deque[float] = collections.deque()  # when the last answers came
        self.rate: float | None = None  # answers a second the last refusal left; None: no pacing

    @property
    def allowed(self) -> int:
        return max(1, int(self.limit))

    def answered(self, latency: float, now: float | None = None, kind: str = "call",
                 grow: bool = True) -> None:
        """A request was answered after ``latency`` seconds (at ``now``, for the answer rate).
        ``kind``: latencies of one kind are compared with each other only (a scoring call's with
        scoring calls', a generation's time per token with generations'). ``grow=False``: the answer
        says nothing about room for more (the server's stated budget is what holds the sends back)."""
        if not latency >= 0:
            raise ValueError(f"latency must be >= 0, got {latency}")
        if now is not None:
            self.recent.append(now)
            window = max(RATE_WINDOW_S, 4 * (self.smoothed or 0.0))
            while self.recent and self.recent[0] < now - window:
                self.recent.popleft()
        self.fastest = min(self.fastest, latency)
        usual, recent = self.kinds.get(kind, (latency, latency))
        usual = (1 - BASELINE_SMOOTHING) * usual + BASELINE_SMOOTHING * latency
        recent = (1 - LATENCY_SMOOTHING) * recent + LATENCY_SMOOTHING * latency
        self.kinds[kind] = (usual, recent)
        if kind == "call" or self.smoothed is None:
            self.smoothed = recent
        if usual > 0 and recent > self.tolerance * usual:
            # The server queues: answers come slower, not faster. Grow no further; shrink once a
            # round trip while it lasts (requests sent before the last cut say nothing new).
            self.slow_start = False
            self.holds += 1
            if now is not None and now - latency >= self.last_cut:
                self.limit = max(1.0, self.limit * self.cut_factor)
                self.last_cut = now
                self.cuts += 1
            return
        if grow:
            self.limit = min(float(self.ceiling), self.limit + (1.0 if self.slow_start else 1.0 / self.limit))

    def answer_rate(self, now: float) -> float | None:
        """Answers a second over the last moments; None with fewer than 4 of them."""
        times = [t for t in self.recent if t >= now - max(RATE_WINDOW_S, 4 * (self.smoothed or 0.0))]
        if len(times) < 4:
            return None
        return len(times) / max(now - times[0], 1e-9)

    def sustained(self, now: float) -> float | None:
        """Requests in flight the recent answers sustain: answers per second times the smoothed
        latency; None with fewer than 4 recent answers."""
        rate = self.answer_rate(now)
        return None if rate is None or self.smoothed is None else rate * self.smoothed

    def send_rate(self, now: float) -> float | None:
        """Requests a second to send at (None: as fast as the limit on requests in flight allows)."""
        if self.rate is None:
            return None
        return self.rate * (1 + RATE_PROBE * max(0.0, now - self.last_cut))

    def throttled(self, sent_at: float, now: float) -> bool:
        """The server refused a request sent at ``sent_at`` for its rate; True when that cut the limit
        (a refusal of a request sent before the last cut is the same congestion, counted once)."""
        if sent_at < self.last_cut:
            return False
        self.slow_start = False
        cut = self.limit * self.cut_factor
        sustained = self.sustained(now)
        if sustained is not None:
            cut = min(cut, IN_FLIGHT_MARGIN * sustained)
            answers = self.answer_rate(now)
            current = self.send_rate(now)
            self.rate = RATE_BELOW * (answers if current is None else min(current, answers))
        self.limit = max(1.0, cut)
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


def announced_budget(headers: Mapping[str, str] | None, what: str) -> tuple[float, float] | None:
    """(left, per minute) of the server's ``x-ratelimit-remaining-*`` and ``x-ratelimit-limit-*``
    headers for ``what`` (requests or tokens); None unless it says both."""
    left = header_number(headers, f"x-ratelimit-remaining-{what}")
    per_minute = header_number(headers, f"x-ratelimit-limit-{what}")
    if left is None or per_minute is None or not 0 < per_minute < math.inf:
        return None
    return max(0.0, left), per_minute


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
        # The server's own budgets as its rate-limit headers state them. The pause after "none left"
        # lasts until one request is back; without this bucket every waiting request then went at
        # once and all but one were refused (42-58 refusals for 50 requests at 4 in flight against a
        # 1,200/min stub). Kept at what the server last said, less what was sent since.
        self.announced: dict[str, TokenBucket] = {}
        self.paused_until = -math.inf
        self.next_send = -math.inf  # the adaptive send rate's next free moment
        self.inflight = self.peak = 0
        self.requeued = 0  # refused requests waiting for a place again
        self.refusals = self.timeouts = 0
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
            for what, amount in (("requests", 1.0), ("tokens", tokens)):
                if what in self.announced:
                    wait = max(wait, self.announced[what].reserve(amount, now))
            rate = self.control.send_rate(now) if self.control is not None else None
            if rate:
                at = max(self.next_send, now + wait)
                self.next_send = at + 1.0 / rate
                wait = at - now
        if wait > 0:
            self.sleep(wait)
        return self.clock()

    def answered(self, sent_at: float, latency: float, headers: Mapping[str, str] | None = None,
                 tokens_next: float = 0.0, kind: str = "call") -> None:
        spent = exhausted_for(headers, tokens_next)
        with self._cond:
            self._heard(headers)
            if self.control is not None:
                # While the stated budget is spent, sends wait for it, not for a place in flight: more
                # places would only wait too (without this the limit climbed to its ceiling, 256).
                spent_budget = "requests" in self.announced and self.announced["requests"].level < 1.0
                self.control.answered(latency, self.clock(), kind, grow=not spent_budget)
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
            self._heard(headers)
            self.refusals += 1
            if wait is not None:
                self._pause(wait)
            if self.control is not None:
                self.control.throttled(sent_at, self.clock())
            self._cond.notify_all()
        return wait

    def timed_out(self, sent_at: float) -> bool:
        """A request sent at ``sent_at`` got no answer in time: the server is overloaded, as a 429
        says, without saying when to come back (no pause, no send rate). True when the adaptive
        limit was above one request (the timeout is then the client's doing, not the server's)."""
        with self._cond:
            self.timeouts += 1
            crowded = self.control is not None and self.control.allowed > 1
            if self.control is not None and sent_at >= self.control.last_cut:
                self.control.slow_start = False
                self.control.limit = max(1.0, self.control.limit * CUT_FACTOR)
                self.control.last_cut = self.clock()
                self.control.cuts += 1
            self._cond.notify_all()
            return crowded

    def pause(self, seconds: float) -> None:
        """No request is sent for ``seconds`` (a server's Retry-After on a 5xx)."""
        with self._cond:
            self._pause(seconds)

    def _heard(self, headers: Mapping[str, str] | None) -> None:
        """Set the announced budgets to what a response's headers say is left. The other requests in
        flight may not have reached the server yet: their share is taken off too, so that the model
        never holds more than the server can still have."""
        now = self.clock()
        others = max(0, self.inflight - 1)
        for what in ("requests", "tokens"):
            said = announced_budget(headers, what)
            if said is None:
                continue
            left, per_minute = said
            bucket = self.announced.get(what)
            if bucket is None or bucket.rate != per_minute / 60.0:
                bucket = self.announced[what] = TokenBucket(per_minute, now)
            bucket.reserve(0.0, now)  # refill to now, then never above what the server said
            bucket.level = min(bucket.level, left - (others if what == "requests" else 0.0))

    def _pause(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, self.clock() + seconds)

    def summary(self) -> dict[str, float | int | str]:
        with self._cond:
            out: dict[str, float | int | str] = {
                "concurrency": ADAPTIVE if self.adaptive else int(self.fixed or 0),
                "peak_in_flight": self.peak, "refused_429": self.refusals}
            if self.timeouts:
                out["timeouts"] = self.timeouts
            if self.control is not None:
                out |= {"final_limit": self.control.allowed, "cuts": self.control.cuts}
            return out
