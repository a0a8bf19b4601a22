"""Explanation stages: perplexity (Wataoka et al., Sec. 5) and attention per layer (DBG Fig. 7)."""

from __future__ import annotations

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout, slug
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, frame, noop, open_model, stage_output
from judgebias.stages.data import subset
from judgebias.stages.generation import pair_records
from judgebias.stages.judge import judge_chat


def perplexity_analysis(
    cfg: ExperimentConfig, store: RunStore, judge: str, pairs: pd.DataFrame, *, progress: Progress = noop
) -> pd.DataFrame:
    """The judge's perplexity of each response given its instruction: ``pair_id, judge, ppl_a, ppl_b``."""
    from judgebias.engine.perplexity import fill_perplexity

    j = cfg.judge(judge)

    def compute(info: dict) -> pd.DataFrame:
        with open_model(cfg, j, name=judge) as backend:
            filled = fill_perplexity(pairs, backend, context="auto", chunk_size=j.batch_size * 4)
            df = filled[["pair_id", "ppl_a", "ppl_b", "ppl_error"]].assign(judge=judge)
            info.update(n=len(df), calls=backend.calls, hits=backend.hits)
        progress(f"{judge}: perplexity of {len(df)} pairs' responses")
        return df

    return stage_output(store, frame(RunLayout.perplexity(judge)), f"perplexity_analysis[{judge}]", compute)


def attention_analysis(
    cfg: ExperimentConfig, store: RunStore, judge: str, pairs: pd.DataFrame, *, progress: Progress = noop
) -> pd.DataFrame:
    """Mean attention per layer that the judge pays to each response (DBG Fig. 7), averaged over both
    presentation orders so the response's position does not masquerade as its author; one row per
    (pair, layer) with the generators, plus a per-generator plot."""
    from judgebias.engine.attention import summarize
    from judgebias.prompts import judge_template

    j = cfg.judge(judge)

    def compute(info: dict) -> pd.DataFrame:
        plist = pair_records(subset(pairs, cfg.analyses.attention_sample, cfg.dataset.seed))
        with open_model(cfg, j, name=judge) as backend:
            template = judge_template(j.template)
            chat = judge_chat(j, backend)
            by_order = {o: summarize(backend.inner, plist, template, order=o, chat=chat)
                        for o in ("ab", "ba")}
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
        if len(df):
            from judgebias.reporting import plots, plots_ablations
            plots.save_figure(plots_ablations.attention_layers(attention_by_generator(df), judge),
                              store.path(RunLayout().plot(f"attention_{slug(judge)}")))
        progress(f"{judge}: attention per layer over {len(plist)} pairs, both orders")
        return df

    return stage_output(store, frame(RunLayout.attention(judge)), f"attention_analysis[{judge}]", compute)


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
