"""Requests in flight and per-minute budgets (judgebias.backends.rate_control), by hand on small
sequences, then through the real client against the local stub endpoint with a rate limit."""

from __future__ import annotations

import pytest

from judgebias.backends import rate_control as rc
from judgebias.backends.call_cache import CachedBackend, ResponseCache
from judgebias.backends.openai_compat import OpenAICompatBackend
from judgebias.backends.protocol import Prompt
from judgebias.bench.openai_stub import StubServer, StubState


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_slow_start_then_one_cut_per_round_trip_then_one_per_round_trip():
    lim = rc.AdaptiveLimit(start=4, ceiling=100)
    for _ in range(4):
        lim.answered(0.5)
    assert lim.limit == 8  # slow start: +1 per answer, 4 answers -> 4 + 4
    assert lim.throttled(sent_at=1.0, now=2.0) and lim.limit == pytest.approx(7.2)  # 8 * 0.9
    # Refusals of requests sent before the cut are the same congestion: not cut again.
    assert not lim.throttled(sent_at=1.5, now=2.1) and lim.limit == pytest.approx(7.2)
    assert lim.throttled(sent_at=2.5, now=3.0) and lim.limit == pytest.approx(6.48)  # 7.2 * 0.9
    lim.answered(0.5)
    assert lim.limit == pytest.approx(6.48 + 1 / 6.48)  # after a cut: +1 per round trip (1/limit each)
    assert lim.allowed == 6 and lim.cuts == 2


def test_rising_latency_holds_then_cuts_the_limit():
    lim = rc.AdaptiveLimit(start=4)
    lim.answered(0.5, now=10.0)  # usual = recent = 0.5; grows to 5
    # usual = 0.98 * 0.5 + 0.02 * 3 = 0.55; recent = 0.8 * 0.5 + 0.2 * 3 = 1.0 (not > 2 * 0.55): 6
    lim.answered(3.0, now=11.0)
    assert lim.limit == 6
    # usual = 0.98 * 0.55 + 0.06 = 0.599; recent = 0.8 * 1.0 + 0.6 = 1.4 (> 1.198): held and cut
    # once, 6 * 0.9 = 5.4; slow start is over
    lim.answered(3.0, now=12.0)
    assert lim.limit == pytest.approx(5.4) and lim.holds == 1 and not lim.slow_start
    lim.answered(3.0, now=12.5)  # sent at 9.5, before that cut: held, not cut again
    assert lim.limit == pytest.approx(5.4) and lim.holds == 2 and lim.cuts == 1
    # Another kind of call (a generation's time per token) is compared with its own kind only.
    lim.answered(0.02, now=13.0, kind="per output token")
    assert lim.kinds["per output token"] == (0.02, 0.02)
    with pytest.raises(ValueError):
        lim.answered(-1.0)


def test_limit_stays_between_one_and_the_ceiling():
    lim = rc.AdaptiveLimit(start=2, ceiling=3)
    for _ in range(10):
        lim.answered(0.1)
    assert lim.limit == 3
    for t in range(30):  # 3 * 0.9 ** 30 < 1
        lim.throttled(sent_at=float(t), now=float(t))
    assert lim.allowed == 1 and lim.limit == 1.0
    with pytest.raises(ValueError):
        rc.AdaptiveLimit(start=0)


def test_token_bucket_paces_a_declared_budget():
    bucket = rc.TokenBucket(120, now=0.0)  # 2 per second, burst 2
    assert [bucket.reserve(1, 0.0) for _ in range(4)] == [0.0, 0.0, 0.5, 1.0]  # debt of 2 -> 1 s
    assert bucket.reserve(1, 10.0) == 0.0  # refilled (to the burst only)
    tokens = rc.TokenBucket(600, now=0.0)  # 10 tokens a second, burst 10
    assert tokens.reserve(30, 0.0) == 2.0  # one request larger than the burst goes, then waits 20/10
    with pytest.raises(ValueError):
        rc.TokenBucket(0, now=0.0)


def test_headers_parsed_as_openai_sends_them():
    assert rc.parse_duration("6m0s") == 360 and rc.parse_duration("20ms") == 0.02
    assert rc.parse_duration("1.5s") == 1.5 and rc.parse_duration("0.25") == 0.25
    assert rc.parse_duration("soon") is None and rc.parse_duration(None) is None
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
             "x-ratelimit-remaining-tokens": "500", "x-ratelimit-reset-tokens": "6m0s"}
    assert rc.exhausted_for(spent) == 2.0  # tokens left for a request of 1 token
    assert rc.exhausted_for(spent, tokens_next=800) == 360.0
    assert rc.exhausted_for({"x-ratelimit-remaining-requests": "3"}) is None
    # With the budget per minute: only until the missing request is back, 60 / 1200 = 0.05 s.
    assert rc.exhausted_for({**spent, "x-ratelimit-limit-requests": "1200"}) == pytest.approx(0.05)
    # 800 - 500 = 300 tokens missing at 100,000 a minute: 300 * 60 / 1e5 = 0.18 s
    assert rc.exhausted_for({**spent, "x-ratelimit-limit-requests": "1200",
                             "x-ratelimit-limit-tokens": "100000"}, tokens_next=800) == pytest.approx(0.18)
    assert rc.retry_after({"retry-after": "1.5"}) == 1.5 and rc.retry_after({}) is None
    assert rc.parse_concurrency("adaptive") == "adaptive" and rc.parse_concurrency("16") == 16
    for bad in ("0", "many", 2.5):
        with pytest.raises(ValueError, match="adaptive"):
            rc.parse_concurrency(bad)


def test_governor_waits_out_a_pause_and_a_budget():
    clock = FakeClock()
    gov = rc.RequestGovernor(2, rpm=60, clock=clock, sleep=clock.sleep)
    assert gov.acquire_slot(0) and gov.acquire_slot(0) and not gov.acquire_slot(0)  # fixed at 2
    gov.release_slot()
    assert gov.pace(10) == 0.0  # 1 request a second, burst 1: the first goes now
    assert gov.pace(10) == 1.0  # the second waits a second
    assert gov.throttled(sent_at=1.0, headers={"retry-after": "3"}) == 3.0
    assert gov.pace(10) == 4.0  # the pause outlasts the budget's wait (1 s)
    assert gov.summary() == {"concurrency": 2, "peak_in_flight": 2, "refused_429": 1}


def prompts(n: int) -> list[Prompt]:
    return [Prompt.chat(("user", f"Question {i}: which is better, A or B?")) for i in range(n)]


def test_adaptive_client_at_a_rate_limit_loses_and_repeats_nothing(tmp_path):
    # 600 a minute (10/s, burst 10), 0.05 s per answer: adaptive grows past 10 in flight, meets 429s,
    # waits the Retry-After and cuts; every item ends with one answer stored in the cache.
    state = StubState(latency_s=0.05, rpm=600)
    with StubServer(state) as server:
        backend = OpenAICompatBackend("stub", server.base_url, max_tries=20, timeout_s=10)
        cached = CachedBackend(backend, ResponseCache(tmp_path), chunk_size=1000)
        out = cached.score_options(prompts(60), ["A", "B"])
        again = CachedBackend(OpenAICompatBackend("stub", server.base_url, concurrency=3),
                              ResponseCache(tmp_path))
        assert again.score_options(prompts(60), ["A", "B"]) == out and again.hits == 60
    seen = state.summary()
    assert all(s.error is None and s.probs["A"] > 0.5 for s in out)
    assert seen["distinct"] == 60 and seen["answered_twice"] == 0 and seen["accepted"] == 60
    assert seen["refused_429"] > 0  # the limit was met, and lived through
    summary = backend.request_summary()
    assert summary["concurrency"] == "adaptive" and summary["refused_429"] == seen["refused_429"]
    assert summary["peak_in_flight"] > rc.ADAPTIVE_START and summary["cuts"] >= 1


def test_rate_headers_pause_the_client_before_it_is_refused():
    state = StubState(latency_s=0.0, rpm=1200, rate_headers=True)  # 20/s, burst 20
    with StubServer(state) as server:
        backend = OpenAICompatBackend("stub", server.base_url, max_tries=20, timeout_s=10)
        out = backend.score_options(prompts(50), ["A", "B"])
    assert all(s.error is None for s in out) and state.summary()["accepted"] == 50
    # The client keeps the server's budget as its headers state it (less the requests still on their
    # way) and spaces its sends at the announced 1,200/min once it is spent: no request is refused.
    # Without the headers: 18-51 refusals in 8 runs (2026-11-29); with them, before the client kept
    # the budget (it paused only until one request was back, then sent every waiting one at once):
    # 8-37 adaptive, 42-58 at 4 in flight.
    assert state.summary()["refused_429"] == 0


def test_the_announced_budget_spaces_the_sends_once_it_is_spent():
    clock = FakeClock()
    gov = rc.RequestGovernor(4, clock=clock, sleep=clock.sleep)
    spent = {"x-ratelimit-limit-requests": "1200", "x-ratelimit-remaining-requests": "0",
             "x-ratelimit-reset-requests": "1s"}
    for _ in range(4):
        assert gov.acquire_slot(1.0)
    gov.answered(sent_at=0.0, latency=0.1, headers=spent)  # 3 others still in flight
    # Paused until one request is back (1 / 20 per s = 0.05 s); the 3 in flight are owed too, so the
    # next send waits for 4 requests' worth: 0.2 s; each after it 0.05 s later (20 per s).
    sends = [gov.pace(1.0) for _ in range(3)]
    assert sends == pytest.approx([0.2, 0.25, 0.3])
    gov.answered(sent_at=0.2, latency=0.0, headers={"x-ratelimit-limit-requests": "1200",
                                                     "x-ratelimit-remaining-requests": "15"})
    clock.now = 10.0  # a quiet while: the budget is back to one second's worth, and no wait
    assert gov.pace(1.0) == 10.0
    assert rc.announced_budget({"x-ratelimit-remaining-requests": "3"}, "requests") is None


def test_the_adaptive_limit_does_not_grow_while_the_stated_budget_holds_the_sends():
    clock = FakeClock()
    gov = rc.RequestGovernor(clock=clock, sleep=clock.sleep)  # adaptive, 4 in flight to start
    for _ in range(4):
        assert gov.acquire_slot(1.0)
    budget = {"x-ratelimit-limit-requests": "1200"}
    # 2 left, but 3 others on their way: spent (2 - 3 < 1), so this answer adds no place
    gov.answered(sent_at=0.0, latency=0.1, headers={**budget, "x-ratelimit-remaining-requests": "2"})
    assert gov.limit == 4 and gov.summary()["cuts"] == 0  # nor cuts: the server said 2 were left
    clock.now = 5.0  # refilled: 15 left beyond the 3 others
    gov.answered(sent_at=4.9, latency=0.1, headers={**budget, "x-ratelimit-remaining-requests": "18"})
    assert gov.limit == 5  # slow start's one place per answer


def test_declared_rpm_keeps_the_client_under_the_limit():
    state = StubState(latency_s=0.0, rpm=600)  # 10/s, burst 10
    with StubServer(state) as server:
        backend = OpenAICompatBackend("stub", server.base_url, max_tries=5, timeout_s=10, rpm=300)
        out = backend.score_options(prompts(20), ["A", "B"])
    assert all(s.error is None for s in out)
    assert state.summary()["refused_429"] == 0  # 5/s declared, 10/s allowed: never refused
    times = state.accepted_times
    # 20 requests at 5/s with a burst of 5: the last is sent (20 - 5) / 5 = 3 s after the first (the
    # budget's arithmetic; 0.5 s allowed for the first request's connection, which can reach the
    # server later than it was sent). Unpaced, the 20 arrive within a fraction of a second.
    assert times[-1] - times[0] >= 3.0 - 0.5


def test_a_timeout_cuts_the_adaptive_limit_once_per_round_trip():
    clock = FakeClock()
    gov = rc.RequestGovernor(clock=clock, sleep=clock.sleep)
    clock.now = 1.0
    assert gov.timed_out(sent_at=0.0)  # 4 * 0.9 = 3.6: 3 may be sent; sent among others: spared
    assert gov.timed_out(sent_at=0.5)  # sent before that cut: the same overload
    assert not rc.RequestGovernor(1, clock=clock).timed_out(0.0)  # alone in flight: a real try
    assert gov.limit == 3 and gov.summary()["timeouts"] == 2 and gov.summary()["cuts"] == 1
    assert gov.pace(1) == 1.0  # no pause: a timeout names no time to come back
