"""A judge or generator behind any OpenAI-compatible HTTP endpoint (OpenAI, vLLM, llama.cpp,
``transformers serve``, ...).

Requests and responses go through the pure functions of ``openai_parsing``; this module adds the
I/O: requests in flight as many as ``concurrency`` says (a fixed number, or ``"adaptive"``: found
by ``rate_control`` from 429s, rate-limit headers and latency, within the declared ``rpm`` / ``tpm``
budgets), its own retries with exponential
backoff and jitter on 408/409/429/5xx (never sooner than a Retry-After), timeouts, connection errors
and replies that are not valid JSON (the client's own retries are
off so the policy is one place and tested), a ``ServiceUnavailable`` naming the endpoint when it
stays down, and a usage log (tokens in/out, wall time, tries, cost from an optional price table).

The API key is read from the environment variable ``api_key_env`` (default ``OPENAI_API_KEY``)
when the client is made; it is never pickled, logged or part of ``identity()``. A caller that has
already read the key may pass ``api_key=``: it is kept in memory only, and a copy unpickled in
another process (a Dask worker) reads ``api_key_env`` there. Local endpoints (127.0.0.1, localhost)
get a dummy key when there is none.
"""

from __future__ import annotations

import concurrent.futures as cf
import inspect
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from judgebias.backends import completions_requests as cr
from judgebias.backends import openai_parsing as op
from judgebias.backends import option_token_ids as oti
from judgebias.backends import rate_control as rc
from judgebias.backends.endpoint_usage import CallUsage, Price, usage_totals
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores, Prompt, TokenLogprobs
from judgebias.redaction import redact_uri

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRYABLE_STATUS = frozenset({408, 409, 429})  # plus every 5xx
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
# Per-process state, rebuilt after unpickling (the client holds the API key).
_RUNTIME_STATE = frozenset({"_client", "_explicit_key", "_lock", "_rng", "usage_log", "_logprobs_rejected",
                            "_echo_unsupported", "_token_ids_ignored", "_tokenizer", "_governor",
                            "_spent_usd"})
# How long the dispatcher waits for a free slot before it looks at finished requests again.
_DISPATCH_POLL_S = 0.05


class ServiceUnavailable(RuntimeError):
    """The endpoint did not answer (or kept answering 429/5xx) after every try."""


class _NotACompletion(ValueError):
    """An HTTP 200 whose body the client could not read as a completion."""


class BudgetExceeded(RuntimeError):
    """What the calls cost reached ``max_cost_usd``: no further request is sent."""


class EndpointError(RuntimeError):
    """The endpoint refused the whole configuration (bad key, unknown model): retrying cannot help."""


def _is_local(base_url: str) -> bool:
    return (urlparse(base_url).hostname or "") in _LOCAL_HOSTS


class OpenAICompatBackend:
    """``Backend`` over the chat-completions endpoint for chat prompts and the completions endpoint
    for raw text (a base model's few-shot prompt, prompt log-probs).

    ``use_logprobs``: ask for ``top_logprobs`` when scoring options; a server that ignores them
    (``transformers serve``) or rejects them yields verdict-only scores (``verdict_only=True``).
    ``prefix_mode``: how ``Prompt.assistant_prefix`` is sent (see ``openai_parsing``).
    ``answer_after``: read the option at the first token after this marker (explain-first prompts).
    ``prices``: ``{model: (usd_per_1m_input, usd_per_1m_output)}`` for the cost in the usage log.
    ``concurrency``: requests in flight, a number or ``"adaptive"`` (``rate_control``); ``rpm`` /
    ``tpm``: the most requests / tokens (prompt estimated at 4 characters per token, plus the most
    the answer may have) sent in any minute. A 429 that says when to come back (Retry-After, rate
    headers) is pacing, not a failure: up to ``max_refusals`` of them per request are not counted
    among the ``max_tries``. ``max_cost_usd``: no request is sent once the answered ones cost that
    much at ``prices`` (those then in flight still finish). None of these is in ``identity()``.
    ``option_tokenizer``: a model spec (alias, folder, hub id) with the served model's tokenizer:
    scoring (chat and completions) then asks for every option's token ids (vLLM's
    ``logprob_token_ids``) at one generated token and P(A) is exact; a server that ignores it is
    detected on the first reply and asked the usual way from then on (top log-probs, bounds where an
    option is not listed).
    """

    kind = "openai-compat"

    def __init__(self, model: str, base_url: str | None = DEFAULT_BASE_URL, *, name: str | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", api_key: str | None = None,
                 model_revision: str | None = None,
                 timeout_s: float = 60.0, concurrency: rc.Concurrency | str = rc.ADAPTIVE,
                 rpm: float | None = None, tpm: float | None = None, max_tries: int = 5,
                 max_refusals: int = 100, max_cost_usd: float | None = None,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 use_logprobs: bool = True, top_logprobs: int = 20, score_max_tokens: int = 8,
                 prefix_mode: op.PrefixMode = "none", answer_after: str | None = None,
                 max_tokens_field: str = "max_tokens",
                 prices: Mapping[str, tuple[float, float] | Price] | None = None,
                 option_tokenizer: str | None = None) -> None:
        if max_tries < 1:
            raise ValueError(f"max_tries={max_tries} must be >= 1")
        concurrency = rc.parse_concurrency(concurrency)
        for what, budget in (("rpm", rpm), ("tpm", tpm)):
            if budget is not None and not (0 < budget < math.inf):
                raise ValueError(f"{what}={budget} must be a number > 0")
        if prefix_mode not in op.PREFIX_MODES:
            raise ValueError(f"prefix_mode={prefix_mode!r}; expected one of {op.PREFIX_MODES}")
        self.model = model
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.name = name or model
        self.api_key_env = api_key_env or "OPENAI_API_KEY"
        self.model_revision = model_revision
        self.timeout_s, self.max_tries, self.max_refusals = timeout_s, max_tries, max_refusals
        self.max_cost_usd = max_cost_usd
        self.concurrency, self.rpm, self.tpm = concurrency, rpm, tpm
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.use_logprobs, self.top_logprobs = use_logprobs, top_logprobs
        self.score_max_tokens, self.prefix_mode = score_max_tokens, prefix_mode
        self.answer_after, self.max_tokens_field = answer_after, max_tokens_field
        self.prices = {m: p if isinstance(p, Price) else Price(*p) for m, p in (prices or {}).items()}
        self.option_tokenizer = option_tokenizer
        # What the endpoint says it serves (``probe_served``): part of ``identity()`` once probed, so
        # the call cache re-asks when the model behind the same name changes.
        self.served: dict[str, str] | None = None
        self._init_runtime()
        self._explicit_key = api_key
        self._api_key()  # fail now, naming the variable, rather than on the first call

    def _init_runtime(self) -> None:
        self._explicit_key: str | None = None
        self._client: Any = None
        self._lock = threading.Lock()
        self._rng = random.Random()
        self._logprobs_rejected = False
        self._echo_unsupported: str | None = None
        self._token_ids_ignored = False
        self._tokenizer: Any = None
        self.usage_log: list[CallUsage] = []
        self._spent_usd = 0.0
        self._governor = rc.RequestGovernor(self.concurrency, rpm=self.rpm, tpm=self.tpm)

    # Pickling (Dask/Prefect workers): no client, no key; both are rebuilt from the environment.
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in _RUNTIME_STATE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"OpenAICompatBackend(model={self.model!r}, base_url={redact_uri(self.base_url)!r})"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> OpenAICompatBackend:
        """From a config mapping (keys = this constructor's arguments; ``model`` required)."""
        cfg = dict(config)
        if "model" not in cfg:
            raise ValueError("openai-compat backend config needs 'model'")
        unknown = set(cfg) - (set(inspect.signature(cls).parameters))
        if unknown:
            raise ValueError(f"unknown openai-compat backend settings: {sorted(unknown)}")
        return cls(**cfg)

    def identity(self) -> dict:
        # The scoring request's shape changes what the model answers, so it is part of the identity.
        # "parser" 2: an option outside the top log-probs gives bounds, where 1 stored 1.000 / 0.000;
        # 3: a leading formatting token that listed the options is where the answer is read.
        scoring = {"logprobs": self.use_logprobs, "top_logprobs": self.top_logprobs, "parser": 3,
                   "max_tokens": self.score_max_tokens, "prefix_mode": self.prefix_mode,
                   "answer_after": self.answer_after}
        if self.option_tokenizer:  # only when set: other backends' cache keys stay as they were
            scoring["option_token_ids"] = self.option_tokenizer
            scoring["option_token_id_routes"] = "chat+completions"  # completions answered top-k before
        # "raw_text": where raw-text prompts go (they were sent as a chat message before).
        # A password in base_url never reaches the call cache's key or the run's records.
        ident: dict[str, Any] = {"kind": self.kind, "model": self.model,
                                 "base_url": redact_uri(self.base_url), "scoring": scoring,
                                 "raw_text": "completions"}
        if self.model_revision:
            ident["revision"] = self.model_revision
        if self.served:  # only when probed: other commands' cache keys stay as they were
            ident["served"] = dict(self.served)
        return ident

    def probe_served(self) -> dict[str, str]:
        """One short uncached request: the model name the endpoint reports serving and, where the
        server gives one, its ``system_fingerprint``; kept in ``served`` and so in ``identity()``. A
        provider that swaps weights without changing either is not seen here (the watch's figures on
        its audit set are what catch it: docs/watch.md)."""
        kwargs = op.build_generate_request(
            self.model, Prompt.chat(("user", "Reply with OK.")),
            GenerationParams(max_new_tokens=1, temperature=0.0), prefix_mode="none",
            max_tokens_field=self.max_tokens_field)
        response, seconds, tries = self._request("generate", self._create("chat"), kwargs)
        self._log("generate", response, seconds, tries)
        served = {"served_model": str(response.get("model") or "")}
        if response.get("system_fingerprint"):
            served["system_fingerprint"] = str(response["system_fingerprint"])
        self.served = served
        return served

    # ------------------------------------------------------------------ plumbing

    def _api_key(self) -> str:
        key = self._explicit_key or os.environ.get(self.api_key_env)
        if key:
            return key
        if _is_local(self.base_url):
            return "not-needed-for-a-local-server"
        raise ValueError(f"no API key for {redact_uri(self.base_url)}: set the environment variable "
                         f"{self.api_key_env}")

    def client(self):
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(base_url=self.base_url, api_key=self._api_key(),
                                             max_retries=0, timeout=self.timeout_s)
            return self._client

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        with self._lock:
            spread = self._rng.random()  # jitter: spread clients that failed together
        if retry_after is not None:
            # The server said when: never sooner (up to the cap), spread over a quarter more.
            return min(self.max_backoff_s, retry_after * (1 + 0.25 * spread))
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * (0.5 + 0.5 * spread)

    def _create(self, route: cr.Route) -> Callable[..., Any]:
        # The raw response: its headers carry the rate-limit state (parsed as ``create`` would).
        client = self.client()
        api = client.completions if route == "completions" else client.chat.completions
        return api.with_raw_response.create

    @staticmethod
    def _tokens_estimate(kwargs: Mapping[str, Any]) -> float:
        """A request's tokens as a provider's per-minute budget counts them: the prompt at 4
        characters per token plus the most the answer may have."""
        text = kwargs.get("messages") if "messages" in kwargs else kwargs.get("prompt", "")
        answer = kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or 0
        return len(json.dumps(text, ensure_ascii=False)) / 4 + float(answer)

    def _request(self, operation: str, create: Callable[..., Any], kwargs: dict, route: cr.Route = "chat"
                 ) -> tuple[dict, float, int]:
        """One request with retries: (response as dict, seconds of the successful try, tries)."""
        import openai

        last: Exception | None = None
        tokens = self._tokens_estimate(kwargs)
        refused = False
        attempt = spared = 0
        while attempt < self.max_tries:
            attempt += 1
            if refused:
                self._governor.requeue()
            self._check_budget(operation)
            sent_at = self._governor.pace(tokens)
            refused = False
            started = time.perf_counter()
            retry_after = None
            try:
                raw = create(**kwargs)
                headers = getattr(raw, "headers", None)
                response = raw.parse() if hasattr(raw, "parse") else raw
                if not hasattr(response, "model_dump"):
                    # HTTP 200 with a body that is not JSON (a proxy's HTML error page): the client
                    # hands it back as text. Transient like a 502; the text is never shown raw.
                    raise _NotACompletion(f"the reply is not a completion but {type(response).__name__} "
                                          f"text of {len(str(response))} characters")
                seconds = time.perf_counter() - started
                dumped = response.model_dump()
                if not dumped.get("choices"):  # HTTP 200 with no answer in it: nothing to parse or retry
                    raise EndpointError(f"OpenAI-compatible endpoint {self.base_url} replied to {operation} "
                                        f"(model {self.model!r}) with no choice (choices: "
                                        f"{str(dumped.get('choices'))[:20]}): not a completion")
                if operation == "generate":  # its time grows with its length: compared per token
                    out_tokens = op.response_usage(dumped)[1]
                    self._governor.answered(sent_at, seconds / max(1, out_tokens), headers, tokens,
                                            kind="per output token")
                else:
                    self._governor.answered(sent_at, seconds, headers, tokens)
                return dumped, seconds, attempt + spared
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                last = exc
                if isinstance(exc, openai.APITimeoutError) and self._governor.timed_out(sent_at) \
                        and spared < self.max_refusals:
                    # Sent with others in flight: the overload was ours, and is cut; not a try.
                    spared += 1
                    attempt -= 1
            except json.JSONDecodeError as exc:  # HTTP 200 with a body cut short or not JSON at all
                last = ValueError(f"the reply is not valid JSON ({exc})")
            except RecursionError:  # JSON nested past Python's recursion limit: broken or hostile
                last = ValueError("the reply nests JSON too deeply to parse")
            except _NotACompletion as exc:
                last = exc
            except openai.APIStatusError as exc:
                status = exc.status_code
                where = f"OpenAI-compatible endpoint {self.base_url}"
                if status in (401, 403):
                    raise EndpointError(f"{where} refused the API key (HTTP {status}; key from "
                                        f"${self.api_key_env}): {exc.message}") from exc
                if status == 404 and operation != "continuation_logprobs":
                    what = ("completions route (raw-text, few-shot prompts need /completions; give a chat "
                            "model a chat prompt)" if route == "completions" else "chat-completions route")
                    raise EndpointError(f"{where} has no model {self.model!r} or no {what} "
                                        f"(HTTP 404): {exc.message}") from exc
                if status not in RETRYABLE_STATUS and status < 500:
                    raise
                last = exc
                headers = exc.response.headers if exc.response is not None else None
                if status == 429:
                    retry_after = self._governor.throttled(sent_at, headers)
                    refused = True
                    if retry_after is not None and spared < self.max_refusals:
                        # The server said when: pacing, not a failure; not one of the tries.
                        spared += 1
                        attempt -= 1
                else:
                    retry_after = rc.retry_after(headers)
                    if retry_after is not None:
                        self._governor.pause(retry_after)
            if attempt < self.max_tries:
                time.sleep(self._delay(attempt, retry_after))
        raise ServiceUnavailable(f"OpenAI-compatible endpoint {self.base_url} did not answer after "
                                 f"{self.max_tries + spared} tries ({operation}, model {self.model!r}): "
                                 f"{type(last).__name__}: {last}") from last

    def _log(self, operation: str, response: dict, seconds: float, tries: int) -> tuple[int, int]:
        prompt_tokens, completion_tokens = op.response_usage(response)
        price = self.prices.get(self.model)
        cost = price.cost(prompt_tokens, completion_tokens) if price else math.nan
        with self._lock:
            self.usage_log.append(CallUsage(operation, prompt_tokens, completion_tokens, seconds, tries,
                                            cost))
            if not math.isnan(cost):
                self._spent_usd += cost
        return prompt_tokens, completion_tokens

    def _check_budget(self, operation: str) -> None:
        if self.max_cost_usd is None:
            return
        with self._lock:
            spent = self._spent_usd
        if spent >= self.max_cost_usd:
            raise BudgetExceeded(f"stopped before spending more than ${self.max_cost_usd:.4f} on "
                                 f"{self.base_url} (model {self.model!r}): ${spent:.4f} spent on "
                                 f"{len(self.usage_log)} answered calls ({operation}); the answered "
                                 "calls are kept in the call cache")

    def usage_summary(self) -> dict[str, float]:
        """Totals of the usage log: calls, tokens, seconds (summed), tries, cost (NaN without a price)."""
        with self._lock:
            return usage_totals(list(self.usage_log))

    def request_summary(self) -> dict[str, float | int | str]:
        """How the requests went out: the concurrency asked, the most in flight, 429s, the adaptive
        limit reached."""
        return self._governor.summary()

    def _map(self, fn: Callable[[int], Any], n: int,
             on_results: Callable[[dict[int, Any]], None] | None = None) -> list:
        """``fn(i)`` for i < n with as many in flight as the governor allows; a first exception
        cancels what has not started, and what was already running is waited for and reported
        before it is raised (an answered call is paid for: the cache keeps it). ``on_results``
        gets each result as it arrives (the call cache commits them every few seconds)."""
        if n == 0:
            return []
        governor = self._governor
        results: list = [None] * n

        def run(i: int) -> Any:
            try:
                return fn(i)
            finally:
                governor.release_slot()

        taken: set[cf.Future] = set()

        def take(done: set[cf.Future], futures: dict[cf.Future, int]) -> None:
            for f in done:
                taken.add(f)
                results[futures[f]] = f.result()
                if on_results:
                    on_results({futures[f]: results[futures[f]]})

        with cf.ThreadPoolExecutor(max_workers=min(governor.ceiling, n),
                                   thread_name_prefix="judgebias-openai") as pool:
            futures: dict[cf.Future, int] = {}
            running: set[cf.Future] = set()
            following = 0
            try:
                while following < n or running:
                    if following < n and governor.acquire_slot(_DISPATCH_POLL_S):
                        try:
                            f = pool.submit(run, following)
                        except BaseException:
                            governor.release_slot()
                            raise
                        futures[f] = following
                        running.add(f)
                        following += 1
                        continue
                    if running:
                        done, running = cf.wait(running, timeout=0 if following < n else None,
                                                return_when=cf.FIRST_COMPLETED)
                        take(done, futures)
            except BaseException:
                for f in running:
                    f.cancel()
                cf.wait(futures)
                for f in futures:
                    if f not in taken and not f.cancelled() and f.exception() is None and on_results:
                        on_results({futures[f]: f.result()})
                raise
            return results

    @staticmethod
    def _http_error(exc: Exception) -> str:
        status = getattr(exc, "status_code", None)
        message = getattr(exc, "message", None) or str(exc)
        return f"HTTP {status}: {message}" if status else message

    # ------------------------------------------------------------------ Backend protocol

    def _option_ids(self, options: Sequence[str]) -> dict[str, list[int]] | None:
        """Each option's token ids in the served model's vocabulary (None: not configured, or more
        ids than a request may name)."""
        if not self.option_tokenizer or not self.use_logprobs or self._token_ids_ignored:
            return None
        with self._lock:
            if self._tokenizer is None:
                from judgebias.backends.loading import load_tokenizer

                self._tokenizer = load_tokenizer(self.option_tokenizer)
        from judgebias.backends.token_batching import option_variants

        variants = option_variants(self._tokenizer, options)
        return variants if len(oti.flat_ids(variants)) <= oti.MAX_TOKEN_IDS else None

    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str],
                      on_results: Callable[[dict[int, OptionScores]], None] | None = None
                      ) -> list[OptionScores]:
        import openai

        options = list(options)
        op.option_normalizer(options)  # bad options: one clear ValueError before any request
        variants = self._option_ids(options)

        def one(i: int) -> OptionScores:
            use_lp = self.use_logprobs and not self._logprobs_rejected
            kwargs = op.build_score_request(self.model, prompts[i], max_tokens=self.score_max_tokens,
                                            top_logprobs=self.top_logprobs, logprobs=use_lp,
                                            prefix_mode=self.prefix_mode,
                                            max_tokens_field=self.max_tokens_field)
            route = cr.route(prompts[i])
            by_ids = variants is not None and use_lp and not self._token_ids_ignored
            if by_ids:
                kwargs = oti.extend_request(kwargs, variants)
            try:
                response, seconds, tries = self._request("score_options", self._create(route), kwargs, route)
            except openai.APIStatusError as exc:
                if by_ids and exc.status_code in (400, 422):
                    self._token_ids_ignored = True  # a server that refuses the extension: ask as before
                    return one(i)
                if use_lp and "logprob" in str(exc).lower():
                    # e.g. reasoning models: "logprobs is not supported with this model"
                    self._logprobs_rejected = True
                    return one(i)
                return OptionScores(dict.fromkeys(options, math.nan), error=self._http_error(exc))
            self._log("score_options", response, seconds, tries)
            if by_ids:
                exact = oti.parse(response, variants)
                if exact is not None:
                    return exact
                self._token_ids_ignored = True  # this server does not list named ids: ask as before
                return one(i)
            return op.parse_option_scores(response, options, answer_after=self.answer_after)

        return self._map(one, len(prompts), on_results)

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams,
                 on_results: Callable[[dict[int, Generation]], None] | None = None) -> list[Generation]:
        import openai

        def one(i: int) -> Generation:
            kwargs = op.build_generate_request(self.model, prompts[i], params, prefix_mode=self.prefix_mode,
                                               max_tokens_field=self.max_tokens_field)
            try:
                route = cr.route(prompts[i])
                response, seconds, tries = self._request("generate", self._create(route), kwargs, route)
            except openai.APIStatusError as exc:
                return Generation("", error=self._http_error(exc))
            self._log("generate", response, seconds, tries)
            return op.parse_generation(response, seconds)

        return self._map(one, len(prompts), on_results)

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str],
                              on_results: Callable[[dict[int, TokenLogprobs]], None] | None = None
                              ) -> list[TokenLogprobs]:
        """Prompt log-probs via the completions endpoint with ``echo``; per-item errors where the
        endpoint has no such feature (never made-up values)."""
        import openai

        if len(contexts) != len(continuations):
            raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations")
        create = self._create("completions")

        def one(i: int) -> TokenLogprobs:
            if self._echo_unsupported:
                return TokenLogprobs((), error=self._echo_unsupported)
            try:
                kwargs = cr.build_echo_request(self.model, contexts[i], continuations[i])
            except ValueError as exc:
                return TokenLogprobs((), error=str(exc))
            try:
                response, seconds, tries = self._request("continuation_logprobs", create, kwargs)
            except openai.APIStatusError as exc:
                return TokenLogprobs((), error=f"{op.NO_PROMPT_LOGPROBS}: {self._http_error(exc)}")
            self._log("continuation_logprobs", response, seconds, tries)
            result = op.parse_echo_logprobs(response, cr.context_text(contexts[i]), continuations[i])
            if result.error == op.NO_PROMPT_LOGPROBS:
                # The endpoint answered but ignores echo/logprobs: do not pay for the other items.
                self._echo_unsupported = f"{op.NO_PROMPT_LOGPROBS} ({self.base_url})"
            return result

        return self._map(one, len(contexts), on_results)
