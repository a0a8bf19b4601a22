"""Importers: real datasets -> judgment tables.

Each importer is a pure function ``(src: Path, **opts) -> (DataFrame, Exclusions)`` returning a
table that passes ``judgebias.tables.pairwise.validate``; records it had to leave out are counted by reason,
and values it re-spelled are counted under ``recoded:`` reasons (see ``_common``). Options an
importer does not use are ignored, so one CLI can pass the same options to all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from judgebias.importers._common import split_counts
from judgebias.importers.alpaca_eval import import_alpaca_eval
from judgebias.importers.arena import import_arena
from judgebias.importers.hh_rlhf import import_hh_rlhf
from judgebias.importers.llmbar import import_llmbar
from judgebias.importers.mt_bench_human import import_mt_bench_human
from judgebias.importers.mt_bench_single import import_mt_bench_single
from judgebias.importers.pandalm import import_pandalm
from judgebias.importers.table_file import import_table
from judgebias.tables.folding import DEFAULT_FOLD, refold
from judgebias.tables.pairwise import Exclusions, TableError

Importer = Callable[..., tuple[pd.DataFrame, Exclusions]]

IMPORTERS: dict[str, Importer] = {
    "pandalm": import_pandalm,
    "alpaca-eval": import_alpaca_eval,
    "llmbar": import_llmbar,
    "hh-rlhf": import_hh_rlhf,
    "arena": import_arena,
    "mt-bench-human": import_mt_bench_human,
    "mt-bench-single": import_mt_bench_single,
    "table": import_table,
}


def import_dataset(fmt: str, src: Path | str, *, judge_generator: Mapping[str, str] | None = None,
                   fold_rule: str = DEFAULT_FOLD, **opts: object) -> tuple[pd.DataFrame, Exclusions]:
    """Run the importer named ``fmt``.

    ``judge_generator`` maps a judge name as it appears in the data to the generator name of the
    model behind it (e.g. ``weighted_alpaca_eval_gpt4_turbo`` -> ``gpt4_1106_preview``); it fills
    the ``judge_generator`` column that self-preference analysis uses to find a judge's own
    outputs. Judge names themselves stay as the source wrote them.
    """
    try:
        importer = IMPORTERS[fmt]
    except KeyError:
        raise TableError(str(src), [f"unknown format {fmt!r}; known: {', '.join(sorted(IMPORTERS))}"]
                         ) from None
    table, exclusions = importer(src if str(src).startswith("hf:") else Path(src), **opts)
    return finish_import(table, exclusions, str(src), judge_generator=judge_generator, fold_rule=fold_rule)


def finish_import(table: pd.DataFrame, exclusions: Exclusions, source: str, *,
                  judge_generator: Mapping[str, str] | None = None,
                  fold_rule: str = DEFAULT_FOLD) -> tuple[pd.DataFrame, Exclusions]:
    """The steps every import ends with, whoever read the data (an importer here, or a reader
    outside the domain core such as ``judgebias import mlflow``): refold, then ``judge_generator``."""
    src = source
    if fold_rule != DEFAULT_FOLD:
        try:
            table = refold(table, fold_rule)
        except ValueError as exc:
            raise TableError(str(src), [str(exc)]) from None
    if judge_generator:
        unknown = sorted(set(judge_generator) - set(table["judge"].dropna()))
        if unknown:
            raise TableError(str(src), [f"judge_generator names judge(s) not in the data: {unknown} "
                                        f"(judges: {sorted(table['judge'].dropna().unique())})"])
        table = table.assign(judge_generator=table["judge"].map(lambda j: judge_generator.get(j)))
    return table, exclusions


__all__ = ["IMPORTERS", "finish_import", "import_dataset", "split_counts"]
