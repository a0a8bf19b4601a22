"""``read_for_analysis`` of a JSONL table through Arrow's JSON reader (judgebias.tables.jsonl_columns):
the same validated table, figures and problems as ``read_table``'s line-by-line read, and that read (with its
errors naming the line) wherever Arrow would read a value otherwise."""

from __future__ import annotations

import json
import tempfile

import pandas as pd
import pytest
from test_analyze import synthetic

import judgebias.tables.jsonl_columns
from judgebias.metrics.frame import response_features
from judgebias.reporting.analysis import analyze
from judgebias.tables.files import read_table, write_table
from judgebias.tables.for_analysis import read_for_analysis
from judgebias.tables.pairwise import TableError


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # Blocks of 2 KB and row groups of 16 rows: a table of a few hundred rows spans many of each.
    monkeypatch.setattr(judgebias.tables.jsonl_columns, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(judgebias.tables.jsonl_columns, "ROW_GROUP_ROWS", 16)


def _columnar(path, **kwargs):
    return read_for_analysis(path, jsonl_columnar_bytes=0, **kwargs)


def _records(n_pairs: int = 30) -> list[dict]:
    table = synthetic(n_pairs)
    table["human"] = [list(v) for v in table["human"]]
    recs = table.drop(columns=["verdict", "fold_rule"]).to_dict(orient="records")  # folded again on reading
    return [{k: v for k, v in r.items() if not (isinstance(v, float) and v != v) and v is not None}
            for r in recs]


def _write(path, records: list[dict], lines_before: list[str] = ()) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines_before:
            fh.write(line + "\n")
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


def _plain(table: pd.DataFrame) -> pd.DataFrame:
    out = table.astype(object).copy()
    out["human"] = [list(v) for v in table["human"]]
    return out


def _same(path, *, arrow_read: bool, skip_invalid: bool = False) -> None:
    plain, ex_plain = read_table(path, skip_invalid=skip_invalid)
    shared, ex_shared = _columnar(path, skip_invalid=skip_invalid)
    # The Arrow read keeps texts as categoricals; a fallback is read_table's read.
    assert isinstance(shared["prompt"].dtype, pd.CategoricalDtype) is arrow_read
    assert list(shared.columns) == list(plain.columns)
    assert _plain(shared).equals(_plain(plain))
    assert ex_shared.to_dict() == ex_plain.to_dict()
    want = analyze(plain, exclusions=ex_plain, reps=100)  # the figures of the line-by-line read, once
    assert analyze(shared, exclusions=ex_shared, reps=100) == want
    lean, ex_lean = _columnar(path, skip_invalid=skip_invalid, response_features=response_features)
    assert analyze(lean, exclusions=ex_lean, reps=100) == want


def test_written_table_same_table_and_figures(tmp_path):
    table = synthetic(40)
    path = write_table(table, tmp_path / "t.jsonl")  # as `judgebias judge --out x.jsonl` writes it
    _same(path, arrow_read=True)


def test_edge_cases_read_by_arrow(tmp_path):
    recs = _records()
    for i, r in enumerate(recs):
        r["batch"] = i % 3                       # an extra integer column
        r["note"] = None if i % 4 else f"n{i}"   # an extra text column, mostly missing
    for r in recs[:40]:                          # ppl missing (key absent) early, then given
        r.pop("ppl_a", None)
    recs[3]["human"] = ["Model_A", " B "]        # spellings that normalize
    recs[4]["human"] = None
    recs[5]["human"] = []
    recs[6].pop("generator_a")                   # a missing key: a missing value
    recs[7]["judge"] = None
    recs[8]["p_a_ab"], recs[8]["p_a_ba"], recs[8]["p_a"] = 1, 0, 0.5  # integers where floats are
    for i, r in enumerate(recs):
        r["flag"] = None if i == 2 else i % 2 == 0  # booleans, one missing
        r["count"] = None if i == 3 else i          # integers, one missing
        r["nothing"] = None                          # never given
        r["annotators"] = [] if i == 4 else None if i == 5 else [f"ann{i}", "x"]  # a list of texts
    for k in ("p_a", "p_a_ab", "p_a_ba"):        # a verdict-only row, its verdict spelled otherwise
        recs[9].pop(k, None)
    recs[9]["verdict"] = " A "
    recs[10]["fold_rule"] = " Auto"
    _same(_write(tmp_path / "t.jsonl", recs, lines_before=["", "   "]), arrow_read=True)


def test_pair_ids_as_numbers(tmp_path):
    recs = _records()
    for r in recs:
        r["pair_id"] = int(r["pair_id"][1:])
    path = _write(tmp_path / "t.jsonl", recs)
    _same(path, arrow_read=True)
    assert _columnar(path)[0]["pair_id"].iat[0] == "0"
    for r in recs:  # floats: written as json writes them, as before
        r["pair_id"] = r["pair_id"] + 0.5
    _same(_write(tmp_path / "f.jsonl", recs), arrow_read=True)


def _same_problems_and_table(path) -> None:
    """A table ``read_table`` refuses is refused with the same problems through Arrow; either way the
    table kept under --skip-invalid is the same."""
    try:
        read_table(path)
    except TableError as plain:
        with pytest.raises(TableError) as shared:
            _columnar(path)
        assert shared.value.problems == plain.problems
    _same(path, arrow_read=True, skip_invalid=True)


def test_invalid_rows_skipped_alike(tmp_path):
    recs = _records()
    recs[2]["p_a"] = 1.5                         # out of range
    recs[9]["response_a"] = ""                   # empty text
    recs[11]["verdict"] = "maybe"                # not a verdict
    path = _write(tmp_path / "t.jsonl", recs)
    with pytest.raises(TableError):
        read_table(path)
    _same_problems_and_table(path)


@pytest.mark.parametrize("change", [
    lambda recs: recs[50].update(pair_id="p-text"),              # an id a number early, text later
    lambda recs: recs[1].update(prompt=5),                       # a number where text is expected
    lambda recs: recs[1].update(p_a="0.5"),                      # a number written as text
    lambda recs: recs[1].update(ppl_a=True),                     # a boolean where a number is
    lambda recs: recs[1].update(human="a"),                      # a label not in a list
    lambda recs: recs[60].update(late_column=1),                 # a column first met after a block
    lambda recs: recs[1].update(meta={"k": 1}),                  # a nested extra value
    lambda recs: recs[1].update(big=2**64),                      # an integer beyond 64 bits
    lambda recs: [r.update(extra=None) for r in recs[:50]] and recs[60].update(extra="x"),
    lambda recs: [r.pop("prompt") for r in recs],                # a required column absent
])
def test_what_arrow_reads_otherwise_is_read_line_by_line(tmp_path, change):
    recs = _records()
    for r in recs:
        r["pair_id"] = int(r["pair_id"][1:])
    change(recs)
    path = _write(tmp_path / "t.jsonl", recs)
    try:
        plain = read_table(path, skip_invalid=True)
    except TableError as exc:
        with pytest.raises(TableError) as shared:
            _columnar(path, skip_invalid=True)
        assert shared.value.problems == exc.problems
        return
    _same(path, arrow_read=False, skip_invalid=True)
    assert plain[0]["pair_id"].iat[0] == "0"


@pytest.mark.parametrize("edit", [
    lambda lines: lines.__setitem__(41, lines[41] + " " + lines[42]),          # two objects on a line
    lambda lines: lines.__setitem__(41, lines[41].replace(", ", ",\n", 1)),    # an object over two lines
    lambda lines: lines.__setitem__(41, lines[41] + "\r" + lines[42]),         # a lone CR: a line break
    lambda lines: lines.__setitem__(0, "\ufeff" + lines[0]),                   # a byte order mark
])
def test_what_is_not_one_object_per_line_is_named_as_before(tmp_path, edit):
    path = tmp_path / "t.jsonl"
    _write(path, _records())
    lines = path.read_text().splitlines()
    edit(lines)
    path.write_bytes(("\n".join(lines) + "\n").encode())
    try:
        expected = read_table(path)
    except TableError as exc:
        with pytest.raises(TableError) as shared:
            _columnar(path)
        assert shared.value.problems == exc.problems
        return
    shared = _columnar(path)
    assert not isinstance(shared[0]["prompt"].dtype, pd.CategoricalDtype)
    assert _plain(shared[0]).equals(_plain(expected[0]))


def test_lines_counted_as_python_reads_them(tmp_path):
    from judgebias.tables.jsonl_columns import NotColumnar, content_lines

    path = tmp_path / "t.txt"
    for data in (b"a\nb\n", b"a\n\n  \nb", b"\n\n\ta\n", b"a\r\n\r\nb\r\n", b"", b"  ", b"a\n \t\n",
                 b"x" * 5 + b"\n\n" + b" " * 7 + b"\n"):
        path.write_bytes(data)
        python = sum(1 for line in path.open(encoding="utf-8") if line.strip())
        assert content_lines(path) == content_lines(path, chunk_bytes=3) == python, data
    for data in (b"a\rb\n", b"\xef\xbb\xbfa\n"):
        path.write_bytes(data)
        with pytest.raises(NotColumnar):
            content_lines(path, chunk_bytes=2)


@pytest.mark.parametrize("labels", [["a", None], ["c"], ["a", ""]])
def test_odd_labels_read_alike(tmp_path, labels):
    recs = _records()
    recs[1]["human"] = labels
    path = _write(tmp_path / "t.jsonl", recs)
    _same_problems_and_table(path)


def test_malformed_line_named_as_before(tmp_path):
    recs = _records()
    path = tmp_path / "t.jsonl"
    _write(path, recs)
    lines = path.read_text().splitlines()
    lines[41] = lines[41][:-1]  # a cut line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TableError) as plain:
        read_table(path)
    with pytest.raises(TableError) as shared:
        _columnar(path)
    assert shared.value.problems == plain.value.problems
    assert shared.value.problems[0].startswith("row 42: not valid JSON")


def test_temporary_file_removed(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    path = _write(tmp_path / "t.jsonl", _records())
    _columnar(path)
    bad = _write(tmp_path / "bad.jsonl", _records(), lines_before=["{"])
    with pytest.raises(TableError):
        _columnar(bad)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_small_files_read_line_by_line(tmp_path):
    path = write_table(synthetic(10), tmp_path / "t.jsonl")
    a, _ = read_for_analysis(path)
    b, _ = read_table(path)
    pd.testing.assert_frame_equal(a, b)


def test_a_missing_numeric_id_as_before(tmp_path):
    recs = _records()
    for r in recs:
        r["pair_id"] = int(r["pair_id"][1:])
    recs[7]["pair_id"] = None
    path = _write(tmp_path / "t.jsonl", recs)
    with pytest.raises(TableError) as plain:
        read_table(path)
    with pytest.raises(TableError) as shared:
        _columnar(path)
    assert shared.value.problems == plain.value.problems
    a, ex_a = read_table(path, skip_invalid=True)
    b, ex_b = _columnar(path, skip_invalid=True)
    assert _plain(a).equals(_plain(b)) and ex_a.to_dict() == ex_b.to_dict()


def test_cli_reads_a_large_jsonl_table_lean(tmp_path, monkeypatch):
    # `judgebias analyze big.jsonl`: counted by its lines, read by Arrow without its response texts,
    # the same figures as the same table in Parquet.
    from typer.testing import CliRunner

    import judgebias.tables.for_analysis
    from judgebias.cli import app

    monkeypatch.setattr(judgebias.tables.for_analysis, "JSONL_COLUMNAR_BYTES", 0)
    # Its MLflow store (and anything else written to the working directory) in tmp_path, not in the
    # checkout the suite runs from (./mlflow.db and ./mlruns were left there).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    calls = []
    real = judgebias.tables.for_analysis.read_for_analysis

    def spy(path, **kwargs):
        table, exclusions = real(path, **kwargs)
        calls.append((kwargs.get("response_features"), isinstance(table["prompt"].dtype, pd.CategoricalDtype),
                      "response_a" in table.columns))
        return table, exclusions

    monkeypatch.setattr(judgebias.tables.for_analysis, "read_for_analysis", spy)
    table = synthetic(30)  # 90 rows: more than traces are drawn for
    outs = []
    for suffix in ("jsonl", "parquet"):
        path = write_table(table, tmp_path / f"t.{suffix}")
        out = tmp_path / f"m_{suffix}.json"
        result = CliRunner().invoke(app, ["analyze", str(path), "--out", str(out), "--reps", "100"])
        assert result.exit_code == 0, result.output
        outs.append(json.loads(out.read_text()))
    assert calls[0] == (response_features, True, False)
    assert outs[0] == outs[1]
    assert (tmp_path / "mlflow.db").exists()  # the runs were logged, here


def test_response_texts_read_back_for_traces(tmp_path, monkeypatch):
    # A lean read that --skip-invalid shrank to a few rows gets its texts back from the JSONL file.
    import judgebias.tables.for_analysis
    from judgebias.tables.for_analysis import with_response_texts

    monkeypatch.setattr(judgebias.tables.for_analysis, "JSONL_COLUMNAR_BYTES", 0)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    recs = _records()
    for r in recs[3:]:
        r["p_a"] = 2.0  # invalid: skipped
    path = _write(tmp_path / "t.jsonl", recs)
    lean, _ = read_for_analysis(path, skip_invalid=True, response_features=response_features)
    assert len(lean) == 3 and "response_a" not in lean.columns
    full, _ = read_table(path, skip_invalid=True)
    back = with_response_texts(lean, path)
    assert back["response_a"].tolist() == full["response_a"].tolist()
    assert back["response_b"].tolist() == full["response_b"].tolist()
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary Parquet files are gone
