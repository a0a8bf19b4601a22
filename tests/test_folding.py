"""One folding rule for a judge's two presentation orders, applied by the pipeline, the importers
and the table validator (judgebias.tables.folding)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.importers import import_dataset
from judgebias.tables.files import write_table
from judgebias.tables.folding import fold_arrays, refold
from judgebias.tables.pairwise import TableError, validate
from judgebias.tables.records import Judgment, Pair, combine_orders

NAN = np.nan


def _obj(*values):
    return np.array(values, dtype=object)


def test_the_three_rules_on_hand_made_rows():
    # row 0: verdict-only, orders agree on a     -> a under every rule that can fold it
    # row 1: verdict-only, a then b (flip)       -> tie (agree-else-tie); mean-probability cannot fold
    # row 2: P(A) 0.9 and 0.4 (mean 0.65)        -> per-order verdicts a, b: agree-else-tie says tie,
    #                                               mean-probability says a (0.65 > 0.5)
    # row 3: P(A) 0.3 and 0.7 (mean exactly 0.5) -> tie under both
    # row 4: one order only                      -> nothing to fold
    v_ab, v_ba = _obj("a", "a", None, None, "a"), _obj("a", "b", None, None, None)
    p_ab, p_ba = np.array([NAN, NAN, 0.9, 0.3, NAN]), np.array([NAN, NAN, 0.4, 0.7, NAN])
    verdict, applied = fold_arrays(v_ab, v_ba, p_ab, p_ba, "auto")
    assert verdict.tolist() == ["a", "tie", "a", "tie", None]
    assert applied.tolist() == ["agree-else-tie"] * 2 + ["mean-probability"] * 2 + [None]
    verdict, applied = fold_arrays(v_ab, v_ba, p_ab, p_ba, "agree-else-tie")
    assert verdict.tolist() == ["a", "tie", "tie", "tie", None]
    assert set(applied[:4]) == {"agree-else-tie"}
    verdict, applied = fold_arrays(v_ab, v_ba, p_ab, p_ba, "mean-probability")
    assert verdict.tolist() == [None, None, "a", "tie", None]
    # One rule per row.
    verdict, _ = fold_arrays(v_ab, v_ba, p_ab, p_ba, _obj("auto", "auto", "agree-else-tie", "auto", "auto"))
    assert verdict.tolist() == ["a", "tie", "tie", "tie", None]
    with pytest.raises(ValueError, match="unknown fold rule 'majority'"):
        fold_arrays(v_ab, v_ba, p_ab, p_ba, "majority")


def _row(**over):
    base = {"pair_id": "p1", "prompt": "q", "response_a": "x", "response_b": "y", "judge": "j"}
    return {**base, **over}


def test_validate_fills_the_verdict_and_rejects_one_that_contradicts_its_orders():
    df, _ = validate(pd.DataFrame([
        _row(verdict_ab="A", verdict_ba="b"),  # labels case-normalised first, then folded: tie
        _row(pair_id="p2", p_a_ab=0.9, p_a_ba=0.4),
        _row(pair_id="p3", verdict="b"),  # no orders: kept as given, no rule
    ]))
    assert df["verdict"].tolist() == ["tie", "a", "b"]
    assert df["fold_rule"].tolist() == ["agree-else-tie", "mean-probability", None]

    with pytest.raises(TableError) as err:
        validate(pd.DataFrame([_row(), _row(pair_id="p2", verdict_ab="a", verdict_ba="b", verdict="a")]),
                 source="t.jsonl")
    msg = str(err.value)
    assert "row 2, field 'verdict': 'a' contradicts its orders (verdict_ab='a', verdict_ba='b')" in msg
    assert "fold to 'tie' under 'agree-else-tie'" in msg

    # The row's own fold_rule decides; a table-wide rule fills rows that name none.
    df, _ = validate(pd.DataFrame([_row(p_a_ab=0.9, p_a_ba=0.4, fold_rule="agree-else-tie"),
                                   _row(pair_id="p2", p_a_ab=0.9, p_a_ba=0.4)]), fold_rule="agree-else-tie")
    assert df["verdict"].tolist() == ["tie", "tie"]
    with pytest.raises(TableError, match="row 1, field 'fold_rule': 'vote' is not a fold rule"):
        validate(pd.DataFrame([_row(fold_rule="vote")]))


def test_refold_changes_the_hard_choice_and_names_rows_it_cannot_fold():
    df, _ = validate(pd.DataFrame([
        _row(p_a_ab=0.9, p_a_ba=0.4, p_a=0.65, human=["a"]),
        _row(pair_id="p2", verdict_ab="b", verdict_ba="b", human=["b"]),
    ]))
    strict = refold(df, "agree-else-tie")
    assert strict["verdict"].tolist() == ["tie", "b"] and strict["p_a"].iat[0] == 0.65
    from judgebias.reporting.analysis import analyze

    # Agreement with the human majority: 2/2 under auto (0.65 -> a), 1/2 under agree-else-tie.
    assert analyze(df)["judges"]["j"]["agreement_human"]["value"] == 1.0
    assert analyze(strict)["judges"]["j"]["agreement_human"]["value"] == 0.5
    with pytest.raises(ValueError, match=r"needs p_a_ab and p_a_ba; 1 row\(s\) .* \(rows 2\)"):
        refold(df, "mean-probability")


def test_the_pipeline_folds_by_the_same_rule():
    pair = Pair(pair_id="p", prompt="q", response_a="x", response_b="y")
    ab = Judgment(pair_id="p", order="ab", judge="j", template_version="t", p_first=0.9, p_second=0.1)
    ba = Judgment(pair_id="p", order="ba", judge="j", template_version="t", p_first=0.6, p_second=0.4)
    # P(A) = 0.9 first, 0.4 second (A shown second gets p_second): mean 0.65.
    assert combine_orders(pair, [ab, ba])["verdict"] == "a"
    row = combine_orders(pair, [ab, ba], rule="agree-else-tie")
    assert row["verdict"] == "tie" and row["fold_rule"] == "agree-else-tie"
    assert row["p_a"] == pytest.approx(0.65)
    assert validate(pd.DataFrame([row]))[0]["verdict"].tolist() == ["tie"]  # the row's rule is kept


def test_importers_fold_with_the_table_rule(tmp_path):
    subset = tmp_path / "Natural"
    (subset / "evaluators/GPT-4/Vanilla").mkdir(parents=True)
    data = [{"input": "q1", "output_1": "x", "output_2": "y", "label": 1},
            {"input": "q2", "output_1": "u", "output_2": "v", "label": 2}]
    (subset / "dataset.json").write_text(json.dumps(data))
    results = [{**d, "results": [{"swap = False": {"winner": "1"}, "swap = True": {"winner": w}}]}
               for d, w in zip(data, ("1", "2"), strict=True)]
    (subset / "evaluators/GPT-4/Vanilla/result.json").write_text(json.dumps(results))
    table, _ = import_dataset("llmbar", subset)
    assert table["verdict"].tolist() == ["a", "tie"]
    assert table["fold_rule"].tolist() == ["agree-else-tie"] * 2
    with pytest.raises(TableError, match="needs p_a_ab and p_a_ba"):
        import_dataset("llmbar", subset, fold_rule="mean-probability")


def test_analyze_cli_refolds(tmp_path):
    from judgebias.cli import app

    df, _ = validate(pd.DataFrame([
        _row(p_a_ab=0.9, p_a_ba=0.4, p_a=0.65, human=["a"]),
        _row(pair_id="p2", p_a_ab=0.2, p_a_ba=0.3, p_a=0.25, human=["b"]),
    ]))
    table = write_table(df, tmp_path / "t.jsonl")
    out = tmp_path / "m.json"
    res = CliRunner().invoke(app, ["analyze", str(table), "-o", str(out), "--fold", "agree-else-tie",
                                   "--no-mlflow"])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert result["dataset"]["fold_rules"] == {"agree-else-tie": 2}
    assert result["judges"]["j"]["agreement_human"]["value"] == 0.5
    bad = CliRunner().invoke(app, ["analyze", str(table), "-o", str(out), "--fold", "vote", "--no-mlflow"])
    assert bad.exit_code == 2 and "unknown fold rule 'vote'" in bad.output
