"""The experiment on a Dask task runner: its generation and judging stages shard into chunks that run
as Prefect tasks on a local cluster of 2 worker processes, and the run folder holds what one
process writes (same files, same rows in the same order)."""

from __future__ import annotations

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def _config(models: dict, base, runner: dict) -> dict:
    def model(name: str, path: str, **extra) -> dict:
        return {"name": name, "model": path, "batch_size": 1, **extra}

    return {
        "name": "sharded",
        "dataset": {"source": "mt-bench-40", "sample": 4, "seed": 0},
        "generators": [model("ta", models["tiny-a"], max_new_tokens=6),
                       model("tb", models["tiny-b"], max_new_tokens=6, prompt_kind="few-shot")],
        "judges": [model("ta", models["tiny-a"]), model("tb", models["tiny-b"], prompt_kind="few-shot")],
        "self_map": {"ta": "ta", "tb": "tb"},
        "analyses": {"perplexity": False, "attention": False},
        "run_dir": str(base / "runs"),
        "cache_dir": str(base / "calls"),  # its own cache: the Dask run computes every call again
        "task_runner": runner,
    }


def _run(models, base, runner):
    from judgebias.config.experiment import ExperimentConfig
    from judgebias.flows.experiment import configured, main_flow

    cfg = ExperimentConfig.model_validate(_config(models, base, runner))
    state = configured(main_flow, cfg)(cfg, return_state=True)
    assert state.is_completed(), state
    return cfg.run_path(), state.state_details.flow_run_id


def _chunk_task_runs(flow_run_id) -> list[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return sorted(r.name.rsplit("-", 1)[0] for r in runs if r.name.startswith(("judge-chunk-",
                                                                               "generate-chunk-")))


def test_the_experiment_on_two_dask_workers_writes_the_one_process_run_folder(prefect_harness, tiny_models,
                                                                             tmp_path, monkeypatch):
    import torch

    from judgebias.engine import workers

    # Small chunks, so that 4 instructions make several chunks per stage: 1 prompt per generation
    # chunk, 2 pairs (one scoring call at batch size 1) per judging chunk.
    monkeypatch.setattr(workers, "GENERATE_CHUNK_PROMPTS", 1)
    monkeypatch.setattr(workers, "JUDGE_CHUNK_PAIRS", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each of the 2 workers on this 2-core machine: the same float sums
    try:
        one, one_id = _run(tiny_models, tmp_path / "one", {"kind": "thread"})
    finally:
        torch.set_num_threads(threads)
    sharded, sharded_id = _run(tiny_models, tmp_path / "dask", {"kind": "dask", "max_workers": 2})

    # The one-process run has no chunk task; the Dask run has one per chunk: 4 prompts for each of the
    # 2 generators, and for each of the 2 judges one chunk per 2 pairs.
    pairs = len(pd.read_parquet(one / "pairs.parquet"))
    assert pairs >= 3  # 4 instructions, one generator pair: at most one empty response
    assert _chunk_task_runs(one_id) == []
    kinds = _chunk_task_runs(sharded_id)
    assert (kinds.count("generate-chunk"), kinds.count("judge-chunk")) == (8, 2 * -(-pairs // 2)), kinds

    files = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(sharded).as_posix() for p in sharded.rglob("*") if p.is_file())
    frames = [f for f in files if f.endswith(".parquet")]
    assert {"pairs.parquet", "table.parquet", "responses/ta.parquet", "judgments/tb.parquet"} <= set(frames)
    for name in frames:
        pd.testing.assert_frame_equal(pd.read_parquet(sharded / name), pd.read_parquet(one / name),
                                      check_exact=True, obj=name)
    table = pd.read_parquet(one / "table.parquet")
    assert len(table) == 2 * pairs and table["p_a"].notna().all()
    assert (one / "metrics.json").read_text() == (sharded / "metrics.json").read_text()
