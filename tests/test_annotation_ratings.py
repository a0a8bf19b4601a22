"""Rating tasks without a server: the config, the parsing of annotations, the draw and the merge."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.annotation.rating_loop import RatingSettings, merge_ratings, next_rating_batch, rating_units
from judgebias.annotation.ratings import parse_rating, rating_config
from judgebias.annotation.store import Ledger, PushedTask


def table(scale=(1, 5)) -> pd.DataFrame:
    rows = []
    for k in range(1, 7):
        for judge, score in (("j", 1 + k % 5), ("m", 1 + (k + 1) % 5)):
            rows.append(dict(item_id=f"i{k}", prompt=f"q{k}", response=f"answer {k}",
                             generator="j" if k <= 2 else "x", judge=judge, score=float(score),
                             scale_min=scale[0], scale_max=scale[1], criterion="helpfulness",
                             human_scores=[]))
    return pd.DataFrame(rows)


def test_rating_config_has_one_choice_per_score():
    xml = rating_config(0, 5)
    assert [f'<Choice value="{k}" hotkey="{k}"/>' in xml for k in range(6)] == [True] * 6
    ten = rating_config(1, 10)
    assert '<Choice value="10"/>' in ten and "hotkey" not in ten.split("<Choices")[1].split("</Choices>")[0]
    with pytest.raises(ValueError, match="scale_min < scale_max"):
        rating_config(5, 1)


def test_parse_rating_reads_choices_skips_and_refuses_off_scale():
    task = PushedTask("ik-1", "i1", 1, 7, False, "http://ls")
    ann = {"id": 3, "completed_by": 2, "updated_at": "2026-01-01T00:00:00Z",
           "result": [{"from_name": "rating", "value": {"choices": ["4"]}},
                      {"from_name": "reason", "value": {"text": ["clear"]}}]}
    r = parse_rating(ann, task, (1, 5))
    assert (r.rating, r.skipped, r.reason, r.unit_id, r.annotator) == (4.0, False, "clear", "i1", "ls-user-2")
    skipped = parse_rating({**ann, "result": [], "was_cancelled": True}, task, (1, 5))
    assert skipped.skipped and skipped.rating is None
    with pytest.raises(ValueError, match=r"not one the config offers \(1\.\.5\)"):
        parse_rating({**ann, "result": [{"from_name": "rating", "value": {"choices": ["9"]}}]}, task, (1, 5))


def test_units_need_every_measured_judge_and_one_scale():
    units = rating_units(table(), ["j", "m"])
    assert list(units.index) == [f"i{k}" for k in range(1, 7)]
    # i1: own (j wrote it) and the judges 2 and 3 apart by 1 on a 4-wide scale: 1 + 1 + 2 * 0.5 / 4.
    assert units.loc["i1", "score"] == pytest.approx(2.25)
    assert units.loc["i1", "judge_scores"] == {"j": 2.0, "m": 3.0}
    mixed = pd.concat([table(), table((1, 10)).assign(item_id=lambda d: d["item_id"] + "b")])
    with pytest.raises(ValueError, match="mixes rating scales"):
        rating_units(mixed, ["j"])


def test_batch_is_recorded_before_push_and_resumed(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    batch = next_rating_batch(table(), ledger, 4, RatingSettings(design="uniform", seed=1))
    assert len(batch.rows) == 4 and not batch.resumed
    assert set(batch.rows.columns) >= {"unit_id", "item_key", "pi", "judge_scores", "rubric"}
    assert batch.rows["pi"].tolist() == pytest.approx([4 / 6] * 4)
    again = next_rating_batch(table(), ledger, 4, RatingSettings(design="uniform", seed=1))
    assert again.resumed and sorted(again.rows["unit_id"]) == sorted(batch.rows["unit_id"])


def test_merge_replaces_human_scores_of_rated_units():
    ratings = pd.DataFrame({"unit_id": ["i2", "i2", "i5"], "rating": [3.0, 5.0, 1.0]})
    merged = merge_ratings(table(), ratings)
    by = merged.drop_duplicates("item_id").set_index("item_id")["human_scores"]
    assert by["i2"] == [3.0, 5.0] and by["i5"] == [1.0] and by["i1"] == []


def test_push_dry_run_on_a_pointwise_table_draws_items(tmp_path):
    from judgebias.cli import app
    from judgebias.tables.files import write_table

    path = write_table(table(), tmp_path / "scores.jsonl")
    res = CliRunner().invoke(app, ["annotate", "push", str(path), "--budget", "3", "--design", "uniform",
                                   "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "uniform design over 6 items scored by j, m" in res.output and "drew 3" in res.output
    assert not (tmp_path / "scores.labels.sqlite").exists()
    # The rating push prints its batch as the pairwise one does (one helper): the Poisson size line
    # and the count per stratum, which it lacked before, under an unchanged first line.
    res = CliRunner().invoke(app, ["annotate", "push", str(path), "--budget", "4", "--design", "stratified",
                                   "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("batch 1: stratified design over 6 items scored by j, m (6 not drawn before); "
                               "drew 4 (expected 4.0); inclusion probability ")
    # Neyman over own (i1, i2) and other (i3-i6), equal spreads: 4 * (2/6, 4/6) = (1.3, 2.7), raised
    # to 2 a stratum (a variance needs two): 2 own, 2 other.
    assert lines[1:] == [f"  {'other':<28} 2", f"  {'own':<28} 2"]
    res = CliRunner().invoke(app, ["annotate", "push", str(path), "--budget", "3", "--dry-run"])
    assert ("the poisson design draws each item on its own with its probability, so the batch size is "
            "random: expected 3.0 (--budget 3), drawn ") in res.output
    res = CliRunner().invoke(app, ["annotate", "pull", str(path), "--offline", "--no-mlflow"])
    assert res.exit_code == 1 and "nothing pushed yet" in res.output


def test_estimates_keep_the_pushed_rubric_in_the_item_keys(tmp_path):
    from judgebias.annotation.rating_loop import rating_estimates

    ledger = Ledger(tmp_path / "l.sqlite")
    next_rating_batch(table(), ledger, 4, RatingSettings(design="uniform", rubric="Is it correct?"))
    _, figures = rating_estimates(table(), ledger)
    # No rating yet, but no draw is stale either: the keys are rebuilt with the rubric pushed.
    assert figures["j"]["design"]["stale_draws_dropped"] == 0
    assert figures["j"]["design"]["note"] == "no drawn item rated yet (4 drawn)"


def test_status_of_a_rating_ledger(tmp_path):
    from judgebias.cli import app
    from judgebias.tables.files import write_table

    path = write_table(table(), tmp_path / "scores.jsonl")
    next_rating_batch(table(), Ledger(tmp_path / "scores.labels.sqlite"), 3, RatingSettings(design="uniform"))
    res = CliRunner().invoke(app, ["annotate", "status", str(path)])
    # Drawn but not pushed: no task yet.
    assert res.exit_code == 0 and "items pushed 0, rated 0, pending 0; ratings 0, skipped 0" in res.output



def test_design_errors_on_a_rating_table_speak_of_items(tmp_path):
    # 6 items, floor 0.5 alone draws 3 of them: more than a budget of 2 (the pairwise loop says pairs).
    with pytest.raises(ValueError, match=r"draws 3\.0 of 6 items, more than the budget 2"):
        next_rating_batch(table(), None, 2, RatingSettings(design="poisson", min_prob=0.5), record=False)


@pytest.mark.parametrize("choices, says", [(["11"], "'11' is not one the config offers (1..10)"),
                                           (["abc"], "'abc' is not one the config offers"),
                                           (["2.5"], "'2.5' is not one the config offers"),
                                           (["3", "4"], "several ratings ['3', '4']")])
def test_a_rating_the_config_does_not_offer_is_refused_by_name(choices, says):
    # "11" and "abc" were counted without saying which; ["3", "4"] was read as 3 without a word.
    task = PushedTask("k1", "u1", 1, 7, False, "http://ls")
    ann = {"id": 5, "completed_by": 1, "updated_at": "2026-01-01T00:00:00Z",
           "result": [{"from_name": "rating", "value": {"choices": choices}}]}
    with pytest.raises(ValueError) as err:
        parse_rating(ann, task, (1, 10))
    assert says in str(err.value)


def test_pull_lines_name_what_was_not_counted():
    from judgebias.annotation.summary import not_counted_lines

    lines = not_counted_lines({"unreadable_annotation": 2}, {"unreadable_annotation": [
        "annotation 5: rating '11' is not one the config offers (1..10)",
        "annotation 6: several ratings ['3', '4'] for one item (the config offers one)"]})
    assert lines == ["not counted: 2 annotation(s) (unreadable annotation): annotation 5: rating '11' is not "
                     "one the config offers (1..10); annotation 6: several ratings ['3', '4'] for one item "
                     "(the config offers one)"]
    assert not_counted_lines({}, {}) == []
