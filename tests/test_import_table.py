"""``judgebias import table FILE``: any judgment table, labels re-spelled and counted, one fold rule."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from judgebias.importers import import_dataset
from judgebias.tables.pairwise import TableError

CSV = (
    "pair_id,prompt,response_a,response_b,judge,verdict_ab,verdict_ba,human\n"
    '1,q,x,y,gpt,A,Tie,"tie (bothbad)|A"\n'
    "2,q2,u,v,gpt,model_b,model_b,B\n"
)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_table_in_any_format_is_folded_and_its_spellings_counted(tmp_path, suffix):
    src = tmp_path / "t.csv"
    src.write_text(CSV)
    if suffix != ".csv":
        df = pd.read_csv(src, dtype=str)
        df["human"] = df["human"].str.split("|")
        src = tmp_path / f"t{suffix}"
        df.to_json(src, orient="records", lines=True) if suffix == ".jsonl" else df.to_parquet(src)
    table, exclusions = import_dataset("table", src)
    # row 1: A then Tie -> orders disagree -> tie; row 2: B both orders -> b
    assert table["verdict"].tolist() == ["tie", "b"]
    assert table["human"].tolist() == [["tie", "a"], ["b"]]
    recoded = exclusions.to_dict()
    assert (
        recoded["recoded:verdict_ab_spelled_A"] == 1 and recoded["recoded:human_spelled_tie (bothbad)"] == 1
    )
    assert recoded["recoded:verdict_ba_spelled_model_b"] == 1


def test_empty_files_and_contradictions_are_named(tmp_path):
    for text in ("", "pair_id,prompt,response_a,response_b\n"):
        (tmp_path / "e.csv").write_text(text)
        with pytest.raises(TableError, match="the file holds no rows: it is empty"):
            import_dataset("table", tmp_path / "e.csv")
    (tmp_path / "c.csv").write_text(
        "pair_id,prompt,response_a,response_b,judge,verdict_ab,verdict_ba,verdict\n1,q,x,y,j,a,b,a\n"
    )
    with pytest.raises(TableError, match=r"row 1, field 'verdict': 'a' contradicts its orders"):
        import_dataset("table", tmp_path / "c.csv")


def test_cli_import_table(tmp_path):
    from judgebias.cli import app

    (tmp_path / "t.csv").write_text(CSV)
    res = CliRunner().invoke(
        app, ["import", "table", str(tmp_path / "t.csv"), "-o", str(tmp_path / "t.jsonl")]
    )
    assert res.exit_code == 0, res.output
    assert "recoded (kept):" in res.output and "human_spelled_B: 1" in res.output
    bad = CliRunner().invoke(
        app,
        [
            "import",
            "table",
            str(tmp_path / "t.csv"),
            "-o",
            str(tmp_path / "u.jsonl"),
            "--fold",
            "mean-probability",
        ],
    )
    assert bad.exit_code == 2 and "needs p_a_ab and p_a_ba" in bad.output
