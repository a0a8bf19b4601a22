"""``analyze`` on a pointwise table: its figures in MLflow (a real sqlite-backed store) and one
score-distribution plot per judge, on a small hand-made table (arithmetic in the comments)."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.display import file_stem
from judgebias.reporting.plots_pointwise import pointwise_figures
from judgebias.tables.files import write_table
from judgebias.tables.pointwise import validate_pointwise
from judgebias.tracking.log_pointwise import flatten_pointwise

# Judge j on 1..5 wrote i1 and i2 itself; m wrote i3..i5.
SCORES = [2, 3, 3, 4, 5]
HUMANS = [[1, 3], [3], [2, 4], [5], [5, 5]]  # means 2, 3, 3, 5, 5
GENERATORS = ["j", "j", "m", "m", "m"]
# A second judge "org/g" (a name that is no file name) scores i1..i3 the same 4 and has no humans.
OTHER = "org/g"


def table() -> pd.DataFrame:
    def row(i, judge, score, humans):
        return dict(item_id=f"i{i}", prompt=f"q{i}", response=f"answer {i}", generator=GENERATORS[i - 1],
                    judge=judge, score=score, score_argmax=score, scale_min=1, scale_max=5,
                    criterion="overall", human_scores=humans)

    rows = [row(i, "j", SCORES[i - 1], HUMANS[i - 1]) for i in range(1, 6)]
    rows += [row(i, OTHER, 4, []) for i in range(1, 4)]
    return validate_pointwise(pd.DataFrame(rows))[0]


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def _bars(fig) -> dict[str, list[float]]:
    ax = fig.axes[0]
    return {c.get_label(): [round(p.get_height(), 6) for p in c.patches] for c in ax.containers}


def test_score_distribution_plot_judge_vs_humans():
    figs = pointwise_figures(table())
    assert set(figs) == {"score_distribution_j", f"score_distribution_{OTHER}"}
    bars = _bars(figs["score_distribution_j"])
    # Judge levels 2,3,3,4,5 of 5 items on 1..5: shares 0, .2, .4, .2, .2.
    # Rounded human means 2,3,3,5,5: 0, .2, .4, 0, .4.
    assert bars == {"judge j (n=5)": [0, 0.2, 0.4, 0.2, 0.2],
                    "humans, rounded mean rating (n=5)": [0, 0.2, 0.4, 0, 0.4]}
    # No human score: the judge's bars alone (4, 4, 4: all at level 4), and the title says so.
    other = figs[f"score_distribution_{OTHER}"]
    assert _bars(other) == {f"judge {OTHER} (n=3)": [0, 0, 0, 1.0, 0]}
    assert "no human scores" in other.axes[0].get_title()
    assert [t.get_text() for t in other.axes[0].get_xticklabels()] == ["1", "2", "3", "4", "5"]


def test_flattened_names_say_what_the_number_is():
    from judgebias.reporting.pointwise_analysis import analyze_pointwise

    flat = flatten_pointwise(analyze_pointwise(table(), reps=200))
    # Bias: diffs 0, 0, 0, -1, 0, mean -0.2. MAE: 1/5 = 0.2.
    assert flat["j.score_bias_human.mean_judge_minus_human"] == pytest.approx(-0.2)
    assert flat["j.score_agreement_human.mae"] == pytest.approx(0.2)
    # DP: own (2 + 3)/2 = 2.5 minus other (3 + 4 + 5)/3 = 4 -> -1.5, from 5 rows.
    assert flat["j.score_self_preference.dp"] == pytest.approx(-1.5)
    assert flat["j.score_self_preference.dp.n"] == 5
    assert "j.score_self_preference.dp.ci_low" in flat and "j.score_self_preference.dp.p_value" in flat
    assert flat["dataset.rows"] == 8 and flat["dataset.items"] == 5
    # org/g's scores are all 4: its skew is NaN and left out, its mean is there.
    assert f"{OTHER}.score_distribution.skew" not in flat
    assert flat[f"{OTHER}.score_distribution.mean"] == 4
    assert not any(k.startswith(f"{OTHER}.score_agreement_human") for k in flat)  # no humans: skipped
    assert all(math.isfinite(v) for v in flat.values())


def test_cli_analyze_pointwise_logs_to_mlflow(tmp_path, mlflow_uri, monkeypatch):
    from mlflow.tracking import MlflowClient

    from judgebias.cli import app

    path, out, plots = tmp_path / "scores.jsonl", tmp_path / "m.json", tmp_path / "plots"
    write_table(table(), path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    res = CliRunner().invoke(app, ["analyze", str(path), "--out", str(out), "--plots-dir", str(plots),
                                   "--reps", "200"])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    stems = {"score_distribution_j", file_stem(f"score_distribution_{OTHER}")}
    assert {p.stem for p in plots.glob("*.png")} == stems
    run_id = re.search(r"MLflow: run (\w+)", res.output).group(1)
    client = MlflowClient(tracking_uri=mlflow_uri)
    run = client.get_run(run_id)
    logged = run.data.metrics
    assert logged == pytest.approx(flatten_pointwise(result))
    assert f"{OTHER}.score_distribution.skew" not in logged and f"{OTHER}.score_distribution.mean" in logged
    rho = result["judges"]["j"]["score_agreement_human"]["spearman"]
    assert logged["j.score_agreement_human.spearman"] == pytest.approx(rho["value"])
    assert logged["j.score_agreement_human.spearman.ci_high"] == pytest.approx(rho["ci_high"])
    assert logged["j.score_agreement_human.spearman.p_value"] == pytest.approx(rho["p_value"])
    assert run.data.params["judges"] == f"j,{OTHER}" and run.data.params["table_kind"] == "pointwise"
    assert run.data.tags["judgebias.table_kind"] == "pointwise"
    assert {"metrics.json", "plots", "table"} <= {a.path for a in client.list_artifacts(run_id)}
    logged_plots = {a.path for a in client.list_artifacts(run_id, "plots")}
    assert "plots/score_distribution_j.png" in logged_plots and len(logged_plots) == 2


def test_plots_already_written_are_logged_as_they_are_under_their_mlflow_names(tmp_path, mlflow_uri):
    # A PNG written by save_figures is logged byte for byte (not drawn again); a name with a folder
    # ("org/g") keeps it in MLflow, and one whose parts could climb (".."), drawn from the file, stays
    # inside "plots".
    from pathlib import Path

    import mlflow
    from matplotlib.figure import Figure
    from mlflow.tracking import MlflowClient

    from judgebias.reporting.plots import save_figures
    from judgebias.tracking.log_analysis import log_figures

    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    png = save_figures({"x": fig}, tmp_path)[0]
    mlflow.set_tracking_uri(mlflow_uri)
    with mlflow.start_run() as run:
        paths = log_figures({"dist j": png, "dist org/g": png, "dist ../up": png})
    client = MlflowClient(tracking_uri=mlflow_uri)
    assert paths == ["plots/dist_j.png", "plots/dist_org/g.png", "plots/dist_../up.png"]
    got = client.download_artifacts(run.info.run_id, "plots/dist_j.png", str(tmp_path / "dl"))
    assert Path(got).read_bytes() == png.read_bytes()
    in_folder = {a.path for a in client.list_artifacts(run.info.run_id, "plots/dist_org")}
    assert "plots/dist_org/g.png" in in_folder
