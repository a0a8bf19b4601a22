"""Getting models ready fast on a cold machine: a GGUF converted once (parsed once, by one process,
ahead of need) and plain weights kept resident between stages."""

from __future__ import annotations

import pytest

from judgebias.backends import builder
from judgebias.backends import gguf as conversion
from judgebias.backends import loading as models
from judgebias.backends.random_weights import random_model

ALIAS = "smollm2-135m-instruct"


def test_the_prefetch_child_and_a_stage_convert_a_model_once_between_them(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("JUDGEBIAS_MODEL_CACHE", str(tmp_path / "models"))
    assert models.needs_conversion(ALIAS)
    child = models.prefetch([ALIAS, ALIAS])  # named twice: converted once
    assert child is not None
    parses = []
    import gguf

    class Counting(gguf.GGUFReader):
        def __init__(self, *args, **kwargs):
            parses.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    # A stage asks for the model at once: whichever of the two takes the lock first converts it, the
    # other waits and finds it done (in a run, Prefect's start-up gives the child the head start).
    _, folder = models.local_folder(ALIAS)
    assert child.wait(timeout=300) == 0
    by_child = models.converted_by(folder) == child.pid
    assert by_child != bool(parses), (by_child, parses)  # one of them parsed it, never both
    assert (f"model {ALIAS}: ready" in capfd.readouterr().out) == by_child  # says so only if it did
    assert (tmp_path / "models").joinpath(folder).exists() and not models.needs_conversion(ALIAS)
    assert models.prefetch([ALIAS]) is None  # nothing left to convert: no child at all


def test_one_conversion_parses_the_gguf_once(tmp_path, monkeypatch):
    # transformers reads a GGUF for the config, the weights and the tokenizer: three parses of a
    # 262k-token vocabulary for gemma-3 without this.
    monkeypatch.setenv("JUDGEBIAS_MODEL_CACHE", str(tmp_path / "models"))
    import gguf

    opened = []
    original = gguf.GGUFReader

    class Counting(original):
        def __init__(self, *args, **kwargs):
            opened.append(args[0])
            super().__init__(*args, **kwargs)

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    reads = []
    original_load = gguf_utils.load_gguf_checkpoint
    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint",
                        lambda path, return_tensors=False, **kw: reads.append(return_tensors)
                        or original_load(path, return_tensors, **kw))
    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    _, folder = models.local_folder(ALIAS)
    assert len(opened) == 1
    # The config and the tokenizer both ask for the metadata; it is read once, the weights once.
    assert sorted(reads) == [False, True], reads
    loaded = models.load_model(folder)
    assert loaded.n_params > 100_000_000 and loaded.tokenizer("hello").input_ids


def test_the_plain_view_reader_reads_what_gguf_reads():
    import gguf
    import numpy as np

    path = models.resolve(ALIAS).source
    reference, fast = gguf.GGUFReader(path), conversion.plain_view_reader(gguf.GGUFReader)(path)
    assert list(fast.fields) == list(reference.fields) and len(reference.fields) > 20
    for name, want in reference.fields.items():
        got = fast.fields[name]
        assert (got.offset, got.data, got.types) == (want.offset, want.data, want.types), name
        assert [(p.dtype, p.shape, p.tobytes()) for p in got.parts] == \
               [(p.dtype, p.shape, p.tobytes()) for p in want.parts], name
    assert len(fast.tensors) == len(reference.tensors) == 272
    for got, want in zip(fast.tensors, reference.tensors, strict=True):
        assert (got.name, got.tensor_type, got.shape.tolist(), got.data_offset) == \
               (want.name, want.tensor_type, want.shape.tolist(), want.data_offset)
        assert got.data.dtype == want.data.dtype and np.array_equal(got.data, want.data), got.name


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "tiny-a"
    tok = models.load_tokenizer(ALIAS)
    random_model("tiny-llama", tokenizer=tok, seed=1, device="cpu").model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def test_plain_weights_stay_resident_and_the_oldest_goes_first(tiny_folder, monkeypatch):
    builder.release_resident_models()
    spec = builder.ModelSpec(name="a", model=tiny_folder)
    first = builder.resident_model(spec)
    assert builder.resident_model(builder.ModelSpec(name="other-name", model=tiny_folder)) is first
    in_bf16 = builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder, dtype="bfloat16"))
    assert in_bf16 is not first  # another dtype is other weights
    # Two stay (the default): a third load releases the least recently used, here the fp32 copy.
    builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder, dtype="float16"))
    assert builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder, dtype="bfloat16")) is in_bf16
    assert builder.resident_model(spec) is not first
    monkeypatch.setenv(builder.ENV_RESIDENT_MODELS, "0")
    assert builder.resident_model(spec) is not builder.resident_model(spec)  # 0: reload every time
    monkeypatch.setenv(builder.ENV_RESIDENT_MODELS, "two")
    with pytest.raises(ValueError, match="JUDGEBIAS_RESIDENT_MODELS"):
        builder.resident_model(spec)
    builder.release_resident_models()


def test_a_command_freezes_what_it_holds_once_at_its_first_model_and_never_a_model(tiny_folder):
    import gc

    def frozen(obj) -> bool:  # tracked, but no longer among what the collector walks
        return id(obj) not in {id(o) for o in gc.get_objects()}

    from judgebias.engine import workers

    builder.release_resident_models()
    try:
        before = [0]  # held from here on: frozen only by a freeze that comes after it
        builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder))
        assert not frozen(before)  # not asked (a library caller): nothing frozen
        builder.freeze_before_first_model()
        builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder, dtype="bfloat16"))
        assert not frozen(before)  # a model was resident: it would have been frozen too
        builder.release_resident_models()
        workers.worker_backend(builder.ModelSpec(name="a", model=tiny_folder))
        builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder))
        assert not frozen(before)  # nor while a distributed worker's cache holds one
        workers.release_worker_backends()
        builder.release_resident_models()
        loaded = builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder))
        assert frozen(before)  # the first load with nothing resident froze what the process held
        # ... but not the model it loaded: released, its cycles are still collected.
        assert not frozen(loaded) and not frozen(loaded.model)
        after = [0]
        builder.release_resident_models()
        builder.resident_model(builder.ModelSpec(name="a", model=tiny_folder))
        assert not frozen(after)  # once per command
    finally:
        # The worker stays frozen, as after the shared experiment (conftest's experiment_run).
        builder.release_resident_models()
        workers.release_worker_backends()
        builder._freeze["asked"] = False
