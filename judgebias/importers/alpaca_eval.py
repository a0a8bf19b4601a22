"""AlpacaEval results (tatsu-lab/alpaca_eval ``results/``): ``<model>/model_outputs.json`` and
``<model>/<annotator>/annotations.json``.

* One row per (annotation record, annotator): ``judge`` is the annotator config name as written
  in the file (e.g. ``weighted_alpaca_eval_gpt4_turbo``); names are kept faithful, mapping an
  annotator to the model behind it is the ``judge_generator`` option of the import command.
* A = ``output_1`` by ``generator_1`` (the baseline, ``gpt4_1106_preview`` in the public results),
  B = ``output_2`` by ``generator_2``.
* ``preference`` in [1, 2] is 1 + P(output_2 wins), so ``p_a = 2 - preference``. AlpacaEval shows
  the two outputs in a random order it does not record, so only ``p_a`` is filled (not the per-order
  columns).
* ``pair_id`` = ``alpaca_eval/<generator_1>/<generator_2>/<sha256(instruction)[:12]>``: the
  results carry no per-instruction id, and the instruction text is what identifies it across
  models and annotators.

Quirks handled (counted): identical outputs, which AlpacaEval never sends to the judge and scores
1.5 itself (``raw_completion`` null): that is not a judgment, so the row is left out; missing or
null preference (left out); preference outside [1, 2] (error); ``output_2`` differing from
``<model>/model_outputs.json`` (kept: the annotation is what the judge saw; counted).
"""

from __future__ import annotations

import math
from pathlib import Path

from judgebias.importers._common import RECODED, finish, get, load_records, short_hash, text_problem
from judgebias.tables.pairwise import Exclusions, TableError

FIELDS = ("instruction", "output_1", "output_2", "generator_1", "generator_2", "preference")


def _model_dirs(src: Path) -> list[Path]:
    if not src.is_dir():
        raise TableError(str(src), ["not a folder (expected <model>/<annotator>/annotations.json inside)"])
    if (src / "model_outputs.json").is_file():  # one model's folder
        return [src]
    return sorted(p for p in src.iterdir() if p.is_dir())


def _outputs_by_instruction(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    out = {}
    for row, rec in enumerate(load_records(path), 1):
        out[get(rec, "instruction", path, row)] = get(rec, "output", path, row)
    return out


def _preference(value, path: Path, row: int) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        pref = float(value)
    except (TypeError, ValueError):
        raise TableError(str(path), [f"row {row}, field 'preference': {value!r} is not a number"]) from None
    if math.isnan(pref):
        return None
    if not 1.0 <= pref <= 2.0:
        raise TableError(str(path), [f"row {row}, field 'preference': {pref} is outside [1, 2]"])
    return pref


def import_alpaca_eval(src: Path, **_: object):
    """Import every ``annotations.json`` under an AlpacaEval results folder (or one model's folder)."""
    src = Path(src)
    exclusions = Exclusions()
    rows = []
    n_files = 0
    for model_dir in _model_dirs(src):
        outputs = _outputs_by_instruction(model_dir / "model_outputs.json")
        for ann_path in sorted(model_dir.glob("*/annotations.json")):
            n_files += 1
            for row, rec in enumerate(load_records(ann_path), 1):
                values = {name: get(rec, name, ann_path, row) for name in FIELDS}
                where = f"{model_dir.name}/{ann_path.parent.name} row {row}"
                annotator = rec.get("annotator") or ann_path.parent.name
                problem = next((f"{name}_{p}" for name in ("instruction", "output_1", "output_2")
                                if (p := text_problem(values[name]))), None)
                if problem:
                    exclusions.add(problem, example=where)
                    continue
                if values["output_1"] == values["output_2"] and rec.get("raw_completion") is None:
                    exclusions.add("identical_outputs_not_judged", example=where)
                    continue
                pref = _preference(values["preference"], ann_path, row)
                if pref is None:
                    exclusions.add("preference_missing", example=where)
                    continue
                expected = outputs.get(values["instruction"])
                if expected is not None and expected != values["output_2"]:
                    exclusions.add(f"{RECODED}output_2_differs_from_model_outputs", example=where)
                gen_a, gen_b = str(values["generator_1"]), str(values["generator_2"])
                rows.append({
                    "pair_id": f"alpaca_eval/{gen_a}/{gen_b}/{short_hash(values['instruction'])}",
                    "prompt": values["instruction"], "response_a": values["output_1"],
                    "response_b": values["output_2"], "generator_a": gen_a, "generator_b": gen_b,
                    "judge": annotator, "p_a": 2.0 - pref, "preference": pref,
                    "source": "alpaca_eval", "source_dataset": rec.get("dataset"),
                })
    if n_files == 0:
        raise TableError(str(src), ["no <model>/<annotator>/annotations.json found"])
    return finish(rows, str(src), exclusions)
