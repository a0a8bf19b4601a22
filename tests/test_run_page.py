"""An experiment's page as a reader opens it (issue 34, item 10): the judges side by side with their
intervals, links to the MLflow run, the imported data's pages and the ablations' pages (each link
resolving), the weak-judge caveat, the ablations and the perturbation plot with captions that say
what they show, the style regression's coefficients with intervals, and "gold" naming only the
gold panel. The run folder is made by hand (no model runs): the files the stages write."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_analyze import synthetic
from test_plots_readable import _probe
from typer.testing import CliRunner

from judgebias.reporting import plots, plots_ablations, plots_probes
from judgebias.reporting.experiment_summary import WEAK_JUDGES_NOTE

RENDER = Path(__file__).with_name("render_page.py")
RUN_URL = "http://127.0.0.1:5000/#/experiments/1/runs/abc123"


class _Page(HTMLParser):
    """Links, tables (class -> rows of cell texts), figure captions and image alts of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.captions: list[str] = []
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        elif tag == "table":
            self.tables.append((a.get("class") or "", []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "figcaption":
            self._caption = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "figcaption" and self._caption is not None:
            self.captions.append("".join(self._caption).strip())
            self._caption = None

    def handle_data(self, data):
        for part in (self._cell, self._caption):
            if part is not None:
                part.append(data)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    from judgebias.reporting.analysis import analyze
    from judgebias.runs.layout import RunLayout

    root = tmp_path_factory.mktemp("run")
    result = analyze(synthetic(60), self_map={"j1": {"j1"}, "j2": {"j2"}, "j3": {"j3"}}, reps=100)
    (root / "metrics.json").write_text(json.dumps(result))
    plots.save_figures(plots.figures_for(result), root / "plots")
    (root / "mlflow.json").write_text(json.dumps({"run_id": "abc123", "run_url": RUN_URL,
                                                   "tracking_uri": "sqlite:///mlflow.db", "traces": TRACES}))
    (root / "page_notes.json").write_text(json.dumps([WEAK_JUDGES_NOTE]))
    for name in ("pandalm", "llmbar-natural"):
        (root / "imported" / name).mkdir(parents=True)
        (root / "imported" / name / "report.html").write_text("<!doctype html><h1>imported</h1>")
    est = {"value": 0.0, "ci_low": -0.3, "ci_high": 0.3, "n": 8}
    for folder, conditions, pages in (("style-aa11", ("before", "attractive", "<b>humorous</b>"),
                                       ("attractive", "humorous")),
                                      ("finetune-bb22", ("before", "finetuned"), (".",))):
        comp = {"judges": {j: {c: est for c in conditions} for j in ("j1", "j2")}}
        comp["judges"]["j2"]["before"] = {"value": None, "skipped": "no gold judge left"}
        (root / folder).mkdir()
        (root / folder / "comparison.json").write_text(json.dumps(comp))
        plots.save_figure(plots_ablations.dbg_before_after(comp, "DBG before and after"),
                          root / RunLayout(folder + "/").plot("dbg_before_after"))
        for page in pages:
            (root / folder / page).mkdir(exist_ok=True)
            (root / folder / page / "report.html").write_text("<!doctype html><h1>ablation</h1>")
    probe = _probe(("j1", "j2", "j3"))
    (root / "perturb-cc33" / "plots").mkdir(parents=True)
    (root / "perturb-cc33" / "probe.json").write_text(json.dumps(probe))
    plots.save_figure(plots_probes.perturbation_shifts(probe),
                      root / "perturb-cc33" / "plots" / "perturbations.png")
    (root / "probes.json").write_text(json.dumps({"perturbations": "perturb-cc33/probe.json"}))
    from judgebias.cli import app

    res = CliRunner().invoke(app, ["report", str(root)])
    assert res.exit_code == 0, res.output
    return root


def _parsed(root: Path) -> tuple[str, _Page]:
    text = (root / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    return text, page


def test_the_page_compares_the_judges_side_by_side(run_folder):
    _, page = _parsed(run_folder)
    compare = [rows for cls, rows in page.tables if cls == "side-by-side"]
    assert len(compare) == 1
    head, *rows = compare[0]
    assert head == ["figure", "j1", "j2", "j3"]
    by_name = {r[0]: r[1:] for r in rows}
    result = json.loads((run_folder / "metrics.json").read_text())
    eo = result["judges"]["j2"]["self_preference_eo"]
    assert by_name["self-preference (EO, Wataoka Def 4.1) (TPR - TNR; 0 = fair)"][1] == (
        f"{eo['value']:+.3f} [{eo['ci_low']:+.3f}, {eo['ci_high']:+.3f}] n={eo['n']}")
    assert all(re.fullmatch(r"[+-]?\d\.\d{3} \[.+, .+\] n=\d+", c)
               for c in by_name["position bias (P(first wins); .5 = none)"])
    # A sub-row says what it belongs to; the regression's row names its value.
    assert "picks lower perplexity: minus humans (> 0 more than humans)" in by_name
    assert "choice regression (style-controlled) (McFadden R2)" in by_name


def _traces() -> dict:
    from judgebias.tracking.judgment_traces import trace_questions, traces_page

    counts = {"rows": 40, "position flips": 6, "judge disagrees with the humans": 9,
              "the judge's own response is A or B": 27}
    page = traces_page("http://127.0.0.1:5000", "7")
    return {"rows": 40, "page": page, "questions": trace_questions(counts, page)}


TRACES = _traces()


def test_the_page_links_mlflow_the_imported_and_the_ablation_pages(run_folder):
    text, page = _parsed(run_folder)
    assert RUN_URL in page.links
    # The judgments as traces, and the questions the page can filter by, each its own link.
    assert TRACES["page"] in page.links and "40 judgments as MLflow traces" in text
    flips, disagree, own = TRACES["questions"]
    assert "6 judgments where the judge flips with the order" in text and flips["url"] in page.links
    assert "tag=judgebias.position_flip%3Dtrue" in flips["url"].replace("%253D", "%3D")
    assert disagree["url"] in page.links
    assert own["url"] == "" and "27 judgments where the judge&#x27;s own response is A or B" in text
    assert own["filter"].replace("'", "&#x27;") in text
    local = [h for h in page.links if not h.startswith("http")]
    assert set(local) == {"imported/pandalm/report.html", "imported/llmbar-natural/report.html",
                          "style-aa11/attractive/report.html", "style-aa11/humorous/report.html",
                          "finetune-bb22/report.html"}
    assert all((run_folder / h).is_file() for h in local)  # every link opens a page
    assert WEAK_JUDGES_NOTE in text.replace("&#x27;", "'")


def test_the_page_shows_ablations_probes_regression_and_captions(run_folder):
    text, page = _parsed(run_folder)
    ablations = [rows for cls, rows in page.tables if cls == "ablation"]
    assert [rows[0] for rows in ablations] == [["judge", "before", "<b>humorous</b>", "attractive"],
                                               ["judge", "before", "finetuned"]]
    assert "&lt;b&gt;humorous&lt;/b&gt;" in text and "<b>humorous" not in text  # names stay text
    assert ablations[0][2][1] == "n/a (no gold judge left)"
    regression = [rows for cls, rows in page.tables if cls == "regression"]
    assert len(regression) == 3
    terms = {r[0]: r for r in regression[0][1:]}
    assert re.fullmatch(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", terms["longer answers"][1])
    assert terms["longer answers"][3]  # the humans' coefficient on the same pairs beside it
    assert "McFadden R2" in text
    # Captions say what a plot shows; none is a file name.
    assert any(c.startswith("Perturbation probe (CALM)") for c in page.captions)
    assert any(c.startswith("DBG per judge in each ablation condition") for c in page.captions)
    assert any(c.startswith("j1: agreement with the humans by how much longer") for c in page.captions)
    stems = {p.stem for p in run_folder.rglob("*.png")}
    assert not stems & set(page.captions)
    # "gold" names the gold panel only.
    assert "gold label" not in text and "agreement with gold panel" in text


def test_the_page_renders_with_its_table_and_links_in_a_headless_browser(run_folder, tmp_path):
    pytest.importorskip("PyQt6.QtWebEngineWidgets", reason="dev extra PyQt6-WebEngine not installed")
    shot = tmp_path / "run_page.png"
    proc = subprocess.run([sys.executable, str(RENDER), str(run_folder / "report.html"), str(shot), "1100"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["loaded"] and "side-by-side" in seen["table_classes"]
    assert seen["table_classes"].count("ablation") == 2
    assert RUN_URL in seen["links"] and "imported/pandalm/report.html" in seen["links"]
    assert seen["images"] == seen["decoded"] > 0
    assert seen["scroll_width"] <= seen["window_width"]  # nothing wider than the window
    assert seen["shot_saved"] and shot.stat().st_size > 100_000


def _h1(page: Path) -> str:
    return re.search(r"<h1>(.*?)</h1>", page.read_text(encoding="utf-8"), re.S).group(1)


def test_report_of_a_run_folder_keeps_the_header_the_flow_gave_its_page(tmp_path, monkeypatch):
    # `judgebias report .`, as the console recommends, rewrote the page as "Judge report card: "
    # (Path(".").name is empty) and dropped the experiment's provenance.
    from judgebias.cli import app
    from judgebias.reporting.analysis import analyze
    from judgebias.reporting.run_page import write_page_header
    from judgebias.runs.store import RunStore

    root = tmp_path / "demo-30a5"
    root.mkdir()
    (root / "metrics.json").write_text(json.dumps(analyze(synthetic(20), reps=100)))
    monkeypatch.chdir(root)
    assert CliRunner().invoke(app, ["report", "."]).exit_code == 0
    assert _h1(root / "report.html") == "Judge report card: demo-30a5"
    write_page_header(RunStore(root), "Judge report card: demo", ["experiment demo, config hash 30a5"])
    assert CliRunner().invoke(app, ["report", "."]).exit_code == 0
    text = (root / "report.html").read_text(encoding="utf-8")
    assert _h1(root / "report.html") == "Judge report card: demo"
    assert "experiment demo, config hash 30a5" in text


def test_ablation_and_imported_pages_link_back_to_the_run_page(tmp_path):
    from judgebias.reporting.analysis import analyze
    from judgebias.reporting.report_card import write_report
    from judgebias.reporting.run_page import back_to_run

    result = analyze(synthetic(20), reps=100)
    for where in ("imported/pandalm", "style-aa11/attractive", "finetune-bb22"):
        page = tmp_path / where / "report.html"
        write_report(page, result, title="t", extras=back_to_run(tmp_path, page))
        parsed = _Page()
        parsed.feed(page.read_text(encoding="utf-8"))
        back = [h for h in parsed.links if h.endswith("report.html")]
        assert back and all((page.parent / h).resolve() == (tmp_path / "report.html").resolve() for h in back)
        assert "back to the experiment" in page.read_text(encoding="utf-8")
