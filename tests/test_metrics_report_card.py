"""The report card's figures on small hand-computed tables: position consistency with every kind of
flip, 2-class agreement and tie rate, and the leave-one-label-out human ceiling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judgebias.metrics import frame as F
from judgebias.metrics.agreement import agreement_two_class, tie_rate
from judgebias.metrics.ceiling import human_ceiling
from judgebias.metrics.position import position_consistency
from judgebias.stats import InsufficientData, mean_t, proportion_interval
from judgebias.tables.pairwise import validate


def table(rows: list[dict]) -> pd.DataFrame:
    base = {"prompt": "q", "response_a": "x", "response_b": "y", "judge": "j"}
    df, _ = validate(pd.DataFrame([{**base, "pair_id": f"p{i}", **r} for i, r in enumerate(rows)]))
    return df


def test_position_consistency_counts_every_kind_of_flip():
    df = table([
        dict(p_a_ab=0.8, p_a_ba=0.7),  # a / a: consistent; shift .1
        dict(p_a_ab=0.8, p_a_ba=0.3),  # a / b: the first-shown won both times (primacy); shift .5
        dict(p_a_ab=0.6, p_a_ba=0.5),  # a / tie: inconsistent, not an A<->B flip; shift .1
        dict(verdict_ab="b", verdict_ba="a"),  # b / a: the second-shown won both times (recency)
        dict(p_a_ab=0.9),  # one order only: excluded
        dict(p_a_ab=0.2, p_a_ba=0.1),  # b / b: consistent; shift .1
    ])
    pc = position_consistency(df, "j")
    # 5 pairs in both orders, 2 consistent
    assert (pc.value, pc.n, pc.exclusions) == (pytest.approx(2 / 5), 5, {"missing_order": 1})
    assert (pc.ci_low, pc.ci_high) == pytest.approx(proportion_interval(2, 5)[1:])
    d = pc.details
    assert d["outcomes"] == {"a_a": 1, "b_b": 1, "tie_tie": 0, "primacy_flip": 1, "recency_flip": 1,
                             "a_tie": 1, "tie_a": 0, "b_tie": 0, "tie_b": 0}
    assert (d["flips_ab"], d["flips_choice_tie"]) == (2, 1)
    # balance per pair: 0, -1 (primacy), 0, +1 (recency), 0 -> mean 0
    assert d["preference_fairness"]["value"] == pytest.approx(0.0) and d["preference_fairness"]["n"] == 5
    # shifts .1, .5, .1, .1 on the 4 pairs with probabilities -> .2
    shift = d["mean_p_a_shift"]
    assert shift["value"] == pytest.approx(0.2) and shift["n"] == 4
    assert shift["ci_low"] == pytest.approx(mean_t([0.1, 0.5, 0.1, 0.1])["ci_low"])


def test_position_consistency_of_a_primacy_judge_and_without_orders():
    df = table([dict(verdict_ab="a", verdict_ba="b")] * 3)  # the first-shown always wins
    pc = position_consistency(df, "j")
    assert pc.value == 0 and pc.details["preference_fairness"]["value"] == -1
    assert "mean_p_a_shift" not in pc.details  # verdicts only: no probabilities to shift
    with pytest.raises(InsufficientData):
        position_consistency(table([dict(verdict="a")]), "j")


def test_two_class_agreement_and_tie_rate():
    df = table([
        dict(verdict="a", human=["a"]),  # agrees
        dict(verdict="tie", human=["b"]),  # a judge tie on a 2-class pair: a miss
        dict(verdict="b", human=["tie"]),  # human tie: not a 2-class pair
        dict(verdict="b", human=["a", "b"]),  # no human majority
        dict(verdict="b", human=["b", "b", "a"]),  # agrees
    ])
    two = agreement_two_class(df, "j")
    assert (two.value, two.n) == (pytest.approx(2 / 3), 3)
    assert two.exclusions == {"human_tie": 1, "human_no_majority": 1}
    assert two.details["judge_ties"] == 1
    ties = tie_rate(df, "j")  # 1 tie among 5 choices
    assert (ties.value, ties.n) == (pytest.approx(1 / 5), 5)


def test_human_counts_are_recovered_from_the_prepared_columns():
    df = table([dict(verdict="a", human=h) for h in (["a", "a", "b"], ["tie", "b"], [], ["tie"] * 3)])
    assert F.human_counts(F.prepare(df)).tolist() == [[2, 1, 0], [0, 1, 1], [0, 0, 0], [0, 0, 3]]


def test_human_ceiling_leaves_one_label_out_and_scores_the_judge_on_the_same_references():
    df = table([
        # held out a -> others {a, b}: no majority (x2); held out b -> others {a, a}: a, b misses.
        # human 0/1; the judge's a matches the one reference: 1/1
        dict(verdict="a", human=["a", "a", "b"]),
        dict(verdict="b", human=["a", "a", "a"]),  # every reference a: human 3/3, judge 0/3
        dict(verdict="b", human=["b", "b", "tie"]),  # only the held-out tie has one (b): human 0, judge 1
        dict(verdict="tie", human=["a", "b"]),  # references b and a: human 0/2, judge 0/2
        dict(verdict="a", human=["a"]),  # one label: nothing to compare it with
        dict(verdict="a", human=["a", "b", "tie"]),  # no held-out label has a majority left
        # held out a (x3) -> {a, a, b}: a; held out b -> {a, a, a}: a. human 3/4, judge 4/4
        dict(verdict="a", human=["a", "a", "a", "b"]),
    ])
    c = human_ceiling(df, "j")
    assert c.exclusions == {"fewer_than_two_labels": 1, "no_leave_one_out_majority": 1}
    human, judge = [0, 1, 0, 0, 0.75], [1, 0, 1, 0, 1]
    assert (c.value, c.n) == (pytest.approx(sum(human) / 5), 5)  # .35
    assert c.details["judge"]["value"] == pytest.approx(sum(judge) / 5)  # .6
    gap = mean_t([j - h for j, h in zip(judge, human, strict=True)])
    assert c.details["gap"]["value"] == pytest.approx(0.25)
    assert c.details["gap"]["ci_low"] == pytest.approx(gap["ci_low"])
    assert c.details["labels_compared"] == 1 + 3 + 1 + 2 + 4
    with pytest.raises(InsufficientData):
        human_ceiling(table([dict(verdict="a", human=["a"])]), "j")


def test_distinct_rows_by_mixed_radix_and_by_sorting():
    # Columns (1, 0, 1, 0) and (0, 2, 0, 0): radix (2, 3), keys 1*3+0=3, 0*3+2=2, 3, 0 -> distinct
    # keys 0, 2, 3 in that order.
    code, distinct = F.distinct_rows([np.array([1, 0, 1, 0]), np.array([0, 2, 0, 0])])
    assert distinct.tolist() == [[0, 0], [0, 2], [1, 0]] and code.tolist() == [2, 1, 2, 0]
    # Past a few million possible keys: np.unique's order (the same: sorted rows).
    code, distinct = F.distinct_rows([np.array([0, 0, 0]), np.array([5_000_000, 1, 5_000_000])])
    assert distinct.tolist() == [[0, 1], [0, 5_000_000]] and code.tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="non-negative"):
        F.distinct_rows([np.array([0]), np.array([-1])])


def _styled_table(n: int = 400, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Pairs whose responses differ in length and markdown; a judge that likes bold and lists."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, raw = [], {k: [] for k in ("headers", "lists", "bold", "words", "human")}
    for i in range(n):
        sides = []
        for _ in range(2):
            h, li, b, w = (int(x) for x in (rng.integers(0, 3), rng.integers(0, 5), rng.integers(0, 4),
                                             rng.integers(3, 60)))
            text = "".join(f"# Part {k}\n" for k in range(h)) + " ".join(["word"] * w) + "\n" + \
                "".join(f"- item {k}\n" for k in range(li)) + " ".join(f"**b{k}**" for k in range(b))
            sides.append((h, li, b, len(text.split()), text))
        (ha, la, ba, wa, ta), (hb, lb, bb, wb, tb) = sides
        human = "a" if rng.random() < 0.5 else "b"
        norm = [(x - y) / (x + y) if x + y else 0.0 for x, y in ((ha, hb), (la, lb), (ba, bb))]
        logit = 1.2 * (1 if human == "a" else -1) + 1.5 * norm[1] + 2.0 * norm[2]
        verdict = "a" if rng.random() < 1 / (1 + np.exp(-logit)) else "b"
        rows.append(dict(pair_id=f"p{i}", prompt="q", response_a=ta, response_b=tb, judge="j",
                         verdict=verdict, human=[human]))
        for k, v in zip(("headers", "lists", "bold"), norm, strict=True):
            raw[k].append(v)
        raw["words"].append(wa - wb)
        raw["human"].append(1.0 if human == "a" else -1.0)
        raw.setdefault("y", []).append(1.0 if verdict == "a" else 0.0)
        raw.setdefault("y_human", []).append(1.0 if human == "a" else 0.0)
    df, _ = validate(pd.DataFrame(rows))
    return df, raw


def test_style_control_matches_a_direct_statsmodels_fit_on_the_same_design():
    import numpy as np
    import statsmodels.api as sm

    from judgebias.metrics.regression import choice_regression

    df, raw = _styled_table()
    est = choice_regression(df, "j")
    terms = est.details["terms"]
    features = [np.array(raw[k]) for k in ("words", "headers", "lists", "bold")]
    X = np.column_stack([np.ones(len(raw["y"])), raw["human"], *((f - f.mean()) / f.std() for f in features)])
    direct = sm.Logit(np.array(raw["y"]), X).fit(disp=0)
    names = ["intercept", "human_a", "word_diff", "headers_style", "lists_style", "bold_style"]
    assert est.details["used"] == names[1:]
    for i, name in enumerate(names):
        assert terms[name]["coef"] == pytest.approx(direct.params[i], rel=1e-6, abs=1e-9), name
        assert terms[name]["ci_low"] == pytest.approx(direct.conf_int()[i, 0], rel=1e-6, abs=1e-9), name
    # The judge's taste for bold and lists is found, its indifference to headers too.
    assert terms["bold_style"]["ci_low"] > 0 and terms["lists_style"]["ci_low"] > 0
    assert terms["headers_style"]["ci_low"] < 0 < terms["headers_style"]["ci_high"]
    # The same model on the human labels: humans here ignore style entirely.
    hum = choice_regression(df, "j", of="human")
    human_terms = hum.details["terms"]
    assert "human_a" not in hum.details["used"] and hum.details["positive_class"] == "human picks A"
    Xh = np.delete(X, 1, axis=1)
    direct_h = sm.Logit(np.array(raw["y_human"]), Xh).fit(disp=0)
    for i, name in enumerate([n for n in names if n != "human_a"]):
        assert human_terms[name]["coef"] == pytest.approx(direct_h.params[i], rel=1e-6, abs=1e-9), name
    assert human_terms["bold_style"]["ci_low"] < 0 < human_terms["bold_style"]["ci_high"]
    with pytest.raises(ValueError, match="of must be"):
        choice_regression(df, "j", of="gold")


def test_markdown_counts_follow_arena_hard_auto_rules():
    texts = pd.Series([
        # 1 header ("#nohash" is none), 4 list items (-, -, *, "1."; "2)" is not Arena-Hard's), 2 bold
        # spans (one split by a line break is not bold)
        "# Title\n\nSome **bold** and __more__.\n- a\n- b\n* c\n1. one\n2) two\n#nohash\n**not\nbold**",
        None,
        "plain text - not a list 3. no",
        # the fenced block's "# comment", "- x" and "**k**" are code, not markdown: 1 header, 1 list
        # item, 1 bold span, all outside the fences
        "## Setup\n```python\n# comment\n- x\nd = {'**k**': 1}\n```\n- step **one**",
        # a fence holding a backtick is not dropped (Arena-Hard's [^`]* block): its "# b" counts, 1 header
        "```js\nlet s = `a`;\n# b\n```",
        # "#" must open the line (an indented one is none); "#" then a line break is an (empty) header
        "   # indented\n#\ntext",
    ])
    counts = F.markdown_counts(texts)
    assert {k: v.tolist() for k, v in counts.items()} == {"headers": [1, 0, 0, 1, 1, 1],
                                                          "lists": [4, 0, 0, 1, 0, 0],
                                                          "bold": [2, 0, 0, 1, 0, 0]}
