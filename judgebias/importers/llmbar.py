"""LLMBar (princeton-nlp/LLMBar ``Dataset/``): ``<subset>/dataset.json`` (input, output_1, output_2,
gold ``label`` 1 or 2) and ``<subset>/evaluators/<model>/<strategy>/result.json``.

The real layout (checked against the files and their ``statistics.json``): ``Vanilla`` and ``Swap``
are two prompting STRATEGIES of the paper, not two orders. Every result record holds both
presentation orders itself, ``{"swap = False": ..., "swap = True": ...}``, and its ``winner`` is
already in the original order ("1" = output_1). The ``Swap`` strategy adds a second round (a
synthesis prompt that sees both first-round explanations) when the first two disagree; the LAST
round is the strategy's answer (it reproduces the published ``equal`` statistic: 89/100 for
ChatGPT/Swap, where the first round agrees on 62).

* ``judge`` = ``<model>/<strategy>`` (e.g. ``GPT-4/Vanilla``); ``judge_model``/``judge_strategy``
  carry the parts.
* ``verdict_ab`` = winner with output_1 shown first, ``verdict_ba`` = winner with output_1 shown
  second (original terms); ``verdict`` folded from them by ``judgebias.tables.folding`` (by default the
  common verdict, a tie when they differ).
* ``human`` = [LLMBar's expert label] (not a "gold" in judgebias's sense: gold is a panel of
  judges); ``pair_id`` = ``llmbar/<subset>/<position in dataset.json>``.
* result records are matched to dataset.json by position and must repeat its input, outputs and
  label; any difference is an error naming the file and row.
"""

from __future__ import annotations

from pathlib import Path

from judgebias.importers._common import finish, get, label, load_records, text_problem
from judgebias.tables.pairwise import Exclusions, TableError

ORDERS = {"swap = False": "verdict_ab", "swap = True": "verdict_ba"}
CHECKED = ("input", "output_1", "output_2", "label")


def _subsets(src: Path) -> list[Path]:
    if src.is_file() and src.name == "dataset.json":
        return [src.parent]
    if (src / "dataset.json").is_file():
        return [src]
    found = sorted(p.parent for p in src.glob("*/dataset.json")) if src.is_dir() else []
    if not found:
        raise TableError(str(src), ["no dataset.json here nor in a sub-folder"])
    return found


def _final_round(path: Path, row: int, results) -> dict[str, object]:
    """The per-order winners of the last round of one result record."""
    if not isinstance(results, list) or not results or not isinstance(results[-1], dict):
        raise TableError(str(path), [f"row {row}, field 'results': expected a non-empty list of rounds"])
    last = results[-1]
    out = {}
    for key, column in ORDERS.items():
        entry = last.get(key)
        if not isinstance(entry, dict) or "winner" not in entry:
            raise TableError(str(path), [f"row {row}, field 'results': last round has no {key!r} winner"])
        out[column] = label(entry["winner"], path, row, f"results[-1][{key!r}].winner")
    return out


def _evaluator_results(subset: Path, dataset: list[dict]) -> dict[str, list[dict]]:
    """judge name -> per-pair {verdict_ab, verdict_ba, rounds}, aligned with dataset.json."""
    judges = {}
    for path in sorted(subset.glob("evaluators/*/*/result.json")):
        records = load_records(path)
        if len(records) != len(dataset):
            raise TableError(str(path), [f"has {len(records)} rows but {subset / 'dataset.json'} has "
                                         f"{len(dataset)}"])
        per_pair = []
        for row, (rec, ref) in enumerate(zip(records, dataset, strict=True), 1):
            for name in CHECKED:
                if get(rec, name, path, row) != ref[name]:
                    raise TableError(str(path), [f"row {row}, field {name!r}: differs from dataset.json row "
                                                 f"{row}; result rows must follow dataset.json's order"])
            results = get(rec, "results", path, row)
            per_pair.append({**_final_round(path, row, results), "rounds": len(results)})
        judges[f"{path.parent.parent.name}/{path.parent.name}"] = per_pair
    return judges


def import_llmbar(src: Path, **_: object):
    """Import one LLMBar subset folder (with dataset.json) or a folder of subsets."""
    src = Path(src)
    exclusions = Exclusions()
    rows = []
    for subset in _subsets(src):
        ds_path = subset / "dataset.json"
        dataset = load_records(ds_path)
        for row, rec in enumerate(dataset, 1):
            for name in CHECKED:
                get(rec, name, ds_path, row)
        judges = _evaluator_results(subset, dataset)
        for row, rec in enumerate(dataset, 1):
            where = f"{subset.name} row {row}"
            problem = next((f"{name}_{p}" for name in ("input", "output_1", "output_2")
                            if (p := text_problem(rec[name]))), None)
            if problem:
                exclusions.add(problem, example=where)
                continue
            gold = label(rec["label"], ds_path, row, "label")
            base = {"pair_id": f"llmbar/{subset.name}/{row - 1}", "prompt": rec["input"],
                    "response_a": rec["output_1"], "response_b": rec["output_2"],
                    "human": [gold] if gold else [], "source": f"llmbar/{subset.name}"}
            if not judges:
                rows.append({**base, "judge": None})
            for judge, per_pair in judges.items():
                v = per_pair[row - 1]
                ab, ba = v["verdict_ab"], v["verdict_ba"]
                if ab is None or ba is None:
                    exclusions.add("verdict_missing_in_one_order", example=f"{judge} {where}")
                model, strategy = judge.split("/")
                # ``verdict`` is folded from the two orders by the table's one rule (validate).
                rows.append({**base, "judge": judge, "verdict_ab": ab, "verdict_ba": ba,
                             "judge_model": model, "judge_strategy": strategy, "judge_rounds": v["rounds"]})
    return finish(rows, str(src), exclusions)
