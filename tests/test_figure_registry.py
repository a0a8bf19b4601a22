"""The figure registry: every figure is fully declared, and the analysis plan, the terminal table, the
report card and the MLflow names are all read from it (a figure added to it reaches all four)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import registry as R
from judgebias.reporting.analysis import analyze
from judgebias.reporting.console_table import format_report
from judgebias.reporting.report_card import render_markdown
from judgebias.reporting.trust import declare, statements
from judgebias.stats import Estimate
from judgebias.tables.pairwise import validate
from judgebias.tracking.log_analysis import flatten_metrics

# A figure with no source must be listed here on purpose: a plain descriptive share no paper defines.
NO_PAPER = {"tie_rate"}


def table(n_pairs: int = 150, seed: int = 1, ppl: bool = True) -> pd.DataFrame:
    """Three judges that also generate, three human labels per pair, both orders, probabilities and
    (optionally) perplexities, five pairs per prompt (the evaluator quality baseline matches pairs of
    one question): with a family for j1 every registered figure is computable."""
    rng = np.random.default_rng(seed)
    gens = np.array(["j1", "j2", "j3", "other"], dtype=object)
    ga = rng.integers(0, 4, n_pairs)
    gb = (ga + rng.integers(1, 4, n_pairs)) % 4
    wa, wb = rng.integers(3, 60, n_pairs), rng.integers(3, 60, n_pairs)
    q = rng.normal(size=n_pairs)
    rows = []
    for j, judge in enumerate(["j1", "j2", "j3"]):
        logit = q + 0.8 * ((ga == j).astype(float) - (gb == j)) + 0.02 * (wa - wb)
        p_ab, p_ba = 1 / (1 + np.exp(-(logit + 0.3))), 1 / (1 + np.exp(-(logit - 0.3)))
        for i in range(n_pairs):
            labels = ["a" if q[i] + rng.normal(0, 0.8) > 0.1 else "b" if q[i] < -0.1 else "tie"
                      for _ in range(3)]
            row = {"pair_id": f"p{i}", "prompt": f"q{i // 5}",
                   "response_a": "w " * int(wa[i]) + ("\n- x" if i % 3 else ""),
                   "response_b": "w " * int(wb[i]), "generator_a": gens[ga[i]], "generator_b": gens[gb[i]],
                   "judge": judge, "p_a_ab": p_ab[i], "p_a_ba": p_ba[i], "p_a": (p_ab[i] + p_ba[i]) / 2,
                   "human": labels,
                   # three more runs of a sampling judge (judge --repeats 3): the repeat figures
                   "repeat_verdicts": ["a" if rng.random() < p_ab[i] else "b" for _ in range(3)]}
            if ppl:
                row.update(ppl_a=float(np.exp(2 - 0.4 * (ga[i] == j) + rng.normal(0, .3))),
                           ppl_b=float(np.exp(2 - 0.4 * (gb[i] == j) + rng.normal(0, .3))))
            rows.append(row)
    return validate(pd.DataFrame(rows))[0]


@pytest.fixture(scope="module")
def result() -> dict:
    return analyze(table(), family_map={"j1": ["j2"]}, reps=200)


def test_every_figure_declares_everything():
    assert len(R.FIGURES) == 28
    required = [f.name for f in dataclasses.fields(R.Figure) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    assert set(required) == {"key", "needs", "compute", "label", "how", "meaning", "source", "direction",
                             "statement"}
    for key, fig in R.FIGURES.items():
        assert fig.key == key and key.isidentifier()
        assert callable(fig.compute)
        assert isinstance(fig.needs, tuple) and all(n in R.NEEDS for n in fig.needs), key
        assert fig.label.strip() and fig.meaning.strip(), key
        assert isinstance(fig.how, str)
        assert bool(fig.source.strip()) == (key not in NO_PAPER), key
        assert isinstance(fig.direction, R.Direction)
        assert fig.statement is None or fig.statement in R.STATEMENTS
        assert all(isinstance(p, str) and p for p in fig.mlflow_parts)
        assert fig.mlflow_name
    for need in R.TABLE_NEEDS:
        assert callable(need.check) and need.reason


def test_a_figure_missing_a_declaration_fails():
    fields = dict(key="x", needs=(), compute=lambda c: None, label="x", how="", meaning="m", source="s",
                  direction=R.Direction.ABOVE, statement=None)
    R.Figure(**fields)  # complete: accepted
    for name in ("meaning", "direction", "statement", "compute"):
        with pytest.raises(TypeError):
            R.Figure(**{k: v for k, v in fields.items() if k != name})
    for name, bad in (("meaning", " "), ("label", ""), ("direction", "+"), ("statement", "Loudness"),
                      ("needs", (R.Need("columns", "no columns"),)), ("key", "two words"), ("compute", None)):
        with pytest.raises(ValueError, match="figure registry"):
            R.Figure(**{**fields, name: bad})
    with pytest.raises(ValueError, match="declared twice"):
        R.index_figures([R.Figure(**fields), R.Figure(**fields)])


def test_every_figure_reaches_the_plan_table_card_and_mlflow(result):
    m = result["judges"]["j1"]
    assert [k for k in m if k in R.FIGURES] == list(R.FIGURES)  # all computed, in the registry's order
    assert set(m) - set(R.FIGURES) == {"skipped", "multiplicity"} and not m["skipped"]
    text, card = format_report(result), render_markdown(result, title="t")
    flat = flatten_metrics(result)
    for key, fig in R.FIGURES.items():
        assert f"  {fig.label:<38} " in text, key
        assert f"| {fig.label.strip(' .')} | " in card and f"| {fig.meaning} | {fig.source} |" in card, key
        assert f"j1.{fig.mlflow_name}" in flat, key
        for part in fig.mlflow_parts:
            assert f"j1.{key}.{part}" in flat, (key, part)
    assert "j1.regression.pseudo_r2" in flat and "j1.regression" not in flat
    # Some family given, but none for j2: its family figures are not computed, with the reason.
    family = [k for k, f in R.FIGURES.items() if f.family_only]
    skipped = result["judges"]["j2"]["skipped"]
    assert {k: skipped.get(k) for k in family} == dict.fromkeys(family, R.FAMILY.reason)


def test_a_figure_added_to_the_registry_reaches_all_four(monkeypatch):
    # One entry, nothing else edited: the plan computes it (or skips it with its need's reason),
    # the terminal and the card show it with its label, meaning and sign, MLflow names it.
    def compute(c: R.Inputs) -> Estimate:
        part = Estimate(0.75, 0.5, 1.0, len(c.rows))
        return Estimate(-0.25, -0.5, 0.0, len(c.rows), p_value=0.5, details={"part": part.to_dict()})

    added = R.Figure("test_gap", needs=(R.HUMAN,), compute=compute, label="test gap (a test)",
                     how="< 0 test", meaning="a figure only this test declares", source="This test, 2026",
                     direction=R.Direction.EITHER, statement=None, mlflow_value="test_gap.named",
                     mlflow_parts=("part",))
    absent = R.Figure("test_ppl", needs=(R.PERPLEXITIES,), compute=compute, label="test ppl", how="",
                      meaning="never computed here", source="This test", direction=R.Direction.UNSIGNED,
                      statement=None)
    monkeypatch.setattr(R, "FIGURES", R.index_figures([*R.FIGURES.values(), added, absent]))
    result = analyze(table(n_pairs=40, ppl=False), reps=100)
    m = result["judges"]["j2"]
    assert [k for k in m if k not in ("skipped", "multiplicity")][-1] == "test_gap"  # the registry's order
    assert m["test_gap"]["value"] == -0.25 and m["test_gap"]["n"] == 40
    assert m["skipped"]["test_ppl"] == R.PERPLEXITIES.reason
    # No family given at all: the family figures are not even listed as not computed.
    assert not {k for k, f in R.FIGURES.items() if f.family_only} & {*m, *m["skipped"]}
    text = format_report(result)
    assert f"  {'test gap (a test)':<38}  -0.250 [-0.500, +0.000]   n=40      p=0.5  < 0 test" in text
    assert "| test gap (a test) | -0.250 | [-0.500, +0.000] | 40 | a figure only this test declares | " \
           "This test, 2026 |" in render_markdown(result, title="t")
    flat = flatten_metrics(result)
    assert flat["j2.test_gap.named"] == -0.25 and flat["j2.test_gap.part"] == 0.75
    assert "j2.test_gap" not in flat and not any(k.startswith("j2.test_ppl") for k in flat)


def test_statements_rest_only_on_figures_that_declare_one(result):
    for judge, m in result["judges"].items():
        said, _ = statements(m)
        assert said, judge
        for key, fig in R.FIGURES.items():
            if fig.statement is None and key in m:
                assert statements({k: v for k, v in m.items() if k != key})[0] == said, (judge, key)
        # Every test of the judge's family reads a figure declared as feeding a statement.
        for test in declare(m):
            fig = R.FIGURES[test.figure.split(".")[0]]
            assert fig.statement is not None, test
        feeding = {k for k, f in R.FIGURES.items() if f.statement}
        assert statements({k: v for k, v in m.items() if k not in feeding})[0] == []
