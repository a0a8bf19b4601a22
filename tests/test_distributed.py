"""Chunked judging: sharding/merging (pure), the chunk store, per-worker model reuse, and a real run
on a local Dask cluster of 2 worker processes that must equal the single-process result."""

from __future__ import annotations

import json
import math
import os

import pytest

from judgebias.backends.builder import JudgeSpec, ModelSpec
from judgebias.backends.random_weights import random_model
from judgebias.engine import chunks as chunking
from judgebias.engine import workers
from judgebias.engine.chunks import ChunkStore, merge, shard
from judgebias.flows.runtime.task_runners import make_task_runner
from judgebias.tables.records import Pair


def _pairs(n: int) -> list[Pair]:
    return [Pair(pair_id=f"p{i}", prompt=f"Question {i}: what is {i} plus {i}?",
                 response_a=f"It is {2 * i}." + " Indeed." * (i % 3), response_b=f"{i}+{i} = {2 * i + i % 2}",
                 generator_a="gen-x", generator_b="gen-y") for i in range(n)]


# --- shard / merge --------------------------------------------------------------------------------------


def test_shard_keeps_order_and_sizes():
    pairs = _pairs(7)
    chunks = shard(pairs, 3, "judge-1")
    assert [c.index for c in chunks] == [0, 1, 2]
    assert [c.pair_ids for c in chunks] == [("p0", "p1", "p2"), ("p3", "p4", "p5"), ("p6",)]
    assert len({c.chunk_id for c in chunks}) == 3


def test_chunk_ids_are_stable_and_depend_on_task_and_content():
    pairs = _pairs(4)
    ids = [c.chunk_id for c in shard(pairs, 2, "judge-1")]
    assert ids == [c.chunk_id for c in shard(_pairs(4), 2, "judge-1")]  # same work, same ids
    assert ids[0] != shard(pairs, 2, "judge-2")[0].chunk_id  # another judge: other work
    edited = [pairs[0].model_copy(update={"response_b": "changed"}), *pairs[1:]]
    new_ids = [c.chunk_id for c in shard(edited, 2, "judge-1")]
    assert new_ids[0] != ids[0] and new_ids[1] == ids[1]  # only the chunk whose text changed


def test_shard_rejects_bad_input():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        shard(_pairs(2), 0)
    with pytest.raises(ValueError, match=r"repeated pair_id.*'p1'"):
        shard([*_pairs(2), _pairs(2)[1]], 2)
    assert shard([], 4) == []


def test_merge_restores_the_original_order_within_and_across_chunks():
    chunks = shard(_pairs(5), 2, "t")
    # Results arrive in any chunk order and any row order within a chunk.
    results = {c.chunk_id: [{"pair_id": pid, "k": pid.upper()} for pid in reversed(c.pair_ids)]
               for c in reversed(chunks)}
    merged = merge(chunks, results)
    assert [r["pair_id"] for r in merged] == ["p0", "p1", "p2", "p3", "p4"]
    assert merged[3]["k"] == "P3"


def test_merge_names_incomplete_chunks():
    chunks = shard(_pairs(4), 2, "t")
    ok = {c.chunk_id: [{"pair_id": pid} for pid in c.pair_ids] for c in chunks}
    with pytest.raises(ValueError, match=r"chunk 1 .*: no result"):
        merge(chunks, {chunks[0].chunk_id: ok[chunks[0].chunk_id]})
    with pytest.raises(ValueError, match=r"chunk 0 .*missing pair\(s\) \['p1'\]"):
        merge(chunks, {**ok, chunks[0].chunk_id: [{"pair_id": "p0"}]})
    with pytest.raises(ValueError, match=r"unexpected pair\(s\) \['zz'\]"):
        merge(chunks, {**ok, chunks[0].chunk_id: [{"pair_id": "p0"}, {"pair_id": "p1"}, {"pair_id": "zz"}]})
    with pytest.raises(ValueError, match="returned twice"):
        merge(chunks, {**ok, chunks[1].chunk_id: [{"pair_id": "p2"}, {"pair_id": "p2"}, {"pair_id": "p3"}]})


def test_chunk_store_round_trip_keeps_nan_and_leaves_no_temp_files(tmp_path):
    store = ChunkStore(tmp_path / "chunks")
    assert store.get("abc") is None and "abc" not in store
    rows = [{"pair_id": "p0", "p_a": math.nan, "human": ["a"], "verdict": None}]
    store.put("abc", rows, meta={"calls": 2})
    back = store.get("abc")
    assert "abc" in store and back[0]["human"] == ["a"] and back[0]["verdict"] is None
    assert math.isnan(back[0]["p_a"])
    assert [p.name for p in (tmp_path / "chunks").iterdir()] == ["abc.json"]
    assert json.loads((tmp_path / "chunks" / "abc.json").read_text())["meta"] == {"calls": 2}


def test_prompts_shard_by_position_and_merge_back_aligned():
    from judgebias.backends.protocol import Prompt

    prompts = [Prompt.raw(f"text {i}") for i in range(5)]
    chunks = chunking.shard_prompts(prompts, 2, "gen")
    assert [c.keys for c in chunks] == [("0", "1"), ("2", "3"), ("4",)]
    changed = chunking.shard_prompts([Prompt.raw("other"), *prompts[1:]], 2, "gen")
    assert changed[0].chunk_id != chunks[0].chunk_id
    results = {c.chunk_id: [p.text for p in c.items] for c in chunks}
    assert chunking.merge_aligned(chunks, results) == [p.text for p in prompts]
    with pytest.raises(ValueError, match=r"chunk 2 .*: 0 results for 1 items"):
        chunking.merge_aligned(chunks, {**results, chunks[2].chunk_id: []})


def test_a_chunk_with_a_failed_item_is_not_stored_and_a_rerun_retries_only_that_item(tmp_path, monkeypatch):
    from distributed_backends import FlakyEcho

    from judgebias.backends.protocol import GenerationParams, Prompt

    workers.release_worker_backends()
    FlakyEcho.calls.clear()
    spec = ModelSpec(name="echo", model="echo-1", factory="distributed_backends:flaky_echo",
                          batch_size=8, cache_dir=str(tmp_path / "cache"))
    chunk = chunking.shard_prompts([Prompt.raw("a"), Prompt.raw("FAIL b"), Prompt.raw("c")], 3, "t")[0]
    store = str(tmp_path / "chunks")
    monkeypatch.setenv("FLAKY_FAIL", "1")
    first = workers.generate_chunk(chunk, spec, GenerationParams(), "tpl@1", store)
    assert [r["error"] for r in first.rows] == [None, "simulated timeout", None]
    assert first.exclusions == {"simulated timeout": 1} and chunk.chunk_id not in chunking.ChunkStore(store)
    monkeypatch.setenv("FLAKY_FAIL", "0")
    second = workers.generate_chunk(chunk, spec, GenerationParams(), "tpl@1", store)
    assert [r["text"] for r in second.rows] == ["A", "FAIL B", "C"]
    assert (second.calls, second.hits, second.loaded_model) == (1, 2, False)  # only the failed one
    assert FlakyEcho.calls == [3, 1]
    assert workers.generate_chunk(chunk, spec, GenerationParams(), "tpl@1", store).from_store
    assert FlakyEcho.calls == [3, 1]
    workers.release_worker_backends()


# --- per-worker backends --------------------------------------------------------------------------------


def test_worker_backend_loads_once_per_model_and_evicts_beyond_capacity(monkeypatch):
    built: list[str] = []
    monkeypatch.setattr(workers, "_build_backend", lambda spec: built.append(spec.model) or object())
    workers.release_worker_backends()
    a, b = JudgeSpec(name="a", model="m-a"), JudgeSpec(name="b", model="m-b")
    first, loaded = workers.worker_backend(a)
    assert loaded and workers.worker_backend(a) == (first, False)
    # Another template or batch size is the same loaded model.
    same_model = JudgeSpec(name="a", model="m-a", template="mtbench-pair", batch_size=2)
    assert workers.worker_backend(same_model)[1] is False
    workers.worker_backend(b)  # capacity 1 (default): a is released
    assert workers.worker_backend(a)[1] is True
    assert built == ["m-a", "m-b", "m-a"]
    monkeypatch.setenv(workers.ENV_WORKER_MODELS, "2")
    workers.worker_backend(b)
    assert workers.worker_backend(a)[1] is False and workers.worker_backend(b)[1] is False
    assert workers.worker_stats()["loads"][a.model_key()] == 2
    workers.release_worker_backends()


def test_task_runner_choices():
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(make_task_runner("thread", 3), ThreadPoolTaskRunner)
    local = make_task_runner("dask", 2, torch_threads=3)
    assert isinstance(local, DaskTaskRunner)
    assert local.cluster_kwargs == {"n_workers": 2, "processes": True, "threads_per_worker": 1,
                                    "env": {"JUDGEBIAS_TORCH_THREADS": "3"}}
    assert make_task_runner("dask", address="tcp://127.0.0.1:8786").address == "tcp://127.0.0.1:8786"
    with pytest.raises(ValueError, match="only applies to the 'dask'"):
        make_task_runner("thread", 1, "tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="unknown task runner 'ray'"):
        make_task_runner("ray")


# --- a real run on 2 Dask worker processes -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_judge_folder(tmp_path_factory):
    """A tiny random Llama + the SmolLM2 tokenizer saved as a local folder, loadable by path in
    any worker process."""
    from judgebias.backends import loading as models
    folder = tmp_path_factory.mktemp("tiny-judge")
    tok = models.load_tokenizer("smollm2-135m-instruct")
    lm = random_model("tiny-llama", tokenizer=tok, seed=3, device="cpu", initializer_range=0.2)
    lm.model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reference_rows(tiny_judge_folder):
    """The single-process result: one process, no cache, all 12 pairs in one call."""
    from judgebias.backends.local import LocalBackend
    from judgebias.engine.pairwise import judge_pairs
    from judgebias.prompts import judge_template

    return judge_pairs(_pairs(12), LocalBackend(str(tiny_judge_folder), name="tiny"),
                       judge_template("dbg-ab"), judge="tiny").rows


def _assert_same_judgments(rows, reference):
    assert [r["pair_id"] for r in rows] == [r["pair_id"] for r in reference]
    for row, ref in zip(rows, reference, strict=True):
        assert row["judge"] == "tiny"
        for col in ("p_a", "p_a_ab", "p_a_ba"):
            assert abs(row[col] - ref[col]) <= 1e-6, (row["pair_id"], col, row[col], ref[col])
        assert row["verdict"] == ref["verdict"]


@pytest.mark.slow
def test_dask_run_equals_single_process_and_reruns_make_no_model_calls(prefect_harness, tiny_judge_folder,
                                                                      reference_rows, tmp_path):
    import pandas as pd

    from judgebias.flows.distributed_judging import distributed_judging
    from judgebias.tables.files import read_table, write_table

    pairs = _pairs(12)
    table = tmp_path / "pairs.jsonl"
    write_table(pd.DataFrame([{**p.model_dump(), "human": list(p.human)} for p in pairs]), table)
    reference = reference_rows

    cache_dir = str(tmp_path / "call-cache")
    common = dict(model=str(tiny_judge_folder), judge="tiny", runner="dask", workers=2, batch_size=2,
                  cache_dir=cache_dir)
    out = tmp_path / "judged.jsonl"
    first = distributed_judging(str(table), str(out), chunk_size=3, **common)
    assert first["chunks"] == 4 and first["items"] == 12 and first["chunks_from_store"] == 0
    assert first["calls"] == 24 and first["hits"] == 0  # 12 pairs x 2 orders
    assert os.getpid() not in first["worker_pids"] and 1 <= len(first["worker_pids"]) <= 2
    assert first["model_loads"] == len(first["worker_pids"])  # one load per worker process

    judged, _ = read_table(out)
    _assert_same_judgments(judged.to_dict(orient="records"), reference)
    assert not judged["p_a"].isna().any()

    # Rerun: every chunk is finished, so no model is even loaded.
    again = distributed_judging(str(table), str(out), chunk_size=3, **common)
    assert (again["chunks_from_store"], again["calls"], again["model_loads"]) == (4, 0, 0)

    # Other chunking (new chunk ids, new store), in this process: the cache the two worker
    # processes wrote answers every call.
    regrouped = distributed_judging(str(table), str(tmp_path / "judged-5.jsonl"), chunk_size=5,
                                    **{**common, "runner": "thread", "workers": 1})
    assert regrouped["chunks"] == 3 and regrouped["calls"] == 0 and regrouped["hits"] == 24
    assert read_table(tmp_path / "judged-5.jsonl")[0]["p_a"].tolist() == judged["p_a"].tolist()


@pytest.mark.slow
def test_chunked_generation_matches_direct_generation_and_reruns_from_store(
        prefect_harness, tiny_judge_folder, tmp_path):
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.protocol import GenerationParams, Prompt
    from judgebias.tasks.chunks import generate_in_chunks

    prompts = [Prompt.chat(("user", f"Write a word about the number {i}.")) for i in range(6)]
    params = GenerationParams(max_new_tokens=6)
    direct = LocalBackend(str(tiny_judge_folder), name="tiny")
    reference = [g for s in range(0, 6, 2) for g in direct.generate(prompts[s:s + 2], params)]

    spec = ModelSpec(name="tiny", model=str(tiny_judge_folder), batch_size=2,
                          cache_dir=str(tmp_path / "call-cache"))
    store = str(tmp_path / "chunks")
    runner = make_task_runner("thread", 2)  # two chunks at once share one serialized model
    workers.release_worker_backends()
    gens, summary = generate_in_chunks(prompts, spec, params, template_tag="t@1", chunk_size=2,
                                       task_runner=runner, store_dir=store)
    assert [g.text for g in gens] == [g.text for g in reference]
    assert [g.completion_tokens for g in gens] == [g.completion_tokens for g in reference]
    assert (summary.chunks, summary.calls, summary.model_loads) == (3, 6, 1)

    again, summary = generate_in_chunks(prompts, spec, params, template_tag="t@1", chunk_size=2,
                                        task_runner=runner, store_dir=store)
    assert [g.text for g in again] == [g.text for g in gens]
    assert (summary.chunks_from_store, summary.calls) == (3, 0)
    # Another template version is other work: nothing from the store or the cache.
    _, other = generate_in_chunks(prompts, spec, params, template_tag="t@2", chunk_size=3,
                                  task_runner=runner, store_dir=store)
    assert (other.chunks_from_store, other.calls, other.hits) == (0, 6, 0)
    workers.release_worker_backends()


@pytest.mark.slow
def test_a_worker_killed_mid_chunk_costs_only_its_unfinished_batch(prefect_harness, tiny_judge_folder,
                                                                  reference_rows, tmp_path, monkeypatch):
    """One Dask worker process dies (os._exit) after its chunk's first model call
    (one batch). Dask restarts it and reschedules the chunk; the batch that reached the shared cache is
    not scored again, and the merged result is still the single-process result."""
    from distributed_backends import MARKER_ENV
    from prefect import flow

    from judgebias.tasks.chunks import judge_in_chunks

    marker = tmp_path / "crashed"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    # batch_size 1: one prompt per model call and per cache transaction.
    spec = JudgeSpec(name="tiny", model=str(tiny_judge_folder), batch_size=1,
                     cache_dir=str(tmp_path / "call-cache"), factory="distributed_backends:dies_once")

    @flow(name="judge-with-a-crash")
    def run():
        return judge_in_chunks(_pairs(12), spec, chunk_size=3, task_runner=make_task_runner("dask", 2),
                               store_dir=str(tmp_path / "chunks"))

    rows, summary = run()
    assert marker.exists(), "no worker died: the test did not test anything"
    _assert_same_judgments(rows, reference_rows)
    # 24 prompts in all; the dead worker's first call (1 prompt) was cached before it died.
    assert (summary.calls, summary.hits) == (23, 1)
