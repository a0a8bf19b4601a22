"""The coverage benchmark's nested processes (``judgebias coverage --nested``): the clustered draws
keep each unit's law and have the stated intra-cluster correlation, the tables carry their clusters
as users' tables do, and on strongly nested tables the product's clustered interval covers where
the independent one does not."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judgebias.coverage import family
from judgebias.coverage import nested as N
from judgebias.coverage.report import nested_markdown
from judgebias.metrics import frame as F


def test_latent_correlation_by_hand():
    # Sheppard: a median split of two normals of correlation rho agrees with correlation
    # (2 / pi) asin(rho); icc 0.5 -> rho = sin(pi / 4) = 0.707107; icc 0 -> 0; icc 1/3 -> sin(pi / 6) = 1/2
    assert N.latent_correlation(0.5) == pytest.approx(math.sqrt(0.5))
    assert N.latent_correlation(0.0) == 0.0
    assert N.latent_correlation(1 / 3) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="icc"):
        N.latent_correlation(1.0)


def test_clustered_draws_keep_their_law_and_have_the_stated_icc():
    codes = np.repeat(np.arange(20000), 2)                 # 20000 clusters of two units
    g = N.ClusteredGenerator(np.random.default_rng(1), codes, 0.5)
    u = g.random(codes.size)
    assert abs(u.mean() - 0.5) < 0.005 and abs((u < 0.25).mean() - 0.25) < 0.006
    below = (u < 0.5).astype(float).reshape(-1, 2)
    # the median-split indicator's correlation between the two units of a cluster
    icc = np.corrcoef(below[:, 0], below[:, 1])[0, 1]
    assert icc == pytest.approx(0.5, abs=0.02)
    # other laws through the inverse CDF: Beta(4, 1.5) has mean 4 / 5.5 = 0.7273; integers 0..2 each 1/3
    assert g.beta(4.0, 1.5, codes.size).mean() == pytest.approx(4 / 5.5, abs=0.006)
    assert np.bincount(g.integers(0, 3, codes.size)) / codes.size == pytest.approx([1 / 3] * 3, abs=0.01)
    assert g.normal(2.0, 3.0, codes.size).std() == pytest.approx(3.0, rel=0.02)
    with pytest.raises(ValueError, match="one value per unit"):
        g.random(7)


def test_icc_zero_is_independent_units():
    codes = np.repeat(np.arange(20000), 2)
    u = N.ClusteredGenerator(np.random.default_rng(2), codes, 0.0).random(codes.size).reshape(-1, 2)
    assert abs(np.corrcoef(u[:, 0] < 0.5, u[:, 1] < 0.5)[0, 1]) < 0.02


def test_nested_tables_carry_their_clusters_and_the_independent_reading_drops_them():
    design = N.Design(7, (2, 4), 0.3)
    sample, codes = N.simulate(family("self_preference"), np.random.default_rng(0), design)
    assert len(sample) == codes.size and 14 <= codes.size <= 28
    got = F.clusters(sample)
    assert (got.count, got.by) == (7, "prompt")
    # units of one cluster share its prompt; the prompt is the cluster code of the unit
    assert (sample["prompt"].to_numpy() == np.char.add("q", codes.astype(str))).all()
    alone = F.clusters(N.independent(sample))
    assert (alone.count, alone.by) == (codes.size, "none")


def test_design_and_rows_are_checked():
    assert N.parse_rows("1-20") == (1, 20) and N.parse_rows("5") == (5, 5)
    for bad in ("0-3", "5-2", "x", "1-2-3"):
        with pytest.raises(ValueError, match="rows per cluster"):
            N.parse_rows(bad)
    with pytest.raises(ValueError, match="2 clusters"):
        N.Design(1, (1, 2), 0.1)
    with pytest.raises(ValueError, match="no nested process"):
        N.run(["human_loop"], reps=1)


def test_clustered_interval_covers_where_the_independent_one_does_not():
    # 20 prompts of 10 pairs each, every draw's median split correlated 0.5 within a prompt: the
    # share of own picks varies by prompt, so the 200 pairs are worth far fewer independent ones.
    rows = {r["figure"]: r for r in N.run_cell(family("self_preference"), N.Design(20, (10, 10), 0.5), 80)}
    dp = rows["self_preference_dp"]
    assert dp["defined"] == 1.0 and dp["defined_independent"] == 1.0
    assert dp["coverage"] >= 0.85
    assert dp["coverage"] - dp["coverage_independent"] >= 0.15
    assert dp["width_ratio"] > 1.5                     # the clustered interval is the wider one
    eo = rows["self_preference_eo"]
    assert eo["coverage"] > eo["coverage_independent"]


def test_reliable_from_clusters_on_a_hand_made_summary():
    def row(fig, g, icc, cov):
        return {"family": "f", "figure": fig, "method": "m", "clusters": g, "rows": "1-20", "icc": icc,
                "reps": 200, "defined": 1.0, "coverage": cov, "coverage_independent": 0.8, "width_ratio": 1.5,
                "defined_independent": 1.0}
    summary = pd.DataFrame([
        # x: misses at 10 clusters (icc 0.5) only -> holds from 20
        row("x", 10, 0.0, 0.95), row("x", 10, 0.5, 0.91), row("x", 20, 0.0, 0.95), row("x", 20, 0.5, 0.94),
        row("x", 40, 0.0, 0.95), row("x", 40, 0.5, 0.93),
        # y: misses at the largest number -> never
        row("y", 10, 0.0, 0.95), row("y", 10, 0.5, 0.95), row("y", 20, 0.0, 0.95), row("y", 20, 0.5, 0.95),
        row("y", 40, 0.0, 0.95), row("y", 40, 0.5, 0.92),
    ])
    got = N.reliable_from(summary).set_index("figure")
    assert got.loc["x", "reliable_from_clusters"] == 20
    assert got.loc["x", "lowest_coverage_from_there"] == pytest.approx(0.93)
    assert pd.isna(got.loc["y", "reliable_from_clusters"])
    # x at the top ICC from 20 clusters on: (0.94 + 0.93) / 2 = 0.935 over 400 replications,
    # SE sqrt(0.935 * 0.065 / 400) = 0.01233
    assert got.loc["x", "pooled_top_icc"] == pytest.approx(0.935)
    assert got.loc["x", "pooled_top_icc_se"] == pytest.approx(0.01233, abs=1e-5)
    text = nested_markdown(summary)
    # within noise: a cell's one-sided allowance at 200 replications is 1.645 sqrt(0.93 * 0.07 / 200)
    # = 0.0297, so x's 0.91 is near; but x's ICC 0.5 cells from 10 clusters pool to
    # (0.91 + 0.94 + 0.93) / 3 = 0.9267 < 0.93, from 20 to 0.935: within noise from 20.
    # y: ICC 0.5 from 10 pools to (0.95 + 0.95 + 0.92) / 3 = 0.94, ICC 0 to 0.95: from 10.
    assert got.loc["x", "within_noise_from_clusters"] == 20
    assert got.loc["y", "within_noise_from_clusters"] == 10
    assert "| f | x | 20 | 20 | 0.930 | 0.910 | 0.935 (0.012) | 0.800 |" in text
    assert "| f | y | never | 10 |" in text
    assert "**0.910** / **0.800**" in text


def test_tiny_nested_run_has_the_documented_shape():
    df = N.run(["verbosity"], clusters=(5, 8), iccs=(0.0, 0.4), rows=((1, 3),), reps=3)
    assert list(df.columns) == list(N.COLUMNS)
    assert len(df) == 4 and set(df["clusters"]) == {5, 8} and set(df["icc"]) == {0.0, 0.4}
    assert ((df["units"] >= df["clusters"]) & (df["units"] <= 3 * df["clusters"])).all()
