"""Domain pieces of the two DBG ablations, on hand-computed inputs (no model load)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from judgebias.ablations.finetune import IGNORE_INDEX, encode_example, load_sft_data
from judgebias.ablations.style import clean_rewrite, cosine_rows, pca_2d, rewrite_prompt
from judgebias.config.experiment import BUNDLED_SFT_DATA, bundled_file
from judgebias.stages import attention_own_minus_other, read_instructions


def test_rewrite_prompt_asks_for_style_only_and_keeps_the_texts():
    chat = rewrite_prompt("What is 2+2?", "4.", "humorous", chat=True)
    text = chat.messages[0].content
    assert chat.messages[0].role == "user" and "humorous style" in text
    assert "# Query\nWhat is 2+2?" in text and "# Response\n4." in text and "add no new information" in text
    raw = rewrite_prompt("q", "r", "attractive", chat=False)
    assert raw.text.endswith("# Rewritten response\n")
    with pytest.raises(ValueError, match="unknown style 'sarcastic'"):
        rewrite_prompt("q", "r", "sarcastic", chat=True)


def test_clean_rewrite_strips_echoes_and_quotes():
    assert clean_rewrite('  # Rewritten response\n"Hello there!" ') == "Hello there!"
    assert clean_rewrite("Here is the rewritten response: Hi") == "Hi"
    assert clean_rewrite("plain") == "plain"


def test_cosine_and_pca_by_hand():
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0]])
    # row 0: orthogonal -> 0; row 1: same direction -> 1
    assert cosine_rows(a, b) == pytest.approx([0.0, 1.0])
    # Points on a line y = 2x: all variance on PC1, PC2 is 0; PC1 spacing keeps the distances
    # (x = -1, 0, 1 -> distance sqrt(1 + 4) = sqrt(5) between neighbours).
    pts = np.array([[-1.0, -2.0], [0.0, 0.0], [1.0, 2.0]])
    proj = pca_2d(pts)
    assert np.abs(proj[:, 1]).max() < 1e-12
    assert abs(proj[1, 0] - proj[0, 0]) == pytest.approx(np.sqrt(5))
    with pytest.raises(ValueError):
        pca_2d(np.zeros((1, 3)))


class _Tok:
    """Whitespace tokenizer: one id per word (its length), EOS id 0."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [len(w) for w in text.split()]}


def test_encode_example_masks_the_prompt_and_fits_max_length():
    ids, labels = encode_example(_Tok(), [7, 7, 7], "aa bbb", max_length=16)
    assert ids == [7, 7, 7, 2, 3, 0]
    assert labels == [IGNORE_INDEX] * 3 + [2, 3, 0]
    # Too long: the prompt keeps its END (max_length // 2 = 3 tokens), the response is cut.
    ids, labels = encode_example(_Tok(), [1, 2, 3, 4, 5], "a bb ccc dddd", max_length=6)
    assert ids == [3, 4, 5, 1, 2, 3] and labels == [IGNORE_INDEX] * 3 + [1, 2, 3]


def test_sft_data_is_bundled_and_errors_name_the_line(tmp_path):
    rows = load_sft_data(bundled_file(BUNDLED_SFT_DATA["llmbar-natural"]))
    assert len(rows) == 78 and all(r.instruction and r.response for r in rows)
    assert load_sft_data(bundled_file(BUNDLED_SFT_DATA["llmbar-natural"]), n=5, seed=1) == load_sft_data(
        bundled_file(BUNDLED_SFT_DATA["llmbar-natural"]), n=5, seed=1
    )
    bad = tmp_path / "sft.jsonl"
    bad.write_text(
        json.dumps({"instruction": "x", "response": "y"}) + "\n" + json.dumps({"instruction": "x"}) + "\n"
    )
    with pytest.raises(ValueError, match=r"sft\.jsonl:2: field 'response' must be a non-empty string"):
        load_sft_data(bad)


def test_bundled_instructions_and_bad_files(tmp_path):
    df = read_instructions(bundled_file("mt_bench_40.jsonl"))
    assert len(df) == 40 and df["category"].value_counts().eq(5).all()
    bad = tmp_path / "i.jsonl"
    bad.write_text('{"id": "1", "instruction": "ok"}\n{"id": "2", "instruction": ""}\n')
    with pytest.raises(ValueError, match=r"i\.jsonl:2: field 'instruction' must be a non-empty string"):
        read_instructions(bad)


def test_attention_own_minus_other_by_hand():
    df = pd.DataFrame(
        {
            "pair_id": ["p", "p", "q", "q", "r", "r"],
            "layer": [0, 1, 0, 1, 0, 1],
            "generator_a": ["x", "x", "y", "y", "y", "y"],
            "generator_b": ["y", "y", "x", "x", "z", "z"],
            "attn_a": [0.3, 0.4, 0.1, 0.2, 0.9, 0.9],
            "attn_b": [0.1, 0.1, 0.2, 0.5, 0.1, 0.1],
        }
    )
    out = attention_own_minus_other(df, "x")
    # x own: p (A): 0.3-0.1=0.2, 0.4-0.1=0.3; q (B): 0.2-0.1=0.1, 0.5-0.2=0.3; r has no x: left out.
    assert out["mean"] == pytest.approx((0.2 + 0.3 + 0.1 + 0.3) / 4)
    assert out["layer_0"] == pytest.approx(0.15) and out["layer_1"] == pytest.approx(0.3)
    assert out["pairs"] == 2


def test_build_pairs_excludes_failed_responses_and_counts_them(tmp_path):
    from judgebias.config.experiment import parse_config
    from judgebias.runs.store import RunStore
    from judgebias.stages import build_pairs

    cfg = parse_config(
        {
            "generators": [{"name": "ga", "model": "m"}, {"name": "gb", "model": "m"}],
            "judges": [{"name": "ga", "model": "m"}],
        }
    )
    store = RunStore(tmp_path)
    ga = pd.DataFrame(
        {
            "instruction_id": ["1", "2", "3"],
            "instruction": ["q1", "q2", "q3"],
            "response": ["a1", "", "a3"],
            "error": [None, "empty rewrite", None],
        }
    )
    gb = pd.DataFrame(
        {
            "instruction_id": ["1", "2", "3"],
            "instruction": ["q1", "q2", "q3"],
            "response": ["b1", "b2", "b3"],
            "error": [None, None, np.nan],
        }
    )
    pairs = build_pairs(cfg, store, {"ga": ga, "gb": gb})
    assert pairs["instruction_id"].tolist() == ["1", "3"]
    assert pairs[["response_a", "response_b"]].values.tolist() == [["a1", "b1"], ["a3", "b3"]]
    assert (pairs["generator_a"] == "ga").all() and (pairs["generator_b"] == "gb").all()
    assert store.read_json("pairs_exclusions.json") == {"response_failed": 1}
    # Done once: a second call reads the stored output back.
    assert build_pairs(cfg, store, {}).equals(pairs)


def test_api_judge_stage_over_a_local_openai_compatible_endpoint(tmp_path):
    """The pipeline's judge stage with ``backend: openai``: a verdict-only endpoint (a recorded
    ``transformers serve`` answer, replayed by a local HTTP server) gives verdicts, never a p_a."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    from judgebias.config.experiment import parse_config
    from judgebias.runs.store import RunStore
    from judgebias.stages import judge_pairs

    body = (
        Path(__file__).parent / "data" / "openai_payloads" / "transformers_serve_chat_verdict_only.json"
    ).read_bytes()
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        cfg = parse_config(
            {
                "generators": [{"name": "ga", "model": "m"}, {"name": "gb", "model": "m"}],
                "judges": [
                    {
                        "name": "api",
                        "model": "served-model",
                        "backend": "openai",
                        "base_url": f"http://127.0.0.1:{server.server_address[1]}/v1",
                    }
                ],
                "cache_dir": str(tmp_path / "calls"),
            }
        )
        pairs = pd.DataFrame(
            {
                "pair_id": ["p1", "p2"],
                "prompt": ["q1", "q2"],
                "response_a": ["a1", "a2"],
                "response_b": ["b1", "b2"],
                "generator_a": ["ga", "ga"],
                "generator_b": ["gb", "gb"],
            }
        )
        rows = judge_pairs(cfg, RunStore(tmp_path / "run"), "api", pairs)
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen) == 4 and all(r["model"] == "served-model" for r in seen)  # 2 pairs x 2 orders
    # The server always answers "A": first shown wins in both orders, so the verdicts flip -> tie.
    assert rows["verdict_ab"].tolist() == ["a", "a"] and rows["verdict_ba"].tolist() == ["b", "b"]
    assert rows["verdict"].tolist() == ["tie", "tie"]
    assert rows["p_a"].isna().all()


def test_open_backend_collects_before_a_load_or_after_a_non_resident_model_only(monkeypatch):
    # A full gc.collect() costs ~0.5 s in a process holding torch, Prefect and MLflow; the stages
    # open a model 5-10 times a run. It must still run before a model is loaded (room for it), when
    # a non-resident model is let go and at the next open (a fine-tuned copy held in peft's reference
    # cycles, still referenced by its caller at the exit), and is skipped around resident weights.
    import gc

    from judgebias.backends import builder
    from judgebias.config.experiment import parse_config
    from judgebias.stages import _common

    cfg = parse_config({"generators": [{"name": "ga", "model": "m1"}, {"name": "gb", "model": "m2"}],
                        "judges": [{"name": "ga", "model": "m1"}]})
    ga, gb = cfg.generator("ga"), cfg.generator("gb")
    builder.release_resident_models()
    events: list[str] = []
    monkeypatch.delenv(builder.ENV_RESIDENT_MODELS, raising=False)
    monkeypatch.setattr(_common, "_non_resident_since_collection", False)
    monkeypatch.setattr(builder, "load_local", lambda spec: events.append(f"load {spec.model}") or object())
    monkeypatch.setattr(builder, "build_backend", lambda spec, loaded=None: events.append("build") or loaded)
    monkeypatch.setattr(builder, "cached", lambda inner, spec, cache: inner)
    monkeypatch.setattr(gc, "collect", lambda *a: events.append("collect") or 0)

    def opened(ref, loaded=None) -> list[str]:
        events.clear()
        with _common.open_backend(ref, name=ref.name, cache=None, loaded=loaded) as backend:
            assert backend is not None
        return list(events)

    try:
        assert opened(ga) == ["collect", "load m1", "build"]  # loaded: collected first
        assert builder.is_resident(ga.to_spec(name="ga")) and not builder.is_resident(gb.to_spec(name="gb"))
        assert opened(ga) == ["build"]  # resident: nothing to make room for, nothing let go
        assert opened(gb) == ["collect", "load m2", "build"]
        assert opened(ga) == ["build"]
        assert opened(ga, loaded=object()) == ["collect", "build", "collect"]  # a fine-tuned copy
        assert opened(ga) == ["collect", "build"]  # its caller let go of it since: it goes now
        assert opened(ga) == ["build"]
        monkeypatch.setenv(builder.ENV_RESIDENT_MODELS, "0")  # nothing kept: every open loads
        assert not builder.is_resident(ga.to_spec(name="ga"))
        assert opened(ga) == ["collect", "collect", "load m1", "build", "collect"]  # the held ones dropped
        assert opened(ga) == ["collect", "load m1", "build", "collect"]
    finally:
        monkeypatch.undo()
        builder.release_resident_models()
