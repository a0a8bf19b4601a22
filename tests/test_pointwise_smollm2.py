"""End to end on the packaged SmolLM2-135M-Instruct (loaded once for the module): `judgebias judge
--mode pointwise` on bundled MT-bench questions writes a valid pointwise table, `analyze` prints and
writes the pointwise figures, and a rerun is served from the cache."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import judgebias
from judgebias.backends.protocol import GenerationParams, Prompt
from judgebias.tables.files import read_raw
from judgebias.tables.pointwise import validate_pointwise

ALIAS = "smollm2-135m-instruct"
QUESTIONS = Path(judgebias.__file__).parent / "data" / "mt_bench_40.jsonl"


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    from judgebias.backends.local import LocalBackend

    return LocalBackend(ALIAS, device="cpu")


@pytest.fixture(scope="module")
def items(smollm2, tmp_path_factory) -> Path:
    """Three MT-bench questions (one writing, one math, one coding), each with SmolLM2's own answer
    and a short answer written for this test (generator "test-author")."""
    qs = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    chosen = [q for q in qs if q["id"] in ("mtbench-85", "mtbench-111", "mtbench-121")]
    own = smollm2.generate(
        [Prompt.chat(("user", q["instruction"])) for q in chosen], GenerationParams(max_new_tokens=32)
    )
    written = ["A short answer.", "The area is 3.", "def f(): pass"]
    rows = []
    for q, g, w in zip(chosen, own, written, strict=True):
        rows.append(dict(item_id=f"{q['id']}-own", prompt=q["instruction"], response=g.text, generator=ALIAS))
        rows.append(
            dict(item_id=f"{q['id']}-w", prompt=q["instruction"], response=w, generator="test-author")
        )
    path = tmp_path_factory.mktemp("pointwise") / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_judge_pointwise_then_analyze_on_smollm2(smollm2, items, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import judgebias.backends.builder as builder
    from judgebias.cli import app

    # The module's loaded model stands in for the CLI's own load of the same packaged model.
    monkeypatch.setattr(builder, "build_backend", lambda spec, **_: smollm2)
    out = tmp_path / "scores.jsonl"
    args = [
        "judge",
        str(items),
        "--judge",
        ALIAS,
        "--mode",
        "pointwise",
        "--out",
        str(out),
        "--max-new-tokens",
        "80",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    table, _ = validate_pointwise(read_raw(out), source=str(out))
    assert len(table) == 6 and set(table["template_version"]) == {"mtbench-single@single-v1:chat"}
    for row in table.itertuples():
        if row.judge_error:  # an explanation that never reached "[[": excluded with its reason
            assert math.isnan(row.score)
            continue
        assert 1.0 <= row.score <= 10.0 and row.score_source in ("probabilities", "parsed")
        if row.score_source == "probabilities":
            assert sum(row.score_dist) == pytest.approx(1.0) and len(row.score_dist) == 10
            assert row.score_argmax == 1 + max(range(10), key=lambda k: row.score_dist[k])
    again = CliRunner().invoke(app, args)
    assert "computed 0" in again.output, again.output

    metrics = tmp_path / "metrics.json"
    res = CliRunner().invoke(
        app, ["analyze", str(out), "--out", str(metrics), "--no-mlflow", "--reps", "200"]
    )
    assert res.exit_code == 0, res.output
    result = json.loads(metrics.read_text())
    judge = result["judges"][ALIAS]
    assert result["table_kind"] == "pointwise"
    # No human ratings here: the human figures are skipped with their reason, never 0.
    scored = int(table["score"].notna().sum())
    why = "human score" if scored else "no scored row"  # SmolLM2-135M rarely writes "[[" at all
    assert why in judge["skipped"]["score_bias_human"]
    assert "score_agreement_human" not in judge
    assert f"judge {ALIAS}" in res.output
    if scored >= 3:
        assert judge["score_distribution"]["n"] == scored


class CannedExplanation:
    """The real model reads the score distribution; only the explanation is fixed (cheap on a CPU)."""

    def __init__(self, model, text: str):
        self.model, self.text, self.name, self.is_chat = model, text, model.name, True

    def identity(self) -> dict:
        return {**self.model.identity(), "canned": self.text}

    def generate(self, prompts, params):
        from judgebias.backends.protocol import Generation

        return [Generation(text=self.text) for _ in prompts]

    def score_options(self, prompts, options):
        return self.model.score_options(prompts, options)

    def continuation_logprobs(self, contexts, continuations):
        return self.model.continuation_logprobs(contexts, continuations)


@pytest.mark.slow
def test_real_score_distribution_after_the_marker(smollm2):
    from judgebias.engine.pointwise import ScoreItem, judge_responses
    from judgebias.prompts.pointwise import MTBENCH_SINGLE, RUBRIC_5

    item = ScoreItem(item_id="x", prompt="What is 2 + 2?", response="2 + 2 = 4.", generator="test-author")
    # A bare "[[" with no rating: the score can only come from the model's distribution after it.
    (row,) = judge_responses(
        [item], CannedExplanation(smollm2, "Correct and clear. Rating: [["), MTBENCH_SINGLE
    ).rows
    assert row["judge_error"] is None and row["score_source"] == "probabilities"
    dist = row["score_dist"]
    assert len(dist) == 10 and sum(dist) == pytest.approx(1.0) and min(dist) >= 0
    assert dist[9] > 0  # "10" got its share from the second read at "[[1"
    assert row["score"] == pytest.approx(sum((k + 1) * p for k, p in enumerate(dist)))
    assert 0 < row["mass"] <= 1
    (rubric,) = judge_responses(
        [item], CannedExplanation(smollm2, "Feedback: correct. [RESULT]"), RUBRIC_5
    ).rows
    assert rubric["score_source"] == "probabilities" and len(rubric["score_dist"]) == 5
    assert 1.0 <= rubric["score"] <= 5.0


@pytest.mark.slow
def test_direct_scores_of_smollm2_then_analyze_figures(smollm2, items, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import judgebias.backends.builder as builder
    from judgebias.cli import app

    monkeypatch.setattr(builder, "build_backend", lambda spec, **_: smollm2)
    out = tmp_path / "direct.jsonl"
    args = [
        "judge",
        str(items),
        "--judge",
        ALIAS,
        "--mode",
        "pointwise",
        "--template",
        "mtbench-single-direct",
        "--out",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    table, _ = validate_pointwise(read_raw(out), source=str(out))
    # "Rating: [[" is forced, so every row has a distribution read from the model: no row is parsed.
    assert (table["score_source"] == "probabilities").all(), table["judge_error"].tolist()
    for row in table.itertuples():
        assert sum(row.score_dist) == pytest.approx(1.0) and 1.0 <= row.score <= 10.0
        assert row.score == pytest.approx(sum((k + 1) * p for k, p in enumerate(row.score_dist)))
    metrics = tmp_path / "metrics.json"
    res = CliRunner().invoke(
        app, ["analyze", str(out), "--out", str(metrics), "--no-mlflow", "--reps", "200"]
    )
    assert res.exit_code == 0, res.output
    judge = json.loads(metrics.read_text())["judges"][ALIAS]
    assert judge["score_distribution"]["n"] == 6 and judge["score_distribution"]["levels"] == 10
    dp = judge["score_self_preference"]["dp"]
    assert (dp["n_own"], dp["n_other"]) == (3, 3)
    own = table.loc[table["generator"] == ALIAS, "score"].mean()
    other = table.loc[table["generator"] != ALIAS, "score"].mean()
    assert dp["value"] == pytest.approx(own - other)
    assert "score_self_preference.dp" in res.output
