"""One look of a watched judge (docs/watch.md): judge the pinned audit table, compute the figures,
compare them with the reference look and decide at the level the look may spend.

The history lives in ``<history>/<watch name>/look-NNNN/`` (``table.parquet``, ``record.json``),
beside the watch config unless ``history`` is absolute; the first look is the reference.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from judgebias.config.watch import WatchSettings, load_watch, pinned_table

RECORD, TABLE = "record.json", "table.parquet"


def history_dir(settings: WatchSettings, base: Path) -> Path:
    return (base / settings.history / settings.name).resolve()


def read_history(folder: Path) -> list[dict[str, Any]]:
    """The records of the looks so far, oldest first."""
    if not folder.is_dir():
        return []
    looks = sorted(p for p in folder.glob("look-*") if (p / RECORD).is_file())
    return [json.loads((p / RECORD).read_text(encoding="utf-8")) for p in looks]


def _judge(settings: WatchSettings, audit: pd.DataFrame, look_id: str = ""
           ) -> tuple[pd.DataFrame, dict[str, str]]:
    """The audit table judged by the watched judge, and what the endpoint says it serves.
    ``look_id``: with ``cache: fresh``, part of an endpoint's cache key, so the look asks anew."""
    from judgebias.backends.builder import JudgeSpec, build_backend, cached
    from judgebias.backends.protocol import GenerationParams
    from judgebias.engine.pairwise import judge_pairs, pairs_from_table
    from judgebias.prompts import judge_template

    j = settings.judge
    spec = JudgeSpec(name=j.name, model=j.model, backend=j.backend, base_url=j.base_url,
                     api_key_env=j.api_key_env, dtype=j.dtype, quantize=j.quantize, template=j.template,
                     batch_size=j.batch_size, max_batch=j.batch_size, chat=None,
                     option_tokenizer=j.option_tokenizer, concurrency=j.concurrency, rpm=j.rpm, tpm=j.tpm)
    inner = build_backend(spec)
    probe = getattr(inner, "probe_served", None)
    # An endpoint is asked what it serves before any cached call is looked up: the answer is part
    # of the cache key, so a new model or fingerprint behind the same name is judged afresh.
    served = probe() if callable(probe) else {"served_model": str(inner.identity().get("model") or j.model)}
    if callable(probe) and j.cache == "fresh" and look_id:
        inner.served = {**served, "look": look_id}
    runner = cached(inner, spec)
    result = judge_pairs(pairs_from_table(audit), runner, judge_template(j.template), judge=j.name,
                         chat=spec.chat, params=GenerationParams(max_new_tokens=j.max_new_tokens,
                                                                  temperature=j.temperature),
                         chunk_size=j.batch_size)
    table = result.table()
    table["served_model"] = served.get("served_model", "")
    table["system_fingerprint"] = served.get("system_fingerprint", "")
    return table, served


def _brief(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from judgebias.metrics.registry import FIGURES

    out = {}
    for key in FIGURES:
        est = figures.get(key)
        if isinstance(est, dict) and est.get("value") is not None and est.get("ci_low") is not None:
            out[key] = {k: est.get(k) for k in ("value", "ci_low", "ci_high", "n", "method")}
    return out


def look(config_path: str | os.PathLike, *, seed: int = 0) -> dict[str, Any]:
    """Judge, measure, compare and record one look; returns its record (``decision`` is None for the
    reference look)."""
    from judgebias.redaction import redact_uri
    from judgebias.reporting.analysis import analyze
    from judgebias.reporting.plots_watch import history_plot
    from judgebias.reporting.run_compare import Side, compare_judge
    from judgebias.reporting.watch_drift import decide, position, reference_index
    from judgebias.tables.files import read_table

    settings, base = load_watch(config_path)
    audit_path = pinned_table(settings, base)
    audit, _ = read_table(audit_path)
    name = settings.judge.name
    folder = history_dir(settings, base)
    history = read_history(folder)
    index = len(history)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    table, served = _judge(settings, audit, f"{index}@{started}")
    result = analyze(table, reps=settings.reps, seed=seed)
    figures = result["judges"][name]
    out = folder / f"look-{index:04d}"
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / TABLE, index=False)
    j = settings.judge
    record: dict[str, Any] = {
        "watch": settings.name,
        "index": index,
        "time": started,
        "audit": {"table": str(audit_path), "sha256": settings.audit.sha256, "pairs": len(audit)},
        "judge": {"name": name, "model": j.model, "backend": j.backend, "template": j.template,
                  "base_url": redact_uri(j.base_url) if j.base_url else None, "temperature": j.temperature,
                  "cache": j.cache},
        "served": served,
        "figures": _brief(figures),
        "settings": result.get("settings") or {},
        "reference": None,
        "decision": None,
    }
    if index > 0:
        series, k = position(index, settings.looks)
        ref = reference_index(index, settings.reference, settings.window)
        ref_record = history[ref]
        ref_table = pd.read_parquet(folder / f"look-{ref:04d}" / TABLE)
        # The reference's figures as its look recorded them: the paired comparison recomputes each
        # from both tables, so the reference is not analyzed again.
        before = Side(f"look {ref}", name, ref_record["figures"], ref_record.get("settings") or {}, ref_table)
        after = Side(f"look {index}", name, figures, result.get("settings") or {}, table)
        comparison = compare_judge(before, after, reps=settings.reps, seed=seed, only=settings.figures)
        record["reference"] = {"index": ref, "served": ref_record.get("served"),
                               "judge": ref_record.get("judge")}
        record["series"] = series
        record["decision"] = decide(comparison, look=k, looks=settings.looks, alpha=settings.alpha,
                                    spending=settings.spending)
    (out / RECORD).write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    record["plot"] = str(history_plot([*history, record], out / "history.png"))
    record["folder"] = str(out)
    return record
