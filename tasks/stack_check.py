"""The task of the stack-check flow (``judgebias.flows.stack_check``): one judgment table validated
and counted."""

from __future__ import annotations

from prefect import task


@task
def summarize_table(path: str) -> dict:
    from judgebias.tables.files import read_table
    from judgebias.tables.pairwise import human_label

    df, exclusions = read_table(path, skip_invalid=True)
    judges = sorted(j for j in df["judge"].dropna().unique())
    return {
        "path": path,
        "rows": len(df),
        "pairs": int(df["pair_id"].nunique()),
        "judges": judges,
        "rows_with_human_majority": int(human_label(df).notna().sum()),
        "rows_with_p_a": int(df["p_a"].notna().sum()),
        "exclusions": exclusions.to_dict(),
    }
