"""``judgebias judge``'s cost and time: the estimate printed and stored before a run (and
``--max-cost`` checked against it), and the tokens, seconds and dollars recorded after it in the
table's judging record (``<table>.usage.json``, ``judgebias.tables.files.write_usage``), which
``judgebias leaderboard`` reads in place of a hand-typed ``--timing``."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import typer

from judgebias.cli.options import fail


def price_option(model: str, price_per_mtok: str | None, prices: Path | None):
    """(the listed name, its Price) for ``model``: ``--price-per-mtok`` first, then ``--prices``,
    then the packaged table; None when none names it."""
    from judgebias.backends import pricing

    if price_per_mtok is not None:
        try:
            return "given with --price-per-mtok", pricing.parse_price(price_per_mtok)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--price-per-mtok") from None
    table = None
    if prices is not None:
        try:
            table = pricing.read_price_table(prices)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--prices") from None
    found = pricing.price_for(model, table)
    if found is None and table is not None:
        found = pricing.price_for(model)
    if found is None:
        return None
    name, price = found
    source = f"{prices}" if table is not None and name in table else f"packaged table, {pricing.PRICES_AS_OF}"
    return f"{name} ({source})", price


def counting_tokenizer(spec: str | None):
    """(tokenizer or None, what the count was made with)."""
    from judgebias.backends import pricing

    if not spec:
        return None, (f"estimated at {pricing.CHARS_PER_TOKEN} characters a token: no tokenizer "
                      "given (--tokenizer)")
    from judgebias.backends.loading import load_tokenizer

    try:
        return load_tokenizer(spec), f"counted with the tokenizer of {spec}"
    except Exception as exc:
        return None, (f"estimated at {pricing.CHARS_PER_TOKEN} characters a token: the tokenizer of "
                      f"{spec} could not be loaded ({type(exc).__name__})")


def before(df, runner, inner, template_name: str, *, chat: bool | None, max_new_tokens: int,
           tokenizer: str | None, price, max_cost: float | None, out: Path, judge_name: str) -> dict:
    """Estimate, print and store the run's cost; stop before sending anything when it exceeds
    ``max_cost``. The estimate as a dict."""
    from judgebias.backends.protocol import GenerationParams
    from judgebias.engine.pairwise import judging_plan, pairs_from_table, plan_cost
    from judgebias.prompts import judge_template
    from judgebias.tables.files import write_usage

    if price is not None and hasattr(inner, "prices"):
        inner.prices = {**inner.prices, inner.model: price[1]}
    template = judge_template(template_name)
    plan = judging_plan(pairs_from_table(df), runner, template, chat=chat,
                        params=GenerationParams(max_new_tokens=max_new_tokens))
    tok, counted_with = counting_tokenizer(tokenizer)
    est = plan_cost(plan, score_max_tokens=getattr(inner, "score_max_tokens", 1),
                    max_new_tokens=max_new_tokens, tokenizer=tok, counted_with=counted_with, price=price)
    typer.echo(est.text())
    estimate = est.to_dict()
    write_usage(out, {judge_name: {"estimate": estimate, "status": "started",
                                   "recorded": _now()}})
    if max_cost is not None:
        if est.usd is None:
            raise typer.BadParameter(f"no price for model {inner.model!r}: --max-cost needs one "
                                     "(--price-per-mtok IN,OUT or --prices FILE)", param_hint="--max-cost")
        if est.usd > max_cost:
            fail(f"the estimate (${est.usd:.4f}, an upper bound on the answers' tokens) is above --max-cost "
                 f"${max_cost:.4f}: nothing was sent. Raise --max-cost or judge fewer pairs.")
        inner.max_cost_usd = max_cost
    return estimate


def after(inner, runner, *, judged, judge_name: str, seconds: float, estimate: dict | None, out: Path,
          carried: dict) -> dict[str, Any]:
    """Record what the run used beside the table (with ``carried``: other judges' records of the
    input table, kept for a table that keeps their rows); print the tokens against the estimate."""
    from judgebias.backends.pricing import per_thousand
    from judgebias.tables.files import write_usage

    rows = int((judged["judge"] == judge_name).sum()) if "judge" in judged.columns else len(judged)
    calls, hits = runner.calls, runner.hits
    record: dict[str, Any] = {"status": "finished", "recorded": _now(), "judgments": rows,
                              "calls": calls, "cache_hits": hits, "seconds": round(seconds, 3),
                              "estimate": estimate}
    usage = inner.usage_summary() if hasattr(inner, "usage_summary") else None
    if usage is not None:
        usd = usage["cost_usd"]
        record |= {"prompt_tokens": int(usage["prompt_tokens"]),
                   "completion_tokens": int(usage["completion_tokens"]),
                   "usd": None if math.isnan(usd) else usd, "tries": int(usage["tries"])}
    if hasattr(inner, "request_summary"):
        record["requests"] = inner.request_summary()
    if calls and rows:
        # Judgments the calls made stand for: the cached ones cost nothing and took no time.
        made = rows * calls / (calls + hits)
        record["per_1000"] = per_thousand(usage or {"cost_usd": math.nan}, max(made, 1e-9), seconds)
        record["per_1000"]["basis"] = (f"{calls} calls made for {rows} judgments"
                                       + (f" ({hits} from the call cache, not counted)" if hits else ""))
    write_usage(out, {**carried, judge_name: record})
    if usage is not None and estimate:
        said, used = estimate["prompt_tokens"], int(usage["prompt_tokens"])
        same_calls = said and estimate["calls"] == calls
        gap = f" ({(used - said) / said:+.1%} against the estimate)" if same_calls else ""
        cost = f", ${record['usd']:.4f}" if record.get("usd") is not None else ""
        typer.echo(f"used: {used} prompt tokens{gap}, {record['completion_tokens']} output tokens{cost} in "
                   f"{seconds:.1f} s; recorded in {out.name}.usage.json")
    return record


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
