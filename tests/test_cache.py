"""The content-addressed call cache: hits, misses, what is (not) in the key, failures, killed runs."""

from __future__ import annotations

import math
import multiprocessing
import pickle
import sqlite3

import pytest

from judgebias.backends.call_cache import (
    CachedBackend,
    ResponseCache,
    call_key,
    default_cache_dir,
)
from judgebias.backends.protocol import (
    Backend,
    Generation,
    GenerationParams,
    OptionScores,
    Prompt,
    TokenLogprobs,
)


class CountingBackend:
    """A deterministic fake judge that counts the items it is asked about.

    ``fail_on`` marks prompts (by substring) answered off-format; ``explode_after`` raises on the
    n-th call batch, standing in for a run that is killed half-way.
    """

    name = "fake"

    def __init__(self, model: str = "m1", endpoint: str = "http://127.0.0.1:1/v1", *, api_key: str = "k",
                 timeout: float = 30.0, max_retries: int = 3, fail_on: str | None = None,
                 explode_after: int | None = None) -> None:
        self.model, self.endpoint = model, endpoint
        # Deliberately NOT in identity(): they must not change the key.
        self.api_key, self.timeout, self.max_retries = api_key, timeout, max_retries
        self.fail_on, self.explode_after = fail_on, explode_after
        self.items = 0
        self.batches: list[int] = []

    def identity(self) -> dict:
        return {"kind": "fake", "model": self.model, "endpoint": self.endpoint}

    def _tick(self, n: int) -> None:
        if self.explode_after is not None and len(self.batches) >= self.explode_after:
            raise KeyboardInterrupt("killed")
        self.batches.append(n)
        self.items += n

    def score_options(self, prompts, options):
        self._tick(len(prompts))
        out = []
        for p in prompts:
            text = p.messages[-1].content if p.messages else p.text
            if self.fail_on and self.fail_on in text:
                nan = dict.fromkeys(options, math.nan)
                out.append(OptionScores(nan, raw="I think both", error="off-format"))
            else:
                pa = (len(text) % 7 + 1) / 9  # deterministic, distinct per prompt
                out.append(OptionScores({options[0]: pa, options[1]: 1 - pa}, mass=0.9, raw=options[0]))
        return out

    def generate(self, prompts, params):
        self._tick(len(prompts))
        return [Generation(f"echo:{p.key()}:{params.max_new_tokens}", prompt_tokens=3, completion_tokens=4,
                           seconds=0.1) for p in prompts]

    def continuation_logprobs(self, contexts, continuations):
        self._tick(len(contexts))
        return [TokenLogprobs(tuple(-0.5 * (i + 1) for i in range(len(c)))) for c in continuations]


def prompts(n: int, tag: str = "q") -> list[Prompt]:
    return [Prompt.chat(("system", "You are a judge."), ("user", f"{tag} {i} " + "x" * i)) for i in range(n)]


@pytest.fixture
def cache(tmp_path) -> ResponseCache:
    c = ResponseCache(tmp_path / "cache")
    yield c
    c.close()


def test_fake_backend_satisfies_protocol():
    assert isinstance(CountingBackend(), Backend)
    assert isinstance(CachedBackend(CountingBackend(), ResponseCache(None)), Backend)


def test_n_calls_then_zero_on_rerun_then_n_without_cache(cache):
    ps = prompts(6)
    first = CachedBackend(inner := CountingBackend(), cache)
    r1 = first.score_options(ps, ["A", "B"])
    assert (inner.items, first.calls, first.hits) == (6, 6, 0)

    # A new process would build a new backend and cache object over the same file.
    again = CachedBackend(inner2 := CountingBackend(), ResponseCache(cache.path))
    r2 = again.score_options(ps, ["A", "B"])
    assert (inner2.items, again.calls, again.hits) == (0, 0, 6)
    assert r2 == r1  # same values, same order, decoded into the same dataclasses

    off = CachedBackend(inner3 := CountingBackend(), ResponseCache(None))
    off.score_options(ps, ["A", "B"])
    off.score_options(ps, ["A", "B"])
    assert (inner3.items, off.calls, off.hits) == (12, 12, 0)
    assert not ResponseCache.from_env(enabled=False).enabled


def test_partial_hits_forward_only_misses_in_one_batch_in_input_order(cache):
    cb = CachedBackend(inner := CountingBackend(), cache)
    ps = prompts(5)
    cb.score_options([ps[1], ps[3]], ["A", "B"])
    out = cb.score_options(ps, ["A", "B"])
    assert inner.batches == [2, 3]  # the 3 misses went in one call
    assert (cb.calls, cb.hits) == (5, 2)
    fresh = CountingBackend().score_options(ps, ["A", "B"])
    assert out == fresh


def test_repeated_item_in_a_batch_is_forwarded_once(cache):
    cb = CachedBackend(inner := CountingBackend(), cache)
    p = prompts(2)
    out = cb.score_options([p[0], p[1], p[0]], ["A", "B"])
    assert inner.items == 2 and out[0] == out[2]


def test_all_three_operations_round_trip(cache):
    cb = CachedBackend(inner := CountingBackend(), cache)
    ps = prompts(3)
    params = GenerationParams(max_new_tokens=8)
    g1 = cb.generate(ps, params)
    t1 = cb.continuation_logprobs(ps, ["ab", "abc", "abcd"])
    cb2 = CachedBackend(CountingBackend(), ResponseCache(cache.path))
    assert cb2.generate(ps, params) == g1
    t2 = cb2.continuation_logprobs(ps, ["ab", "abc", "abcd"])
    assert t2 == t1 and isinstance(t2[0].logprobs, tuple)
    assert cb2.calls == 0 and cb2.hits == 6 and inner.items == 6
    with pytest.raises(ValueError, match="2 contexts but 1 continuations"):
        cb.continuation_logprobs(ps[:2], ["x"])


def test_failures_are_not_cached(cache):
    ps = [*prompts(3), Prompt.chat(("user", "please BREAK"))]
    cb = CachedBackend(inner := CountingBackend(fail_on="BREAK"), cache)
    out = cb.score_options(ps, ["A", "B"])
    assert out[3].error == "off-format" and cb.stats.stored == 3
    again = cb.score_options(ps, ["A", "B"])
    assert inner.batches == [4, 1]  # only the failed item is retried
    assert again[3].error == "off-format"
    assert len(cache) == 3


def test_bounded_scores_are_a_result_and_cached(cache):
    # An option outside an API's top log-probs: NaN probs with bounds is an answer, not a failure.
    class Bounded(CountingBackend):
        def score_options(self, prompts, options):
            self._tick(len(prompts))
            return [OptionScores(dict.fromkeys(options, math.nan), mass=0.97, raw="A",
                                 bounds={options[0]: [0.99, 1.0], options[1]: [0.0, 0.01]}) for _ in prompts]

    cb = CachedBackend(inner := Bounded(), cache)
    first = cb.score_options(prompts(2), ["A", "B"])
    again = cb.score_options(prompts(2), ["A", "B"])
    assert inner.batches == [2] and cb.stats.stored == 2
    assert again[0].bounds == {"A": [0.99, 1.0], "B": [0.0, 0.01]} and again[0].mass == 0.97
    assert first[0].bounds == again[0].bounds


def key_of(backend=None, op="score_options", prompt=None, options=("A", "B"), params=None, continuation=None,
           template=""):
    backend = backend or CountingBackend()
    prompt = prompt or Prompt.chat(("user", "which is better?"))
    if op == "score_options":
        payload = {"prompt": prompt.key(), "options": list(options)}
    elif op == "generate":
        payload = {"prompt": prompt.key(), "params": (params or GenerationParams()).key()}
    else:
        payload = {"prompt": prompt.key(), "continuation": continuation or "yes"}
    return call_key(backend.identity(), op, payload, template)


def test_key_changes_with_every_component():
    base = key_of()
    variants = {
        "model": key_of(backend=CountingBackend(model="m2")),
        "endpoint": key_of(backend=CountingBackend(endpoint="http://127.0.0.1:2/v1")),
        "operation": key_of(op="continuation_logprobs"),
        "prompt text": key_of(prompt=Prompt.chat(("user", "which is better?!"))),
        "prompt role": key_of(prompt=Prompt.chat(("system", "which is better?"))),
        "raw vs chat": key_of(prompt=Prompt.raw("which is better?")),
        "assistant prefix": key_of(prompt=Prompt.chat(("user", "which is better?"), assistant_prefix="[[")),
        "options": key_of(options=("1", "2")),
        "option order": key_of(options=("B", "A")),
        "template": key_of(template="v2"),
    }
    assert len({base, *variants.values()}) == len(variants) + 1, variants
    gen = key_of(op="generate")
    for field, value in [("max_new_tokens", 9), ("temperature", 0.7), ("top_p", 0.9), ("seed", 1),
                         ("stop", ("\n",))]:
        assert key_of(op="generate", params=GenerationParams(**{field: value})) != gen, field
    assert key_of(op="continuation_logprobs", continuation="no") != key_of(op="continuation_logprobs")
    with pytest.raises(ValueError, match="unknown cached operation"):
        key_of(op="embed")


def test_key_ignores_timeouts_retries_and_api_key():
    base = key_of()
    assert key_of(backend=CountingBackend(api_key="sk-other", timeout=1.0, max_retries=0)) == base


def test_template_version_view_shares_cache_and_counters(cache):
    cb = CachedBackend(inner := CountingBackend(), cache, template_version="v1")
    ps = prompts(2)
    cb.score_options(ps, ["A", "B"])
    v2 = cb.with_template("v2")
    v2.score_options(ps, ["A", "B"])  # a new template version must not reuse v1's answers
    assert inner.items == 4 and cb.calls == 4
    cb.with_template("v1").score_options(ps, ["A", "B"])
    assert inner.items == 4 and cb.hits == 2
    assert v2.name == "fake" and v2.identity() == inner.identity()


def test_killed_run_keeps_finished_batches(cache):
    ps = prompts(10)
    batches = [ps[i:i + 3] for i in range(0, 10, 3)]  # 3, 3, 3, 1
    cb = CachedBackend(CountingBackend(explode_after=2), cache)
    with pytest.raises(KeyboardInterrupt):
        for b in batches:
            cb.score_options(b, ["A", "B"])
    assert len(cache) == 6  # two committed batches

    rerun = CachedBackend(inner := CountingBackend(), ResponseCache(cache.path))
    for b in batches:
        rerun.score_options(b, ["A", "B"])
    assert (rerun.hits, rerun.calls) == (6, 4) and inner.batches == [3, 1]


def test_chunked_forwarding_keeps_finished_chunks_of_one_big_batch(cache):
    ps = prompts(7)
    cb = CachedBackend(CountingBackend(explode_after=2), cache, chunk_size=3)
    with pytest.raises(KeyboardInterrupt):
        cb.score_options(ps, ["A", "B"])  # one caller batch, dies in its third chunk
    assert len(cache) == 6
    rerun = CachedBackend(inner := CountingBackend(), ResponseCache(cache.path), chunk_size=3)
    out = rerun.score_options(ps, ["A", "B"])
    assert inner.batches == [1] and out == CountingBackend().score_options(ps, ["A", "B"])
    with pytest.raises(ValueError, match="chunk_size"):
        CachedBackend(CountingBackend(), cache, chunk_size=0)


def test_ctrl_c_stops_right_after_the_batch_being_computed_is_stored(cache):
    import os
    import signal

    from judgebias.runs import interrupts

    class CtrlCDuringSecondBatch(CountingBackend):
        def score_options(self, prompts, options):
            out = super().score_options(prompts, options)
            if len(self.batches) == 2:  # the user presses Ctrl-C while the 2nd batch computes
                os.kill(os.getpid(), signal.SIGINT)
            return out

    before = signal.getsignal(signal.SIGINT)
    cb = CachedBackend(inner := CtrlCDuringSecondBatch(), cache, chunk_size=3)
    with interrupts.stop_between_batches(), pytest.raises(KeyboardInterrupt, match="stop requested"):
        cb.score_options(prompts(10), ["A", "B"])
    assert inner.batches == [3, 3] and len(cache) == 6  # the interrupted batch finished and was kept
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back
    cb.score_options(prompts(10), ["A", "B"])  # outside the block nothing is pending any more
    assert inner.batches == [3, 3, 3, 1]


def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_again_by_the_next_check():
    # `judgebias run`'s Ctrl-C raises at once; one that lands inside a finalizer (run by a collection,
    # as opening a backend does) is printed as "Exception ignored" and dropped by Python. Remembered,
    # the next check (after a stored batch, at a stage's edge) raises it again.
    import gc
    import os
    import signal
    import time

    from judgebias.runs import interrupts

    class PressedDuringFinalizer:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here and its KeyboardInterrupt is swallowed

    before = signal.getsignal(signal.SIGINT)
    with interrupts.stop_at_once_remembered():
        with pytest.raises(KeyboardInterrupt):  # an ordinary Ctrl-C still stops at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        interrupts._REQUESTED.clear()
        holder = [PressedDuringFinalizer()]
        holder.append(holder)  # a cycle: only a collection finalizes it
        del holder
        gc.collect()  # prints "Exception ignored in ... KeyboardInterrupt" and goes on
        with pytest.raises(KeyboardInterrupt, match="stop requested"):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is before
    interrupts.check()  # outside the block nothing is pending any more


def test_cache_is_picklable_and_on_disk_schema(cache, tmp_path):
    cb = CachedBackend(CountingBackend(), cache)
    cb.score_options(prompts(2), ["A", "B"])
    clone = pickle.loads(pickle.dumps(cb))  # what a Dask worker receives
    assert clone.cache.path == cache.path and len(clone.cache) == 2
    with sqlite3.connect(cache.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        ops = {r[0] for r in conn.execute("SELECT op FROM calls")}
    assert ops == {"score_options"}
    assert ResponseCache(tmp_path / "x.sqlite").path == tmp_path / "x.sqlite"


def test_default_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("JUDGEBIAS_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert ResponseCache.from_env().path == tmp_path / "c" / "calls.sqlite"
    monkeypatch.delenv("JUDGEBIAS_CACHE_DIR")
    assert str(default_cache_dir()).endswith(".cache/judgebias/calls")


def _writer(path: str, tag: str) -> None:
    cb = CachedBackend(CountingBackend(), ResponseCache(path))
    for i in range(5):
        cb.score_options(prompts(4, tag=f"{tag}{i}"), ["A", "B"])


def test_several_processes_write_one_cache(tmp_path):
    path = str(tmp_path / "shared")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, t)) for t in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(ResponseCache(path)) == 2 * 5 * 4


def test_unusable_cache_location_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    expected = r"cannot open the model-call cache at .*file/calls.sqlite.*JUDGEBIAS_CACHE_DIR"
    with pytest.raises(OSError, match=expected):
        CachedBackend(CountingBackend(), ResponseCache(blocker)).score_options(prompts(1), ["A", "B"])


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ReportingBackend(CountingBackend):
    """Reports each item as it finishes (as the local backend reports each forward pass) while its
    clock moves one second per item; after ``look_after`` items it reads the cache file through
    another connection: what a SIGKILL at that moment would leave."""

    def __init__(self, clock: _Clock, look_after: int, cache_path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.clock, self.look_after, self.cache_path = clock, look_after, cache_path
        self.seen_mid_batch: int | None = None

    def score_options(self, prompts, options, on_results=None):
        out = []
        for i, p in enumerate(prompts):
            out.extend(super().score_options([p], options))
            self.clock.now += 1.0
            if on_results:
                on_results({i: out[-1]})
            if i + 1 == self.look_after:
                other = ResponseCache(self.cache_path)
                self.seen_mid_batch = len(other)
                other.close()
        return out


def test_a_long_batch_is_committed_every_few_seconds_not_only_at_its_end(cache):
    """Issue 34, item 6: one --batch-size of prompts was the commit unit (64 prompts, ~35 s of CPU)."""
    clock = _Clock()
    inner = ReportingBackend(clock, look_after=7, cache_path=cache.path, fail_on="q 4 ")
    cb = CachedBackend(inner, cache, chunk_size=64, commit_seconds=3.0, clock=clock)
    ps = prompts(10)
    out = cb.score_options(ps, ["A", "B"])  # one batch of 10 items, 1 s each
    # Commits at t = 3 s (items 0-2) and t = 6 s (items 3-5, item 4 failed and is never stored):
    # 5 items are on disk while item 7 is computed; the end of the batch stores the remaining 4.
    assert inner.seen_mid_batch == 5
    assert len(cache) == 9 and cb.stats.stored == 9
    rerun = CachedBackend(again := CountingBackend(fail_on="q 4 "), ResponseCache(cache.path), chunk_size=64)
    assert rerun.score_options(ps, ["A", "B"]) == out and again.batches == [1]  # only the failed one
    with pytest.raises(ValueError, match="commit_seconds"):
        CachedBackend(CountingBackend(), cache, commit_seconds=0)


def test_an_interrupted_batch_keeps_what_was_reported_before_the_interrupt(cache):
    class DiesAtItem6(ReportingBackend):
        def score_options(self, prompts, options, on_results=None):
            def report(done):
                on_results(done)
                if 5 in done:
                    raise KeyboardInterrupt("stop requested")
            return super().score_options(prompts, options, on_results=report)

    clock = _Clock()
    cb = CachedBackend(DiesAtItem6(clock, 0, cache.path), cache, commit_seconds=60.0, clock=clock)
    with pytest.raises(KeyboardInterrupt):
        cb.score_options(prompts(10), ["A", "B"])
    assert len(cache) == 6  # no time commit was due: the 6 finished items are stored on the way out


def test_local_backend_reports_each_forward_pass_to_the_cache(cache):
    """The real local backend behind the cache: a batch of 6 prompts in forward passes of 2 is
    committed after each pass once the commit interval has passed (here: at every report)."""
    from judgebias.backends import loading as models
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.random_weights import random_model

    tok = models.load_tokenizer("smollm2-135m-instruct")
    lm = random_model("tiny-llama", tokenizer=tok, seed=3, device="cpu", initializer_range=0.2)
    clock = _Clock()

    def tick() -> float:
        clock.now += 10.0
        return clock.now

    commits = []
    put_many = cache.put_many
    cache.put_many = lambda rows: (commits.append(len(rows)), put_many(rows))
    cb = CachedBackend(LocalBackend(lm, max_batch=2, reuse_prefix=False), cache, chunk_size=64,
                       commit_seconds=5.0, clock=tick)
    ps = [Prompt(text=f"Question {i}: which is better, {'x ' * i}? Answer:") for i in range(6)]
    cb.score_options(ps, ["A", "B"])
    assert commits[:3] == [2, 2, 2] and sum(commits) == 6 and len(cache) == 6


def test_an_error_raised_while_handling_ctrl_c_still_exits_130(monkeypatch):
    import judgebias.cli as cli

    def app():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("Task run is not set")  # what Prefect's crash handler raised  # noqa: B904

    def stop_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli, "_stop_now", stop_now)
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == 130
