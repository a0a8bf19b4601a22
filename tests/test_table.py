"""The judgment table contract: validation, normalization, IO round trips, record folding."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from judgebias.tables.files import read_table, write_table
from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import (
    CANONICAL,
    TableError,
    human_label,
    judge_choice,
    majority,
    pairs,
    validate,
)
from judgebias.tables.records import Judgment, Pair, combine_orders


def _rows(**over):
    base = {"pair_id": "p1", "prompt": "q", "response_a": "x", "response_b": "y",
            "generator_a": "m1", "generator_b": "m2", "judge": "j", "p_a": 0.7}
    base.update(over)
    return base


def test_validate_normalizes_and_keeps_extras():
    df = pd.DataFrame([
        _rows(human=["A", "model_b", "a"], verdict="Model_A", extra_col=1),
        _rows(pair_id="p2", p_a=None, verdict="tie", human="b|b", extra_col=2),
    ])
    out, excl = validate(df, "t.jsonl")
    assert list(out.columns[: len(CANONICAL)]) == list(CANONICAL)
    assert out["extra_col"].tolist() == [1, 2]
    assert out["human"].tolist() == [["a", "b", "a"], ["b", "b"]]
    assert out["verdict"].tolist() == ["a", "tie"]
    assert math.isnan(out["p_a"].iat[1])
    assert excl.total == 0


def test_validate_names_file_row_and_field_of_every_problem():
    df = pd.DataFrame([
        _rows(),
        _rows(pair_id="p2", response_a=True, p_a=1.5),
        _rows(pair_id="p3", verdict="garbage", ppl_a=-1.0),
        _rows(),  # duplicate (p1, j)
    ])
    with pytest.raises(TableError) as err:
        validate(df, "bad.jsonl")
    msg = str(err.value)
    assert msg.startswith("bad.jsonl: 5 problem(s)")
    assert "row 2, field 'response_a': boolean True" in msg
    assert "row 2, field 'p_a': 1.5 is outside [0, 1]" in msg
    assert "row 3, field 'verdict': unknown label 'garbage'" in msg
    assert "row 3, field 'ppl_a': perplexity -1.0 must be > 0" in msg
    assert "row 4, field 'pair_id': duplicate" in msg


def test_one_pair_id_with_two_texts_is_an_error_naming_the_rows():
    # Two judges' rows of p1 must hold the same texts: gold and DBG join judges on pair_id.
    df = pd.DataFrame([_rows(), _rows(judge="k", response_b="a different answer"), _rows(judge="m")])
    with pytest.raises(TableError) as err:
        validate(df, "t.jsonl")
    assert str(err.value).startswith("t.jsonl: 1 problem(s)")
    expected = "row 2, field 'response_b': pair_id 'p1' has another response_b in an earlier row"
    assert expected in str(err.value)
    out, excl = validate(df, "t.jsonl", skip_invalid=True)
    assert out["judge"].tolist() == ["j", "m"] and excl.to_dict() == {"invalid_response_b": 1}


def test_skip_invalid_excludes_and_counts_by_reason():
    df = pd.DataFrame([_rows(), _rows(pair_id="p2", p_a="high"), _rows(pair_id="p3", prompt="")])
    out, excl = validate(df, "t.csv", skip_invalid=True)
    assert out["pair_id"].tolist() == ["p1"]
    assert excl.to_dict() == {"invalid_p_a": 1, "invalid_prompt": 1}


def test_missing_required_column_is_an_error():
    with pytest.raises(TableError, match="missing required column"):
        validate(pd.DataFrame([{"pair_id": "p", "prompt": "q"}]), "x.jsonl")


def test_label_helpers():
    assert normalize_label(" Model_B ") == "b"
    assert normalize_label(0) == "tie"
    assert normalize_label(float("nan")) is None
    with pytest.raises(ValueError):
        normalize_label(True)
    assert majority(["a", "a", "b"]) == "a"
    assert majority(["a", "b", "tie"]) is None  # 1 of 3 is no majority
    assert majority([]) is None


def test_judge_choice_is_the_verdict_else_the_probability():
    # The verdict is the folded hard choice (an agree-else-tie tie may sit on a mean P(A) of 0.7);
    # p_a decides only where no verdict exists.
    df, _ = validate(pd.DataFrame([
        _rows(p_a=0.7, verdict="tie"), _rows(pair_id="p2", p_a=0.5),
        _rows(pair_id="p3", p_a=0.2), _rows(pair_id="p4", p_a=None, verdict="a"),
        _rows(pair_id="p5", p_a=None),
    ]))
    assert judge_choice(df).tolist() == ["tie", "tie", "b", "a", None]


def test_pairs_merges_human_labels():
    df, _ = validate(pd.DataFrame([
        _rows(judge="j1", human=["a"]), _rows(judge="j2", human=["a", "b", "a"]),
    ]))
    p = pairs(df)
    assert len(p) == 1 and p["human"].iat[0] == ["a", "b", "a"]
    assert human_label(df).tolist() == ["a", "a"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_write_read_round_trip(tmp_path, suffix):
    df, _ = validate(pd.DataFrame([_rows(human=["a", "b"], ppl_a=3.0), _rows(pair_id="p2", p_a=None)]))
    path = write_table(df, tmp_path / f"t{suffix}")
    back, excl = read_table(path)
    assert excl.total == 0
    assert back["human"].map(list).tolist() == [["a", "b"], []]
    assert np.allclose(back["p_a"].to_numpy(), df["p_a"].to_numpy(), equal_nan=True)


def test_csv_input_accepted_and_csv_output_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("pair_id,prompt,response_a,response_b,judge,p_a,human\n"
                    "1,q,x,y,j,0.25,a|b|b\n")
    df, _ = read_table(path)
    assert df["pair_id"].tolist() == ["1"] and df["human"].iat[0] == ["a", "b", "b"]
    with pytest.raises(TableError, match="CSV is accepted on input only"):
        write_table(df, tmp_path / "out.csv")


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_rows()) + "\n{not json\n[1, 2]\n")
    with pytest.raises(TableError) as err:
        read_table(path)
    assert "row 2: not valid JSON" in str(err.value)
    assert "row 3: expected a JSON object" in str(err.value)


def test_combine_orders_averages_probabilities_and_undoes_the_swap():
    pair = Pair(pair_id="p", prompt="q", response_a="x", response_b="y", generator_a="g1")
    # A shown first gets 0.8; in the swapped order A is shown second and gets p_second = 0.6.
    ab = Judgment(pair_id="p", order="ab", judge="j", template_version="t1", p_first=0.8, p_second=0.2)
    ba = Judgment(pair_id="p", order="ba", judge="j", template_version="t1", p_first=0.4, p_second=0.6)
    row = combine_orders(pair, [ba, ab])
    assert row["p_a_ab"] == 0.8 and row["p_a_ba"] == 0.6
    assert row["p_a"] == pytest.approx(0.7) and row["verdict"] == "a"


def test_combine_orders_verdict_only_flip_is_a_tie_and_errors_are_kept():
    pair = Pair(pair_id="p", prompt="q", response_a="x", response_b="y")
    ab = Judgment(pair_id="p", order="ab", judge="api", template_version="t", verdict_shown="a")
    ba = Judgment(pair_id="p", order="ba", judge="api", template_version="t", verdict_shown="a")
    row = combine_orders(pair, [ab, ba])
    # "a" in the swapped order means the original B: the verdict flipped with the order.
    assert row["verdict_ab"] == "a" and row["verdict_ba"] == "b" and row["verdict"] == "tie"
    assert math.isnan(row["p_a"])
    bad = Judgment(pair_id="p", order="ba", judge="api", template_version="t", error="off-format: 'C'")
    row = combine_orders(pair, [ab, bad])
    assert row["judge_error"] == "ba: off-format: 'C'" and row["verdict"] is None
    with pytest.raises(ValueError, match="no judgment for order"):
        combine_orders(pair, [ab])


def test_judgment_rejects_probabilities_outside_unit_interval():
    with pytest.raises(ValueError):
        Judgment(pair_id="p", order="ab", judge="j", template_version="t", p_first=1.2)
    with pytest.raises(ValueError):  # frozen and extra="forbid"
        Judgment(pair_id="p", order="ab", judge="j", template_version="t", bogus=1)


def test_pair_ids_are_content_derived_and_stable():
    assert Pair.make_id("q", "x", "y") == Pair.make_id("q", "x", "y")
    assert Pair.make_id("q", "x", "y") != Pair.make_id("q", "y", "x")


@pytest.mark.parametrize(("rows", "message"), [
    # A number where a response's text belongs: named by row and field, not by the markdown counter.
    ([_rows(response_a=5)], "row 1, field 'response_a': '5' is a number, not text"),
    # p_a is the mean of its two orders: 0.9 against orders that average 0.15.
    ([_rows(p_a=0.9, p_a_ab=0.1, p_a_ba=0.2)], "row 1, field 'p_a': 0.9000 contradicts its two orders"),
    # One pair, two judges, two authors for response A.
    ([_rows(), _rows(judge="k", generator_a="m3")], "row 2, field 'generator_a': pair_id 'p1' has another"),
])
def test_contradictory_rows_are_refused_naming_row_and_field(rows, message):
    with pytest.raises(TableError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(pd.DataFrame(rows), "t.jsonl")
    # A consistent p_a (rounding aside) and the same authors for every judge pass.
    validate(pd.DataFrame([_rows(p_a=0.15002, p_a_ab=0.1, p_a_ba=0.2), _rows(judge="k")]), "t.jsonl")
