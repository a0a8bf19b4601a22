"""A synthetic judgment table with a known structure, for the analyze benchmark: several judges that
are also generators (a self bonus), verbosity and perplexity effects, position bias, three human
labels per pair, one verdict-only judge; in memory, or written once as Parquet (row group by row
group) or JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


def synthetic_table(n_rows: int = 1_000_000, n_judges: int = 5, seed: int = 0) -> pd.DataFrame:
    """One row per (pair, judge): several judges that are also generators, 3 human labels per pair,
    perplexities, both presentation orders; the last judge gives verdicts only."""
    rng = np.random.default_rng(seed)
    judges = [f"judge-{i}" for i in range(n_judges)]
    generators = [*judges[:3], "gen-x", "gen-y", "gen-z"]
    n_pairs = max(1, n_rows // n_judges)
    ga = rng.integers(0, len(generators), n_pairs)
    gb = (ga + rng.integers(1, len(generators), n_pairs)) % len(generators)
    words_a = rng.integers(5, 120, n_pairs)
    words_b = rng.integers(5, 120, n_pairs)
    quality = rng.normal(size=n_pairs)
    base = "lorem " * 130
    resp_a = np.array([base[: 6 * k] for k in words_a], dtype=object)
    resp_b = np.array([base[: 6 * k] for k in words_b], dtype=object)
    p_human = 1 / (1 + np.exp(-(quality + 0.01 * (words_a - words_b))))
    votes = rng.random((n_pairs, 3)) < p_human[:, None]
    tie = rng.random((n_pairs, 3)) < 0.05
    lab = np.where(tie, "tie", np.where(votes, "a", "b"))
    human = pd.Series(lab.tolist(), dtype=object)
    pair_ids = np.array([f"p{i}" for i in range(n_pairs)], dtype=object)
    prompts = np.array([f"question {i}" for i in range(n_pairs)], dtype=object)
    gen_names = np.array(generators, dtype=object)

    frames = []
    for j, judge in enumerate(judges):
        wrote_a = (ga == j) & (j < 3)  # only the first three judges are also generators
        wrote_b = (gb == j) & (j < 3)
        own = wrote_a.astype(float) - wrote_b.astype(float)
        ppl_a = np.exp(rng.normal(2.0 - 0.5 * wrote_a, 0.4, n_pairs))
        ppl_b = np.exp(rng.normal(2.0 - 0.5 * wrote_b, 0.4, n_pairs))
        logit = (quality + 0.6 * own - 0.8 * (np.log(ppl_a) - np.log(ppl_b))
                 + 0.015 * (words_a - words_b))
        p_ab = 1 / (1 + np.exp(-(logit + 0.4 + rng.normal(0, 0.3, n_pairs))))
        p_ba = 1 / (1 + np.exp(-(logit - 0.4 + rng.normal(0, 0.3, n_pairs))))
        frame = {
            "pair_id": pair_ids, "prompt": prompts, "response_a": resp_a, "response_b": resp_b,
            "generator_a": gen_names[ga], "generator_b": gen_names[gb],
            "judge": np.full(n_pairs, judge, dtype=object), "human": human.to_numpy(),
            "ppl_a": ppl_a, "ppl_b": ppl_b,
        }
        if j == n_judges - 1:  # verdict-only judge, like an API model without logprobs
            frame["verdict_ab"] = np.where(p_ab > 0.5, "a", "b").astype(object)
            frame["verdict_ba"] = np.where(p_ba > 0.5, "a", "b").astype(object)
            same = frame["verdict_ab"] == frame["verdict_ba"]
            frame["verdict"] = np.where(same, frame["verdict_ab"], "tie")
        else:
            frame.update(p_a_ab=p_ab, p_a_ba=p_ba, p_a=(p_ab + p_ba) / 2)
        frames.append(pd.DataFrame(frame))
    return pd.concat(frames, ignore_index=True).iloc[:n_rows]


_BLOCK_PAIRS = 100_000


def _pair_block(lo: int, hi: int, generators: list[str], seed: int) -> dict:
    """The judge-independent columns of pairs ``lo``..``hi`` (drawn from a seed of their own, so a
    block is the same whichever judge's rows are being written)."""
    rng = np.random.default_rng([seed, lo])
    n = hi - lo
    ga = rng.integers(0, len(generators), n)
    gb = (ga + rng.integers(1, len(generators), n)) % len(generators)
    words_a, words_b = rng.integers(5, 120, n), rng.integers(5, 120, n)
    quality = rng.normal(size=n)
    p_human = 1 / (1 + np.exp(-(quality + 0.01 * (words_a - words_b))))
    votes = rng.random((n, 3)) < p_human[:, None]
    tie = rng.random((n, 3)) < 0.05
    labels = np.where(tie, "tie", np.where(votes, "a", "b")).ravel()
    base = "lorem " * 130
    ids = np.arange(lo, hi)
    # Every pair has texts of its own (a number first), as real data has: no table-wide repeats
    # that a dictionary-encoded file or a cache could exploit.
    return {"ga": ga, "gb": gb, "words_a": words_a, "words_b": words_b, "quality": quality,
            "human": labels, "pair_id": [f"p{i}" for i in ids], "prompt": [f"question {i}" for i in ids],
            "response_a": [f"{i} {base[: 6 * k]}" for i, k in zip(ids, words_a, strict=True)],
            "response_b": [f"{i} {base[: 6 * k]}" for i, k in zip(ids, words_b, strict=True)]}


def write_synthetic_parquet(path: Path, n_rows: int, n_judges: int = 5, seed: int = 0) -> Path:
    """The structure of ``synthetic_table`` (judge-major rows, the last judge verdict-only), written
    block by block so a 10M-row file never has to fit in memory. Atomic: a temp file, then a rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    judges = [f"judge-{i}" for i in range(n_judges)]
    generators = [*judges[:3], "gen-x", "gen-y", "gen-z"]
    gen_names = np.array(generators, dtype=object)
    n_pairs = -(-n_rows // n_judges)
    tmp = path.with_name(path.name + ".tmp")
    writer = None
    left = n_rows
    for j, judge in enumerate(judges):
        for lo in range(0, n_pairs, _BLOCK_PAIRS):
            if left <= 0:
                break
            hi = min(n_pairs, lo + _BLOCK_PAIRS, lo + left)
            b = _pair_block(lo, hi, generators, seed)
            n = hi - lo
            rng = np.random.default_rng([seed, lo, j + 1])
            wrote_a, wrote_b = (b["ga"] == j) & (j < 3), (b["gb"] == j) & (j < 3)
            ppl_a = np.exp(rng.normal(2.0 - 0.5 * wrote_a, 0.4, n))
            ppl_b = np.exp(rng.normal(2.0 - 0.5 * wrote_b, 0.4, n))
            logit = (b["quality"] + 0.6 * (wrote_a.astype(float) - wrote_b)
                     - 0.8 * (np.log(ppl_a) - np.log(ppl_b)) + 0.015 * (b["words_a"] - b["words_b"]))
            p_ab = 1 / (1 + np.exp(-(logit + 0.4 + rng.normal(0, 0.3, n))))
            p_ba = 1 / (1 + np.exp(-(logit - 0.4 + rng.normal(0, 0.3, n))))
            cols = {
                "pair_id": pa.array(b["pair_id"]), "prompt": pa.array(b["prompt"]),
                "response_a": pa.array(b["response_a"]), "response_b": pa.array(b["response_b"]),
                "generator_a": pa.array(gen_names[b["ga"]]), "generator_b": pa.array(gen_names[b["gb"]]),
                "judge": pa.array([judge] * n),
                "human": pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)),
                                                  pa.array(b["human"])),
                "ppl_a": pa.array(ppl_a), "ppl_b": pa.array(ppl_b),
            }
            if j == n_judges - 1:
                vab, vba = np.where(p_ab > 0.5, "a", "b"), np.where(p_ba > 0.5, "a", "b")
                none = pa.nulls(n, pa.float64())
                cols.update(p_a=none, p_a_ab=none, p_a_ba=none, verdict_ab=pa.array(vab),
                            verdict_ba=pa.array(vba), verdict=pa.array(np.where(vab == vba, vab, "tie")))
            else:
                nulls = pa.nulls(n, pa.string())
                cols.update(p_a=pa.array((p_ab + p_ba) / 2), p_a_ab=pa.array(p_ab), p_a_ba=pa.array(p_ba),
                            verdict_ab=nulls, verdict_ba=nulls, verdict=nulls)
            batch = pa.table(cols)
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema)
            writer.write_table(batch)
            left -= n
    writer.close()
    tmp.replace(path)
    return path


def write_synthetic_jsonl(parquet: Path, path: Path) -> Path:
    """The Parquet table ``parquet`` as JSONL (``judgebias.tables.files.write_table``'s lines: missing
    values as null), row group by row group. Atomic: a temp file, then a rename."""
    import pyarrow.parquet as pq

    tmp = path.with_name(path.name + ".tmp")
    source = pq.ParquetFile(parquet)
    with tmp.open("w", encoding="utf-8") as fh:
        for k in range(source.num_row_groups):
            rows = source.read_row_group(k).to_pylist()
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    tmp.replace(path)
    return path
