"""The coverage benchmark (``judgebias coverage``): its tables are what the product's own
``prepare`` makes of raw tables, its truths are right on hand-computed cases, its runner counts
coverage correctly, and a tiny run has the documented shape."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from judgebias.coverage import FAMILIES, family
from judgebias.coverage import tables as T
from judgebias.coverage.families_choice import agreement_truths, ceiling_scores
from judgebias.coverage.families_survey import inclusion
from judgebias.coverage.registry import Family, Figure
from judgebias.coverage.report import markdown, write
from judgebias.coverage.runner import COLUMNS, run, run_cell
from judgebias.metrics import frame as F


def test_simulated_table_is_what_prepare_makes_of_the_raw_table():
    # Word and bold counts are handed to the product instead of texts: the same table written
    # with texts must give the same prepared columns.
    words_a, words_b = np.array([3, 1, 2]), np.array([1, 4, 2])
    bold_a, bold_b = np.array([1, 0, 2]), np.array([0, 0, 1])
    human = np.array([[2, 1, 0], [0, 0, 1], [1, 1, 1]])
    cols = {"generator_a": np.array(["x", "y", "x"], dtype=object), "generator_b": np.array(["y", "x", "z"]),
            "verdict": np.array(["a", "tie", "b"], dtype=object), "p_a": np.array([0.7, 0.5, 0.2])}
    ours = T.table(3, human=human, words=(words_a, words_b), bold=(bold_a, bold_b), columns=cols)

    def text(words, bold):
        return " ".join([f"**w{i}**" if i < bold else f"w{i}" for i in range(words)])
    raw = pd.DataFrame({"pair_id": ["0", "1", "2"], "judge": T.JUDGE, **cols,
                        "human": [["a", "a", "b"], ["tie"], ["a", "b", "tie"]],
                        "response_a": [text(w, b) for w, b in zip(words_a, bold_a, strict=True)],
                        "response_b": [text(w, b) for w, b in zip(words_b, bold_b, strict=True)]})
    theirs = F.prepare(raw)
    for col in F.DERIVED:
        np.testing.assert_array_equal(ours[col].to_numpy(), theirs[col].to_numpy(), err_msg=col)


def test_agreement_truths_on_a_hand_computed_table():
    # judge rows a/b/tie x human columns a/b/tie:
    joint = np.array([[0.3, 0.1, 0.0], [0.1, 0.3, 0.0], [0.0, 0.0, 0.2]])
    t = agreement_truths(joint)
    # po = 0.3 + 0.3 + 0.2 = 0.8; margins judge (0.4, 0.4, 0.2), human (0.4, 0.4, 0.2)
    # pe = 0.16 + 0.16 + 0.04 = 0.36; kappa = (0.8 - 0.36) / 0.64 = 0.6875
    assert t["agreement_human"] == pytest.approx(0.8)
    assert t["kappa_human"] == pytest.approx(0.6875)
    # two-class: (0.3 + 0.3) / (0.4 + 0.4) = 0.75; tie rate = the judge's tie row = 0.2
    assert t["agreement_human_2class"] == pytest.approx(0.75)
    assert t["tie_rate"] == pytest.approx(0.2)


def test_ceiling_scores_by_hand():
    # labels (a, a, b), judge a: holding out an a leaves {a, b} (no strict majority), holding out
    # the b leaves {a, a} -> reference a; weights: the b label only (1). Human: b != a -> 0;
    # judge: a == a -> 1.
    assert ceiling_scores((2, 1, 0), 0) == (0.0, 1.0)
    # labels (a, a, a), judge b: each a held out leaves {a, a}: human 3/3, judge 0/3.
    assert ceiling_scores((3, 0, 0), 1) == (1.0, 0.0)
    # labels (a, b, tie): no held-out label has a strict majority among the other two.
    assert ceiling_scores((1, 1, 1), 0) is None


def test_position_verdict_truths_by_hand():
    fam = family("position_verdicts")
    truth = {f.name: f.truth for f in fam.figures}
    # outcomes (A-first, B-first): a_a .25, b_b .20, tie_tie .05 -> consistent 0.50;
    # flips (a, b) .25 + (b, a) .05 = 0.30; fairness = recency .05 - primacy .25 = -0.20.
    assert truth["position_consistency"] == pytest.approx(0.50)
    assert truth["position_flip_rate"] == pytest.approx(0.30)
    assert truth["preference_fairness"] == pytest.approx(-0.20)
    # P(first wins) per pair = (w_ab + w_ba) / 2 with w = 1 / 0 / 0.5 for first / second / tie:
    # a_a .25 * .5 + b_b .20 * .5 + tie_tie .05 * .5 + (a,b) .25 * 1 + (b,a) .05 * 0
    # + (a,tie) .06 * .75 + (tie,a) .03 * .25 + (b,tie) .03 * .25 + (tie,b) .08 * .75
    # = .125 + .10 + .025 + .25 + 0 + .045 + .0075 + .0075 + .06 = 0.62
    assert truth["position_bias"] == pytest.approx(0.62)


def _constant_family(low: float, high: float) -> Family:
    return Family("const", "test", "none", (Figure("x", "fixed", 0.5),),
                  simulate=lambda rng, n: rng.random(n),
                  estimate=lambda s: {"x": (float(s.mean()), low, high) if s.size > 1 else None})


def test_runner_counts_coverage_definition_and_bias():
    hit = run_cell(_constant_family(0.4, 0.6), 20, 50)[0]
    miss = run_cell(_constant_family(0.6, 0.7), 20, 50)[0]
    assert hit["coverage"] == 1.0 and miss["coverage"] == 0.0
    assert hit["width"] == pytest.approx(0.2) and hit["defined"] == 1.0
    assert abs(hit["bias"]) < 0.05  # the mean of 20 uniforms, averaged over 50 replications
    undefined = run_cell(_constant_family(0.4, 0.6), 1, 10)[0]
    assert undefined["defined"] == 0.0 and np.isnan(undefined["coverage"])


def test_tiny_run_has_the_documented_shape(tmp_path):
    names = ["agreement", "verbosity", "human_loop"]
    out = run(names, ns=(25, 100), reps=4, seed=1)
    figures = sum(len(family(x).figures) for x in names)
    assert list(out.columns) == list(COLUMNS)
    assert len(out) == figures * 2 and set(out["n"]) == {25, 100}
    assert out["defined"].between(0, 1).all()
    assert out["coverage"].dropna().between(0, 1).all()
    # the same cells again repeat exactly (seeded per cell)
    again = run(["verbosity"], ns=(25,), reps=4, seed=1)
    mine = out[(out["family"] == "verbosity") & (out["n"] == 25)].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine.drop(columns="seconds"), again.drop(columns="seconds"))
    paths = write(out, tmp_path)
    assert all(p.exists() for p in paths.values())
    assert "| agreement | kappa_human |" in markdown(out)


def test_every_registered_family_is_unique_and_has_finite_truths():
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
    for fam in FAMILIES:
        assert all(np.isfinite(f.truth) for f in fam.figures)


def test_inclusion_probabilities_sum_to_the_expected_labels_and_cap_at_one():
    size = np.array([10.0, 1.0, 1.0, 1.0, 1.0])
    pi = inclusion(size, 3)
    # 10 / 14 * 3 > 1: the first unit is capped, the other 2 expected labels spread over 4 units
    np.testing.assert_allclose(pi, [1.0, 0.5, 0.5, 0.5, 0.5])
    with pytest.raises(ValueError):
        inclusion(size, 6)


def test_cli_lists_the_families():
    out = subprocess.run([sys.executable, "-m", "judgebias", "coverage", "--list"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "self_preference_eo.tnr" in out.stdout and "human_loop" in out.stdout


def test_reliable_from_is_the_first_n_after_which_every_cell_holds():
    from judgebias.coverage.report import reliable_from

    def rows(figure, coverages, defined=1.0):
        return [{"family": "f", "figure": figure, "method": "m", "n": n, "reps": 1000, "defined": defined,
                 "coverage": c, "coverage_se": 0.0, "width": 0.1, "bias": 0.0, "truth": 0.5, "seconds": 0.0}
                for n, c in zip((10, 25, 50, 100, 200), coverages, strict=True)]
    summary = pd.DataFrame(rows("dips", [0.90, 0.95, 0.94, 0.92, 0.95]) + rows("holds", [0.95] * 5)
                           + rows("fails", [0.95] * 4 + [0.90]) + rows("never", [0.95] * 5, defined=0.0)
                           + rows("rare", [0.95] * 5, defined=0.05))
    got = reliable_from(summary).set_index("figure")
    # "dips": 100 misses 0.93, so only 200 counts; "holds": from 10; "fails" misses at the largest n;
    # "never": never reported
    assert got.loc["dips", "reliable_from_n"] == 200 and got.loc["dips", "lowest_coverage_from_there"] == 0.95
    assert got.loc["holds", "reliable_from_n"] == 10
    assert pd.isna(got.loc["fails", "reliable_from_n"]) and pd.isna(got.loc["never", "reliable_from_n"])
    # "rare": reported in 50 of 1000 replications only: too few to count as holding
    assert pd.isna(got.loc["rare", "reliable_from_n"])


def test_mlflow_metric_names_per_figure_n_and_statistic():
    from judgebias.tracking.coverage_run import coverage_metrics

    summary = pd.DataFrame([{"family": "dbg", "figure": "dbg", "n": 10, "coverage": 0.93, "width": 0.5,
                             "bias": float("nan"), "defined": 1.0}])
    # NaN (an undefined bias) is left out, never logged as a number
    assert coverage_metrics(summary) == {"dbg.dbg.n10.coverage": 0.93, "dbg.dbg.n10.width": 0.5,
                                         "dbg.dbg.n10.defined": 1.0}


def test_full_lc_family_is_opt_in_and_runs_the_product_function():
    from judgebias.coverage import OPT_IN

    assert "win_rate_glm" not in {f.name for f in FAMILIES} and family("win_rate_glm") in OPT_IN
    out = run(["win_rate_glm"], ns=(25,), reps=2, seed=1)
    assert set(out["figure"]) == {"lc_glm.even", "lc_glm.long", "lc_glm.short"}
    assert (out["defined"] == 1.0).all() and out["width"].gt(0).all()
    truths = {f.name: f.truth for f in family("win_rate_glm").figures}
    # E_gamma[sigmoid(theta + gamma)] is pulled toward 0.5 from sigmoid(theta) by the difficulty spread
    assert 1 / (1 + math.exp(1.0)) < truths["lc_glm.short"] < 0.5


def test_leaderboard_family_computes_strengths_and_ranks_with_the_product():
    from judgebias.coverage import OPT_IN
    from judgebias.coverage import families_leaderboard as fl

    fam = family("leaderboard")
    assert fam in OPT_IN and fam not in FAMILIES
    truths = {f.name: f.truth for f in fam.figures}
    # strengths -0.7 -0.35 -0.1 0.05 0.35 0.7 have mean -0.05/6: centred, m4 = 0.05 + 0.05/6
    assert truths["strength.m4"] == pytest.approx(0.05 + 0.05 / 6)
    assert sum(truths[f"strength.m{k}"] for k in range(1, 7)) == pytest.approx(0.0, abs=1e-12)
    assert [truths[f"rank.m{k}"] for k in range(1, 7)] == [6, 5, 4, 3, 2, 1]
    df = fam.simulate(np.random.default_rng(3), 200)
    assert len(df) == 200 and df["prompt"].nunique() < 200       # several comparisons per prompt
    assert set(df["verdict"].dropna()) == {"a", "b", "tie"}
    got = fam.estimate(df)
    assert set(got) == set(truths)
    for name, (value, low, high) in got.items():
        assert low <= value <= high, name
    # the product's own fit: its strengths are centred and ordered by the ranks it reports
    strengths = np.array([got[f"strength.m{k}"][0] for k in range(1, 7)])
    assert strengths.sum() == pytest.approx(0.0, abs=1e-6)
    assert [got[f"rank.m{k}"][0] for k in range(1, 7)] == list(fl.bt.ranks(strengths))


def _children(pid: int) -> set[int]:
    from pathlib import Path

    kids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.add(int(entry.name))
    return kids


def test_workers_are_capped_at_the_cores_and_a_sigterm_stops_them(tmp_path):
    """``--workers 16`` starts at most one worker per usable core, says so, and a SIGTERM mid-run
    ends the command and its workers (unbounded, 10000 hung and ignored SIGTERM for 9 minutes)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from judgebias.coverage.runner import usable_cores

    argv = [sys.executable, "-m", "judgebias", "coverage", "--workers", "16", "--reps", "100000",
            "-f", "position_probs", "--n", "10,25,50,100", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        workers: set[int] = set()
        while time.monotonic() < deadline and len(workers) < min(usable_cores(), 4):
            workers = _children(proc.pid)
            time.sleep(0.5)
        time.sleep(3)  # every worker the pool would start has started
        workers = _children(proc.pid)
        assert workers and len(workers) <= usable_cores() + 1, workers  # + the pool's own helper, if any
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert f"--workers 16 capped at {min(usable_cores(), 16)}" in err
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    time.sleep(1)
    assert not [p for p in workers if _running(p)], workers


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"
