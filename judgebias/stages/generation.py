"""Generation stage: every generator answers every instruction; pairs are built from the answers."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pandas as pd

from judgebias.config.experiment import ExperimentConfig
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, frame, noop, on_route, stage_output
from judgebias.tables.pairwise import Exclusions
from judgebias.tables.records import Pair

if TYPE_CHECKING:
    from judgebias.engine.workers import ChunkRoute


def generate_responses(
    cfg: ExperimentConfig,
    store: RunStore,
    generator: str,
    instructions: pd.DataFrame,
    *,
    variant: RunLayout = RunLayout(),
    adapter: dict | None = None,
    chunks: ChunkRoute | None = None,
    progress: Progress = noop,
) -> pd.DataFrame:
    """One generator's answer to each instruction (``adapter``: a fine-tuned variant's adapter).
    ``chunks``: where to run the prompts in chunks (the flow's workers); the responses are the same."""
    from judgebias.backends.kinds import chat_for
    from judgebias.backends.protocol import GenerationParams
    from judgebias.prompts import generation_template

    def compute(info: dict) -> pd.DataFrame:
        g = cfg.generator(generator)
        chat = bool(chat_for(g.prompt_kind))  # a generator names chat or few-shot, never auto
        template = generation_template(cfg.prompts.generation)
        params = GenerationParams(max_new_tokens=g.max_new_tokens, stop=template.stop(chat))
        prompts = [template.build(q, chat=chat) for q in instructions["instruction"]]

        def sharded(spec):
            from judgebias.engine.workers import generate_chunk_size

            return chunks.generate(prompts, spec, params, template.tag(chat),
                                   generate_chunk_size(g.batch_size))

        def local(backend) -> list:
            runner = backend.with_template(template.tag(chat))  # the template version joins the cache key
            out = []
            for start in range(0, len(prompts), g.batch_size):
                out.extend(runner.generate(prompts[start : start + g.batch_size], params))
                progress(f"{generator}: {len(out)}/{len(prompts)} responses")
            return out

        out, calls, hits = on_route(cfg, g, name=generator, adapter=adapter, chunks=chunks,
                                    sharded=sharded, local=local)
        df = instructions[["instruction_id", "instruction"]].copy()
        df["generator"] = generator
        df["response"] = [o.text.strip() for o in out]
        df["completion_tokens"] = [o.completion_tokens for o in out]
        df["error"] = [o.error or (None if o.text.strip() else "empty response") for o in out]
        info.update(n=len(df), failed=int(df["error"].notna().sum()), calls=calls, hits=hits)
        progress(f"{generator}: {len(df)} responses ({calls} generated, {hits} from cache)")
        return df

    return stage_output(store, frame(variant.responses(generator)),
                        variant.stage(f"generate_responses[{generator}]"), compute)


def build_pairs(
    cfg: ExperimentConfig,
    store: RunStore,
    responses: dict[str, pd.DataFrame],
    *,
    variant: RunLayout = RunLayout(),
    progress: Progress = noop,
) -> pd.DataFrame:
    """One pair per instruction and unordered generator pair (A = earlier generator in the config;
    both orders are judged). A failed response excludes its pairs, counted by reason."""

    def compute(_: dict) -> pd.DataFrame:
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
        store.write_json(variant.pairs_exclusions, excluded.to_dict())
        progress(f"{len(df)} pairs ({excluded})")
        return df

    return stage_output(store, frame(variant.pairs), None, compute)  # cheap: not timed


def pair_records(df: pd.DataFrame) -> list[Pair]:
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


