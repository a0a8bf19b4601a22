"""Weight-only quantization of a loaded local model: a larger judge in less memory.

``int8``: every linear layer's weights stored as int8 with one scale per output row (torchao's
``Int8WeightOnlyConfig``); activations stay in the model's dtype; the embeddings, the norms and
an output layer tied to the embeddings are untouched.
Measured in docs/benchmarks.md ("Judges that fit in memory"): what it saves, what it costs in speed
and in P(A) against the fp32 reference.

torchao is an optional extra (``pip install 'judgebias[quant]'``); asking for a quantized judge
without it is a clear error, never a silent fall-back to full weights.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, get_args

Quantization = Literal["none", "int8"]  # the config's field type; the one list of schemes
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


def check_quantization(scheme: str, *, what: str = "model") -> None:
    if scheme not in QUANTIZATIONS:
        raise ValueError(f"{what}: unknown quantization {scheme!r}; use one of {', '.join(QUANTIZATIONS)}")


def _torchao():
    try:
        import torchao
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError as exc:
        raise RuntimeError(
            "quantization 'int8' needs torchao, an optional extra: pip install 'judgebias[quant]' "
            f"(or pip install torchao) ({exc})") from None
    return torchao.__version__, Int8WeightOnlyConfig, quantize_


def quantize_weights(loaded, scheme: str):
    """``loaded`` (a ``models.LoadedModel``) with its linear weights quantized in place, its identity
    naming the scheme and the torchao version (both join the call-cache key: a quantized judge's
    answers are never served for the full-precision one). ``"none"`` and an already quantized model
    are returned as they are."""
    check_quantization(scheme, what=loaded.name)
    if scheme == "none" or loaded.identity.get("quantization") == _label(scheme):
        return loaded
    if loaded.identity.get("quantization"):
        raise ValueError(f"{loaded.name}: already quantized ({loaded.identity['quantization']}), "
                         f"cannot quantize again to {scheme}")
    import torch

    version, int8_config, quantize_ = _torchao()
    embedding = loaded.model.get_input_embeddings().weight

    def linear_not_tied(module, fqn: str) -> bool:
        # A tied output layer shares the embedding's weight: quantizing it would add an int8 copy
        # of the largest matrix (vocab x hidden) beside the embedding instead of saving anything.
        return isinstance(module, torch.nn.Linear) and module.weight is not embedding

    quantize_(loaded.model, int8_config(), filter_fn=linear_not_tied)
    identity = {**loaded.identity, "quantization": _label(scheme), "torchao": version}
    return dataclasses.replace(loaded, identity=identity)


def _label(scheme: str) -> str:
    return f"{scheme}-weight-only"


def weight_bytes(model) -> int:
    """Bytes the model's parameters and buffers hold, each storage counted once (a tied embedding
    once), quantized tensors by their int8 data and scales: what the weights cost in memory."""
    seen: set[int] = set()
    total = 0

    def add(t) -> None:
        nonlocal total
        if hasattr(t, "__tensor_flatten__"):  # a tensor subclass (torchao): its inner tensors
            names, _ = t.__tensor_flatten__()
            for n in names:
                add(getattr(t, n))
            return
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()

    for t in [*model.parameters(), *model.buffers()]:
        add(t)
    return total
