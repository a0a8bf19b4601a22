"""The experiment's stages as plain functions: config + run store in, stage output out.

Each stage first looks for its output in the run folder (``RunStore``) and returns it when present;
otherwise it computes it (model calls go through the content-addressed ``CachedBackend``), writes
it atomically and records its wall time. Prefect tasks (``tasks/``) call exactly one of these;
nothing here knows about Prefect or MLflow.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from judgebias.config import BUNDLED_DATASETS, BUNDLED_SFT_DATA, ExperimentConfig, bundled_file
from judgebias.records import Pair
from judgebias.runstore import RunStore
from judgebias.table import Exclusions, validate

log = logging.getLogger("judgebias.stages")

Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


@contextlib.contextmanager
def _timed(store: RunStore, stage: str, **info: Any) -> Iterator[dict]:
    extra: dict[str, Any] = dict(info)
    start = time.perf_counter()
    yield extra
    store.record_stage(stage, time.perf_counter() - start, **extra)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


# --- backends ---------------------------------------------------------------------------------------


def call_cache(cfg: ExperimentConfig):
    from judgebias.cache import ResponseCache, default_cache_dir

    return ResponseCache(cfg.cache_dir or default_cache_dir())


@contextlib.contextmanager
def open_backend(ref, *, name: str, cache, loaded=None) -> Iterator[Any]:
    """A cached backend for a generator/judge/rewriter entry of the config, released on exit
    (models are reloaded per stage from the dequantized cache in 0.2-2 s; keeping them all resident
    would not fit the demo's memory budget)."""
    from judgebias.cache import CachedBackend

    gc.collect()  # the previous stage's model (and a peft wrapper's reference cycles) goes first
    if ref.backend == "openai":
        from judgebias.backends.openai_compat import OpenAICompatBackend

        # The key is read from the named environment variable by the backend; never in the config.
        inner = OpenAICompatBackend(
            model=ref.model, base_url=ref.base_url, name=name, api_key_env=ref.api_key_env
        )
    else:
        from judgebias.backends.local import LocalBackend

        inner = LocalBackend(loaded if loaded is not None else ref.model, name=name)
    try:
        yield CachedBackend(inner, cache)
    finally:
        del inner
        gc.collect()


# --- data -----------------------------------------------------------------------------------------------


def dataset_path(source: str) -> Path:
    if source in BUNDLED_DATASETS:
        return bundled_file(BUNDLED_DATASETS[source])
    return Path(source)


def read_instructions(path: str | Path) -> pd.DataFrame:
    """Instructions from JSONL (``instruction`` required; ``id``/``category`` optional); errors name
    the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: dataset file does not exist")
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None
            text = obj.get("instruction")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}:{line_no}: field 'instruction' must be a non-empty string")
            rows.append(
                {
                    "instruction_id": str(obj.get("id", f"row-{line_no}")),
                    "category": str(obj.get("category") or ""),
                    "instruction": text,
                }
            )
    ids = [r["instruction_id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate instruction ids")
    if not rows:
        raise ValueError(f"{path}: no instructions")
    return pd.DataFrame(rows)


def load_instructions(cfg: ExperimentConfig, store: RunStore) -> pd.DataFrame:
    name = "instructions.parquet"
    if store.has(name):
        return store.read_frame(name)
    with _timed(store, "load_instructions") as info:
        df = read_instructions(dataset_path(cfg.dataset.source))
        if cfg.dataset.sample is not None and cfg.dataset.sample < len(df):
            keep = sorted(random.Random(cfg.dataset.seed).sample(range(len(df)), cfg.dataset.sample))
            df = df.iloc[keep].reset_index(drop=True)
        info["n"] = len(df)
        store.write_frame(name, df)
    return df


def data_hash(df: pd.DataFrame) -> str:
    import hashlib

    doc = json.dumps(df[["instruction_id", "instruction"]].to_dict(orient="records"), sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def subset(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    """The first ``n`` instructions of a seeded shuffle (ablations run on a sub-sample)."""
    if n is None or n >= len(df):
        return df
    keep = sorted(random.Random(seed).sample(range(len(df)), n))
    return df.iloc[keep].reset_index(drop=True)


def style_prefix(cfg: ExperimentConfig, style: str) -> str:
    return f"style-{cfg.ablation_hash('style_rewrite')}/{style}/"


def finetune_prefix(cfg: ExperimentConfig) -> str:
    return f"finetune-{cfg.ablation_hash('finetune')}/"


# --- generation -----------------------------------------------------------------------------------


def generate_responses(
    cfg: ExperimentConfig,
    store: RunStore,
    generator: str,
    instructions: pd.DataFrame,
    *,
    prefix: str = "",
    adapter: dict | None = None,
    progress: Progress = _noop,
) -> pd.DataFrame:
    """One generator's answer to each instruction (``adapter``: a fine-tuned variant's adapter)."""
    from judgebias.backends.protocol import GenerationParams
    from judgebias.prompts import generation_template

    name = f"{prefix}responses/{_slug(generator)}.parquet"
    if store.has(name):
        return store.read_frame(name)
    g = cfg.generator(generator)
    chat = g.prompt_kind == "chat"
    with (
        _timed(store, f"{prefix}generate_responses[{generator}]") as info,
        open_backend(g, name=generator, cache=call_cache(cfg), loaded=_adapted(g, adapter)) as backend,
    ):
        template = generation_template(cfg.prompts.generation)
        runner = backend.with_template(template.tag(chat))  # the template version joins the cache key
        params = GenerationParams(max_new_tokens=g.max_new_tokens, stop=template.stop(chat))
        prompts = [template.build(q, chat=chat) for q in instructions["instruction"]]
        out = []
        for start in range(0, len(prompts), g.batch_size):
            out.extend(runner.generate(prompts[start : start + g.batch_size], params))
            progress(f"{generator}: {len(out)}/{len(prompts)} responses")
        df = instructions[["instruction_id", "instruction"]].copy()
        df["generator"] = generator
        df["response"] = [o.text.strip() for o in out]
        df["completion_tokens"] = [o.completion_tokens for o in out]
        df["error"] = [o.error or (None if o.text.strip() else "empty response") for o in out]
        info.update(n=len(df), failed=int(df["error"].notna().sum()), calls=backend.calls, hits=backend.hits)
        store.write_frame(name, df)
    progress(f"{generator}: {len(df)} responses ({info['calls']} generated, {info['hits']} from cache)")
    return df


def build_pairs(
    cfg: ExperimentConfig,
    store: RunStore,
    responses: dict[str, pd.DataFrame],
    *,
    prefix: str = "",
    progress: Progress = _noop,
) -> pd.DataFrame:
    """One pair per instruction and unordered generator pair (A = earlier generator in the config;
    both orders are judged). A failed response excludes its pairs, counted by reason."""
    name = f"{prefix}pairs.parquet"
    if store.has(name):
        return store.read_frame(name)
    excluded = Exclusions()
    rows = []
    gens = [g for g in (x.name for x in cfg.generators) if g in responses]
    indexed = {g: responses[g].set_index("instruction_id") for g in gens}
    for ga, gb in itertools.combinations(gens, 2):
        a_df, b_df = indexed[ga], indexed[gb]
        for iid in a_df.index.intersection(b_df.index, sort=False):
            a, b = a_df.loc[iid], b_df.loc[iid]
            if isinstance(a.get("error"), str) or isinstance(b.get("error"), str):
                excluded.add("response_failed", example=str(iid))
                continue
            prompt = str(a["instruction"])
            pid = Pair.make_id(prompt, a["response"], b["response"])
            rows.append(
                {
                    "pair_id": pid,
                    "instruction_id": iid,
                    "prompt": prompt,
                    "response_a": a["response"],
                    "response_b": b["response"],
                    "generator_a": ga,
                    "generator_b": gb,
                }
            )
    df = pd.DataFrame(
        rows,
        columns=[
            "pair_id",
            "instruction_id",
            "prompt",
            "response_a",
            "response_b",
            "generator_a",
            "generator_b",
        ],
    )
    dup = df.duplicated("pair_id")
    excluded.add("duplicate_pair", int(dup.sum()))
    df = df[~dup].reset_index(drop=True)
    store.write_json(f"{prefix}pairs_exclusions.json", excluded.to_dict())
    store.write_frame(name, df)
    progress(f"{len(df)} pairs ({excluded})")
    return df


def _pairs(df: pd.DataFrame) -> list[Pair]:
    return [
        Pair(
            pair_id=r.pair_id,
            prompt=r.prompt,
            response_a=r.response_a,
            response_b=r.response_b,
            generator_a=r.generator_a,
            generator_b=r.generator_b,
        )
        for r in df.itertuples(index=False)
    ]


# --- judging --------------------------------------------------------------------------------------------


def _chat(judge_cfg, backend) -> bool:
    if judge_cfg.prompt_kind != "auto":
        return judge_cfg.prompt_kind == "chat"
    return bool(getattr(backend, "is_chat", True))


def judge_pairs(
    cfg: ExperimentConfig,
    store: RunStore,
    judge: str,
    pairs: pd.DataFrame,
    *,
    prefix: str = "",
    adapter: dict | None = None,
    progress: Progress = _noop,
) -> pd.DataFrame:
    """Every pair judged in both orders by ``judge``: its judgment-table rows."""
    from judgebias.judging import judge_pairs as run_judge
    from judgebias.prompts import judge_template

    name = f"{prefix}judgments/{_slug(judge)}.parquet"
    if store.has(name):
        return store.read_frame(name)
    j = cfg.judge(judge)
    ref = cfg.generator(cfg.self_map[judge]) if adapter else j
    with (
        _timed(store, f"{prefix}judge_pairs[{judge}]") as info,
        open_backend(
            j if not adapter else j.model_copy(update={"model": ref.model}),
            name=judge,
            cache=call_cache(cfg),
            loaded=_adapted(ref, adapter),
        ) as backend,
    ):
        result = run_judge(
            _pairs(pairs),
            backend,
            judge_template(j.template),
            judge=judge,
            chat=_chat(j, backend),
            chunk_size=j.batch_size * 4,
            progress=lambda done, total: progress(f"{judge}: {done}/{total} judgments"),
        )
        df = result.table()
        info.update(
            rows=len(df), exclusions=result.exclusions.to_dict(), calls=backend.calls, hits=backend.hits
        )
        store.write_frame(name, df)
    progress(
        f"{judge}: {len(df)} pairs judged in both orders ({info['calls']} scored, "
        f"{info['hits']} cached; "
        f"{result.exclusions})"
    )
    return df


def _adapted(ref, adapter: dict | None):
    """A ``LoadedModel`` of ``ref``'s model with a LoRA adapter merged in, or None (plain model)."""
    if not adapter:
        return None
    from judgebias.ablations.finetune import merge_adapter
    from judgebias.models import LoadedModel, load_model

    base = load_model(ref.model)
    merged = merge_adapter(base.model, adapter["adapter_dir"])
    identity = {**base.identity, "model": f"{base.name}+lora", "adapter_sha256": adapter["adapter_sha256"]}
    return LoadedModel(
        model=merged,
        tokenizer=base.tokenizer,
        name=f"{base.name}+lora",
        identity=identity,
        load_seconds=base.load_seconds,
    )


# --- explanations: perplexity (Wataoka et al.) and attention (DBG Fig. 7) -------------------------------


def perplexity_analysis(
    cfg: ExperimentConfig, store: RunStore, judge: str, pairs: pd.DataFrame, *, progress: Progress = _noop
) -> pd.DataFrame:
    """The judge's perplexity of each response given its instruction: ``pair_id, judge, ppl_a, ppl_b``."""
    from judgebias.perplexity import fill_perplexity

    name = f"perplexity/{_slug(judge)}.parquet"
    if store.has(name):
        return store.read_frame(name)
    j = cfg.judge(judge)
    with (
        _timed(store, f"perplexity_analysis[{judge}]") as info,
        open_backend(j, name=judge, cache=call_cache(cfg)) as backend,
    ):
        filled = fill_perplexity(pairs, backend, context="auto", chunk_size=j.batch_size * 4)
        df = filled[["pair_id", "ppl_a", "ppl_b", "ppl_error"]].assign(judge=judge)
        info.update(n=len(df), calls=backend.calls, hits=backend.hits)
        store.write_frame(name, df)
    progress(f"{judge}: perplexity of {len(df)} pairs' responses")
    return df


def attention_analysis(
    cfg: ExperimentConfig, store: RunStore, judge: str, pairs: pd.DataFrame, *, progress: Progress = _noop
) -> pd.DataFrame:
    """Mean attention per layer that the judge pays to each response (DBG Fig. 7), averaged over both
    presentation orders so the response's position does not masquerade as its author; one row per
    (pair, layer) with the generators, plus a per-generator plot."""
    from judgebias.attention import summarize
    from judgebias.prompts import judge_template

    name = f"attention/{_slug(judge)}.parquet"
    if store.has(name):
        return store.read_frame(name)
    j = cfg.judge(judge)
    chosen = subset(pairs, cfg.analyses.attention_sample, cfg.dataset.seed)
    plist = _pairs(chosen)
    with (
        _timed(store, f"attention_analysis[{judge}]") as info,
        open_backend(j, name=judge, cache=call_cache(cfg)) as backend,
    ):
        template = judge_template(j.template)
        chat = _chat(j, backend)
        by_order = {o: summarize(backend.inner, plist, template, order=o, chat=chat) for o in ("ab", "ba")}
        rows = []
        for k, pair in enumerate(plist):
            a = [
                (x + y) / 2
                for x, y in zip(
                    by_order["ab"][k].per_layer["a"], by_order["ba"][k].per_layer["a"], strict=True
                )
            ]
            b = [
                (x + y) / 2
                for x, y in zip(
                    by_order["ab"][k].per_layer["b"], by_order["ba"][k].per_layer["b"], strict=True
                )
            ]
            rows += [
                {
                    "pair_id": pair.pair_id,
                    "judge": judge,
                    "layer": layer,
                    "generator_a": pair.generator_a,
                    "generator_b": pair.generator_b,
                    "attn_a": a[layer],
                    "attn_b": b[layer],
                }
                for layer in range(len(a))
            ]
        df = pd.DataFrame(rows)
        info.update(pairs=len(plist))
        store.write_frame(name, df)
        if len(df):
            _plot_attention(df, store.path(f"plots/attention_{_slug(judge)}.png"), judge)
    progress(f"{judge}: attention per layer over {len(plist)} pairs, both orders")
    return df


def attention_by_generator(df: pd.DataFrame) -> pd.DataFrame:
    """Mean attention per (layer, generator) of one judge's rows."""
    long = pd.concat(
        [
            df[["layer", "generator_a", "attn_a"]].set_axis(["layer", "generator", "attention"], axis=1),
            df[["layer", "generator_b", "attn_b"]].set_axis(["layer", "generator", "attention"], axis=1),
        ],
        ignore_index=True,
    )
    return long.groupby(["layer", "generator"], sort=True)["attention"].mean().unstack("generator")


def attention_own_minus_other(df: pd.DataFrame, own: str) -> dict[str, float]:
    """Mean over layers and pairs of (attention to the judge's own response - to the other one), on
    pairs holding exactly one own response; per-layer values as ``layer_<k>``."""
    own_a = (df["generator_a"] == own) & (df["generator_b"] != own)
    own_b = (df["generator_b"] == own) & (df["generator_a"] != own)
    part = df[own_a | own_b]
    if part.empty:
        return {}
    diff = part["attn_a"].where(own_a[own_a | own_b], part["attn_b"]) - part["attn_b"].where(
        own_a[own_a | own_b], part["attn_a"]
    )
    per_layer = diff.groupby(part["layer"]).mean()
    out = {"mean": float(diff.mean()), "pairs": float(part["pair_id"].nunique())}
    out.update({f"layer_{int(k)}": float(v) for k, v in per_layer.items()})
    return out


def _plot_attention(df: pd.DataFrame, path: Path, judge: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    per = attention_by_generator(df)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for gen in per.columns:
        ax.plot(per.index, per[gen], marker="o", ms=3, label=f"responses of {gen}")
    ax.set_xlabel("layer")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("mean attention from the answer position")
    ax.set_title(f"Judge {judge}: attention to each generator's responses (both orders)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


# --- table, gold, metrics -------------------------------------------------------------------------------


def assemble_table(
    cfg: ExperimentConfig,
    store: RunStore,
    judgments: dict[str, pd.DataFrame],
    perplexity: dict[str, pd.DataFrame] | None = None,
    *,
    prefix: str = "",
    progress: Progress = _noop,
) -> pd.DataFrame:
    """All judges' rows in one validated judgment table (with each judge's perplexities)."""
    from judgebias.io import read_table, write_table

    name = f"{prefix}table.parquet"
    if store.has(name):
        return read_table(store.path(name))[0]
    frames = []
    for judge, rows in judgments.items():
        rows = rows.drop(columns=[c for c in ("ppl_a", "ppl_b") if c in rows.columns])
        ppl = (perplexity or {}).get(judge)
        if ppl is not None and len(ppl):
            rows = rows.merge(ppl[["pair_id", "ppl_a", "ppl_b"]], on="pair_id", how="left")
        frames.append(rows)
    table, _ = validate(pd.concat(frames, ignore_index=True), source=f"{store.root / name}")
    write_table(table, store.path(name))
    progress(
        f"judgment table: {len(table)} rows, {table['pair_id'].nunique()} pairs, "
        f"{table['judge'].nunique()} judges"
    )
    return table


def gold_for(cfg: ExperimentConfig, table: pd.DataFrame, exclude: tuple[str, ...] = ()) -> list[str] | None:
    """The gold panel ``analyze`` gets: None = every other judge; a list when configured or when
    judges must be left out (the rewriter in the style ablation)."""
    if cfg.gold.panel == "all-others" and not exclude:
        return None
    present = set(table["judge"].dropna())
    base = [j.name for j in cfg.judges] if cfg.gold.panel == "all-others" else list(cfg.gold.panel)
    return [n for n in base if n in present and n not in exclude]


def aggregate_gold(
    cfg: ExperimentConfig,
    store: RunStore,
    table: pd.DataFrame,
    *,
    prefix: str = "",
    exclude: tuple[str, ...] = (),
    progress: Progress = _noop,
) -> pd.DataFrame:
    """Gold vote per (pair, measured judge): the panel's mean P(A) without that judge, or the human
    majority with ``human_as_gold``; what the DBG scores are measured against."""
    from judgebias.metrics.dbg import gold_votes
    from judgebias.metrics.frame import PAIR, prepare
    from judgebias.stats import InsufficientData

    name = f"{prefix}gold.parquet"
    if store.has(name):
        return store.read_frame(name)
    prepared = prepare(table)
    codes = prepared.drop_duplicates(PAIR)[[PAIR, "pair_id"]].set_index(PAIR)["pair_id"]
    frames = []
    panel = gold_for(cfg, table, exclude)
    for judge in sorted(table["judge"].dropna().unique()):
        try:
            votes, counts, used = gold_votes(table, judge, panel, human_as_gold=cfg.gold.human_as_gold)
        except InsufficientData as exc:
            progress(f"gold for {judge}: none ({exc})")
            continue
        frames.append(
            pd.DataFrame(
                {
                    "pair_id": codes.reindex(range(len(votes))).to_numpy(),
                    "judge": judge,
                    "gold_p_a": votes,
                    "gold_votes": counts,
                    "panel": ",".join(used),
                }
            )
        )
    df = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["pair_id", "judge", "gold_p_a", "gold_votes", "panel"])
    )
    store.write_frame(name, df)
    progress(f"gold judgments for {df['judge'].nunique()} judge(s)")
    return df


def compute_metrics(
    cfg: ExperimentConfig,
    store: RunStore,
    table: pd.DataFrame,
    *,
    prefix: str = "",
    exclude: tuple[str, ...] = (),
    progress: Progress = _noop,
) -> dict:
    """Everything ``judgebias analyze`` computes on this table, plus its plots (PNG)."""
    from judgebias.analysis import analyze

    name = f"{prefix}metrics.json"
    if store.has(name):
        return store.read_json(name)
    with _timed(store, f"{prefix}compute_metrics"):
        gold = gold_for(cfg, table, exclude)
        result = analyze(
            table,
            self_map={k: {v} for k, v in cfg.self_map.items()},
            gold=gold if gold else None,
            human_as_gold=cfg.gold.human_as_gold,
        )
        _plots(result, store.path(f"{prefix}plots"))
        store.write_json(name, result)
    progress(f"metrics for {len(result['judges'])} judge(s)")
    return result


def _plots(result: dict, folder: Path) -> list[Path]:
    from judgebias import plots

    return plots.save_figures(plots.figures_for(result), folder)


# --- style-rewrite ablation (DBG Sec. 4.2, App. A.3) ------------------------------------------------------


def rewriter_judges(cfg: ExperimentConfig) -> tuple[str, ...]:
    """Judges that are the rewriter's model: left out of the gold panel in the style ablation."""
    rw = cfg.ablations.style_rewrite
    return tuple(j.name for j in cfg.judges if j.model == rw.model and j.backend == rw.backend)


def _style_instructions(cfg: ExperimentConfig, responses: dict[str, pd.DataFrame]) -> list[str]:
    first = next(iter(responses.values()))
    ids = first[["instruction_id"]].drop_duplicates()
    return subset(ids, cfg.ablations.style_rewrite.sample, cfg.dataset.seed)["instruction_id"].tolist()


def rewrite_style(
    cfg: ExperimentConfig,
    store: RunStore,
    style: str,
    responses: dict[str, pd.DataFrame],
    *,
    progress: Progress = _noop,
) -> dict[str, pd.DataFrame]:
    """Both (all) generators' responses rewritten into ``style`` by the rewriter, per generator."""
    from judgebias.ablations.style import TEMPLATE_VERSION, rewrite_responses
    from judgebias.backends.protocol import GenerationParams

    prefix = style_prefix(cfg, style)
    names = {g: f"{prefix}responses/{_slug(g)}.parquet" for g in responses}
    if all(store.has(n) for n in names.values()):
        return {g: store.read_frame(n) for g, n in names.items()}
    rw = cfg.ablations.style_rewrite
    keep = set(_style_instructions(cfg, responses))
    out = {}
    with (
        _timed(store, f"{prefix}rewrite_style") as info,
        open_backend(rw, name=f"rewriter:{rw.model}", cache=call_cache(cfg)) as backend,
    ):
        runner = backend.with_template(TEMPLATE_VERSION)
        chat = bool(getattr(backend, "is_chat", True))
        params = GenerationParams(max_new_tokens=rw.max_new_tokens)
        for g, df in responses.items():
            part = df[df["instruction_id"].isin(keep) & df["error"].isna()].reset_index(drop=True)
            rewritten = rewrite_responses(runner, part, style, params, chat=chat, batch_size=rw.batch_size)
            rewritten["error"] = rewritten["rewrite_error"]
            store.write_frame(names[g], rewritten)
            out[g] = rewritten
            progress(
                f"{style}: {len(rewritten)} responses of {g} rewritten "
                f"({int(rewritten['rewrite_error'].notna().sum())} failed)"
            )
        info.update(calls=backend.calls, hits=backend.hits)
    return out


def semantic_preservation(
    cfg: ExperimentConfig,
    store: RunStore,
    rewrites: dict[str, dict[str, pd.DataFrame]],
    *,
    progress: Progress = _noop,
) -> pd.DataFrame:
    """Cosine similarity of each rewrite to its original and the App. A.3 projection plot."""
    from judgebias.ablations.style import Embedder, plot_semantic_shift
    from judgebias.ablations.style import semantic_preservation as measure

    base = f"style-{cfg.ablation_hash('style_rewrite')}/"
    name = f"{base}semantic.parquet"
    if store.has(name):
        return store.read_frame(name)
    with _timed(store, f"{base}semantic_preservation"):
        frames = [df for per_gen in rewrites.values() for df in per_gen.values()]
        both = pd.concat(frames, ignore_index=True)
        sem = measure(Embedder.load(cfg.ablations.style_rewrite.embedder), both)
        if len(sem) >= 1:
            plot_semantic_shift(sem, store.path(f"{base}plots/semantic_shift.png"))
        store.write_frame(name, sem)
    summary = sem.groupby("style")["cosine"].mean().round(3).to_dict() if len(sem) else {}
    progress(f"semantic preservation (mean cosine original vs rewrite): {summary}")
    return sem


def _dbg(table: pd.DataFrame, judge: str, cfg: ExperimentConfig, gold: list[str] | None) -> dict:
    from judgebias.metrics.dbg import dbg_score
    from judgebias.stats import InsufficientData

    if gold is not None and not [g for g in gold if g != judge]:
        return {
            "value": None,
            "skipped": "no gold judge left once the measured judge and the rewriter are left out",
        }
    try:
        est = dbg_score(
            table,
            judge,
            {k: {v} for k, v in cfg.self_map.items()},
            gold,
            human_as_gold=cfg.gold.human_as_gold,
        )
    except (InsufficientData, ValueError) as exc:
        return {"value": None, "skipped": str(exc)}
    return est.to_dict()


def compare_style(
    cfg: ExperimentConfig,
    store: RunStore,
    before: pd.DataFrame,
    after: dict[str, pd.DataFrame],
    *,
    progress: Progress = _noop,
) -> dict:
    """DBG per judge before and after each rewrite, on the same instructions and the same gold panel
    (the rewriter left out), side by side; plus the usual metrics of each rewritten table."""
    base = f"style-{cfg.ablation_hash('style_rewrite')}/"
    name = f"{base}comparison.json"
    if store.has(name):
        return store.read_json(name)
    exclude = rewriter_judges(cfg)
    with _timed(store, f"{base}compare_style"):
        keep = set(next(iter(after.values()))["prompt"]) if after else set()
        before_sub = before[before["prompt"].isin(keep)]
        gold = gold_for(cfg, before, exclude)
        out: dict[str, Any] = {
            "rewriter": cfg.ablations.style_rewrite.model,
            "excluded_from_gold": list(exclude),
            "pairs_before": int(before_sub["pair_id"].nunique()),
            "judges": {},
        }
        for j in cfg.self_map:
            row = {"before": _dbg(before_sub, j, cfg, gold)}
            for style, table in after.items():
                row[style] = _dbg(table, j, cfg, gold)
            out["judges"][j] = row
        for style, table in after.items():
            out.setdefault("pairs_after", {})[style] = int(table["pair_id"].nunique())
            compute_metrics(cfg, store, table, prefix=style_prefix(cfg, style), exclude=exclude)
        store.write_json(name, out)
        _plot_before_after(
            out, store.path(f"{base}plots/dbg_before_after.png"), "DBG before and after style rewrite"
        )
    progress("style ablation DBG: " + _fmt_compare(out))
    return out


# --- fine-tune ablation (DBG Sec. 4.3) ---------------------------------------------------------------------


def finetune_generator(
    cfg: ExperimentConfig, store: RunStore, generator: str, *, progress: Progress = _noop
) -> dict:
    """A LoRA adapter for ``generator``'s model trained on the shared instruction data."""
    from judgebias.ablations.finetune import load_sft_data, lora_finetune
    from judgebias.backends.local import LocalBackend
    from judgebias.models import load_model
    from judgebias.prompts import generation_template

    prefix = finetune_prefix(cfg)
    name = f"{prefix}adapters/{_slug(generator)}.json"
    if store.has(name):
        return store.read_json(name)
    ft = cfg.ablations.finetune
    g = cfg.generator(generator)
    if g.backend != "local":
        raise ValueError(
            f"ablations.finetune: generator {generator!r} is an API model; only local models "
            "can be fine-tuned"
        )
    data = bundled_file(BUNDLED_SFT_DATA[ft.data]) if ft.data in BUNDLED_SFT_DATA else Path(ft.data)
    examples = load_sft_data(data, ft.train_size, ft.seed)
    template = generation_template(cfg.prompts.generation)
    chat = g.prompt_kind == "chat"
    with _timed(store, f"{prefix}finetune_generator[{generator}]") as info:
        model = load_model(g.model)
        encode = LocalBackend(model, name=generator).encode
        result: dict = {"base_model": g.model, "base_identity": model.identity}
        key = _adapter_key(model.identity, data, ft, template.tag(chat))
        cached = _adapter_cache(cfg, key)
        if cached is not None and (cached / "result.json").exists():
            # Same base weights, data, layout and recipe: training is deterministic, reuse it.
            folder = store.write_dir(
                f"{prefix}adapters/{_slug(generator)}",
                lambda tmp: shutil.copytree(cached, tmp, dirs_exist_ok=True),
            )
            result.update(
                json.loads((cached / "result.json").read_text()), adapter_dir=str(folder), from_cache=True
            )
            info.update(steps=ft.steps, from_cache=True)
            store.write_json(name, result)
            progress(f"{generator}: LoRA adapter {result['adapter_sha256'][:12]} from the adapter cache")
            return result

        def fill(folder: Path) -> None:
            r = lora_finetune(
                model.model,
                model.tokenizer,
                examples,
                lambda q: template.build(q, chat=chat),
                encode,
                folder,
                r=ft.lora.r,
                alpha=ft.lora.alpha,
                dropout=ft.lora.dropout,
                target_modules=ft.lora.target_modules,
                steps=ft.steps,
                lr=ft.lr,
                batch_size=ft.batch_size,
                max_length=ft.max_length,
                seed=ft.seed,
                progress=lambda step, loss: progress(
                    f"{generator}: LoRA step {step}/{ft.steps} loss {loss:.3f}"
                ),
            )
            result.update(r.to_json())

        folder = store.write_dir(f"{prefix}adapters/{_slug(generator)}", fill)
        result["adapter_dir"] = str(folder)
        info.update(steps=ft.steps, final_loss=result["losses"][-1] if result["losses"] else None)
        if cached is not None:
            _store_adapter(cached, folder, result)
    gc.collect()
    store.write_json(name, result)
    return result


def _adapter_key(base_identity: dict, data: Path, ft, layout: str) -> str:
    """Content key of a LoRA adapter: base weights, training data, prompt layout and recipe."""
    import hashlib

    doc = {
        "trainer": "lora_finetune@1",
        "base": base_identity,
        "layout": layout,
        "data_sha256": hashlib.sha256(Path(data).read_bytes()).hexdigest(),
        "recipe": ft.model_dump(mode="json", exclude={"enabled", "generators", "sample"}),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def _adapter_cache(cfg: ExperimentConfig, key: str) -> Path | None:
    """``<call cache dir>/adapters/<key>``: trained adapters outlive a deleted run folder."""
    cache = call_cache(cfg)
    return None if cache.path is None else cache.path.parent / "adapters" / key


def _store_adapter(target: Path, folder: Path, result: dict) -> None:
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        (tmp / "result.json").write_text(json.dumps({k: v for k, v in result.items() if k != "adapter_dir"}))
        if target.exists():  # another process stored the same adapter meanwhile
            shutil.rmtree(tmp)
        else:
            tmp.replace(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def finetune_instructions(cfg: ExperimentConfig, instructions: pd.DataFrame) -> pd.DataFrame:
    return subset(instructions, cfg.ablations.finetune.sample, cfg.dataset.seed)


def compare_finetune(
    cfg: ExperimentConfig,
    store: RunStore,
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    progress: Progress = _noop,
) -> dict:
    """DBG per judge of the original models vs their fine-tuned versions (same instructions)."""
    prefix = finetune_prefix(cfg)
    name = f"{prefix}comparison.json"
    if store.has(name):
        return store.read_json(name)
    with _timed(store, f"{prefix}compare_finetune"):
        keep = set(after["prompt"])
        before_sub = before[before["prompt"].isin(keep)]
        gold = gold_for(cfg, before)
        out: dict[str, Any] = {
            "fine_tuned": cfg.finetune_generators,
            "judges": {},
            "pairs_before": int(before_sub["pair_id"].nunique()),
            "pairs_after": int(after["pair_id"].nunique()),
        }
        for j in cfg.self_map:
            out["judges"][j] = {
                "before": _dbg(before_sub, j, cfg, gold),
                "finetuned": _dbg(after, j, cfg, gold),
            }
        compute_metrics(cfg, store, after, prefix=prefix)
        store.write_json(name, out)
        _plot_before_after(
            out,
            store.path(f"{prefix}plots/dbg_before_after.png"),
            "DBG before and after fine-tuning on the same data",
        )
    progress("fine-tune ablation DBG: " + _fmt_compare(out))
    return out


def _fmt_compare(out: dict) -> str:
    parts = []
    for judge, row in out["judges"].items():
        cells = []
        for k, v in row.items():
            cells.append(f"{k} {v['value']:+.3f}" if v.get("value") is not None else f"{k} n/a")
        parts.append(f"{judge}: " + ", ".join(cells))
    return "; ".join(parts)


def _plot_before_after(out: dict, path: Path, title: str) -> Path:
    """Grouped bars: DBG per judge per condition, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    judges = list(out["judges"])
    conditions = list(next(iter(out["judges"].values())).keys()) if judges else []
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    width = 0.8 / max(1, len(conditions))
    for k, cond in enumerate(conditions):
        vals, lo, hi = [], [], []
        for j in judges:
            e = out["judges"][j][cond]
            v = e.get("value")
            vals.append(np.nan if v is None else v)
            lo.append(0 if v is None or e.get("ci_low") is None else v - e["ci_low"])
            hi.append(0 if v is None or e.get("ci_high") is None else e["ci_high"] - v)
        x = np.arange(len(judges)) + k * width
        ax.bar(x, vals, width, yerr=[lo, hi], capsize=3, label=cond)
        for xi, v in zip(x, vals, strict=True):
            if np.isnan(v):  # not computable (e.g. no gold judge left): say so instead of a blank
                ax.text(xi, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.3")
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xticks(np.arange(len(judges)) + width * (len(conditions) - 1) / 2, judges)
    ax.set_ylabel("DBG score (judge - gold win rate)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


# --- annotation sync (scheduled) ---------------------------------------------------------------------------


def sync_annotations(
    cfg: ExperimentConfig, store: RunStore, *, push: bool = True, progress: Progress = _noop
) -> dict:
    """Pull new human labels from Label Studio into the experiment's table, send the next batch of
    pairs (``annotation.budget``), recompute the human-anchored figures and log them to MLflow
    (linked to the experiment's last run)."""
    from annotation.sync import SyncSettings, sync

    table = store.path("table.parquet")
    if not table.exists():
        raise ValueError(f"{table}: no judgment table yet; run the experiment first (judgebias run CONFIG)")
    last = store.read_json("mlflow.json") if store.has("mlflow.json") else {}
    a = cfg.annotation
    settings = SyncSettings(
        table=table,
        judges=list(cfg.self_map),
        self_map={k: [v] for k, v in cfg.self_map.items()},
        gold=gold_for(cfg, store.read_frame("table.parquet")),
        budget=a.budget if push else 0,
        project_title=a.project_title,
        url_env=a.url_env,
        api_key_env=a.api_key_env,
        tracking_uri=last.get("tracking_uri") or cfg.tracking.tracking_uri,
        experiment=cfg.tracking.experiment,
        parent_run_id=last.get("run_id"),
    )
    result = sync(settings).summary()
    progress(
        f"annotation sync: pulled {result['pulled']}, pushed {result['pushed']}, merged table {result['out']}"
    )
    return result


def annotated_metrics(
    cfg: ExperimentConfig, store: RunStore, merged_table: str, *, progress: Progress = _noop
) -> dict:
    """``analyze`` on the table with the human labels merged in; one folder per distinct merged table."""
    import hashlib

    from judgebias.io import read_table

    digest = hashlib.sha256(Path(merged_table).read_bytes()).hexdigest()[:12]
    table, _ = read_table(merged_table)
    return compute_metrics(cfg, store, table, prefix=f"annotated-{digest}/", progress=progress)
