"""PandaLM test set (WeOpenML/PandaLM ``data/``): 999 instruction pairs with three human annotators
and the verdicts of LLM judges in ``<judge>-testset-v1.json`` files next to it.

* ``pair_id`` = ``pandalm/<idx>`` (the test set's own ``idx``).
* ``prompt`` = instruction, then the input (when there is one) after a blank line.
* generators from ``cmp_key`` ``<model of response1>_<model of response2>``; model names are
  recovered from the set of all keys, so a name containing ``_`` still splits correctly.
* ``human`` = the three annotators' labels (1 -> a, 2 -> b, 0 -> tie), kept as a list; the
  table's ``majority`` (more than half) gives the label, and three different labels give none.
* verdict files are matched to the test set by ``idx`` (not position); a verdict file whose idx
  set differs from the test set's is an error naming the file and row.

Real quirks handled (counted): responses that JSON stored as the boolean ``true`` instead of the
text the model wrote (pair left out: the exact text is unknown), empty responses (pair left out),
a verdict ``"garbage"`` (row kept, no verdict, ``judge_error`` says why), ties spelled ``0`` and
``"Tie"`` and any other spelling than ``1``/``2`` of a and b, such as ``"A"`` (recoded, counted).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from judgebias.importers._common import RECODED, finish, get, label, load_records, text_problem
from judgebias.tables.labels import normalize_label
from judgebias.tables.pairwise import Exclusions, TableError

TESTSET = "testset-v1.json"
ANNOTATORS = ("annotator1", "annotator2", "annotator3")
GARBAGE = "garbage"


def split_cmp_keys(keys: set[str], path: Path | str = TESTSET) -> dict[str, tuple[str, str]]:
    """Map each ``cmp_key`` to its (generator of response1, generator of response2).

    Keys with one ``_`` split there. A key with several splits at the one position where a half is
    a model name already known from another key (repeated until nothing changes, so names learnt
    from one key resolve the next); a key that still has no single such position raises.
    """
    out: dict[str, tuple[str, str]] = {}
    known: set[str] = set()
    for key in keys:
        if key.count("_") == 1:
            out[key] = tuple(key.split("_"))  # type: ignore[assignment]
            known.update(out[key])
    progress = True
    while progress:
        progress = False
        for key in sorted(keys - out.keys()):
            cuts = [i for i, ch in enumerate(key) if ch == "_"]
            fits = [(key[:i], key[i + 1:]) for i in cuts if key[:i] in known or key[i + 1:] in known]
            if len(fits) == 1:
                out[key] = fits[0]
                known.update(fits[0])
                progress = True
    unresolved = sorted(keys - out.keys())
    if unresolved:
        raise TableError(str(path), [f"field 'cmp_key': cannot tell the two model names apart in {k!r} "
                                     "(no single '_' with a model name known from the other keys)"
                                     for k in unresolved])
    bad = [k for k, (a, b) in out.items() if not a or not b]
    if bad:
        raise TableError(str(path), [f"field 'cmp_key': empty model name in {bad[0]!r}"])
    return out


def _verdict_field(path: Path, rec: dict) -> str:
    fields = [k for k in rec if k.endswith("_result")]
    if len(fields) != 1:
        found = fields or "none"
        raise TableError(str(path), [f"row 1: expected exactly one '*_result' field, found {found}"])
    return fields[0]


def read_verdicts(path: Path, expected_idx: list[int]) -> dict[int, dict]:
    """Verdict records keyed by ``idx``; every test-set idx must appear exactly once."""
    records = load_records(path)
    if len(records) != len(expected_idx):
        raise TableError(str(path), [f"has {len(records)} rows but {TESTSET} has {len(expected_idx)}"])
    if not records:
        return {}
    result_field = _verdict_field(path, records[0])
    expected = set(expected_idx)
    by_idx: dict[int, dict] = {}
    for row, rec in enumerate(records, 1):
        idx = get(rec, "idx", path, row)
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TableError(str(path), [f"row {row}, field 'idx': {idx!r} is not an integer"])
        if idx in by_idx:
            raise TableError(str(path), [f"row {row}, field 'idx': {idx} appears twice"])
        if idx not in expected:
            raise TableError(str(path), [f"row {row}, field 'idx': {idx} is not in {TESTSET}"])
        by_idx[idx] = {"raw": get(rec, result_field, path, row), "row": row,
                       "reason": rec.get(result_field.replace("_result", "_reason"))}
    return by_idx


def _judge_verdict(raw, path: Path, row: int, exclusions: Exclusions) -> tuple[str | None, str | None]:
    """(verdict, judge_error) for one raw verdict."""
    if isinstance(raw, str) and raw.strip().lower() == GARBAGE:
        exclusions.add("verdict_garbage", example=f"{path.name} row {row}")
        return None, f"judge answered {raw!r}"
    try:
        verdict = normalize_label(raw)
    except ValueError:
        raise TableError(str(path), [f"row {row}: verdict {raw!r} is neither 1, 2, a tie nor 'garbage'"]
                         ) from None
    if verdict is None:
        exclusions.add("verdict_missing", example=f"{path.name} row {row}")
        return None, "no verdict"
    native = str(raw).strip() in ("1", "2")  # the test set's own spelling of a and b
    if verdict == "tie" or not native:
        exclusions.add(f"{RECODED}verdict_{verdict}_spelled_{raw!s}")
    return verdict, None


def import_pandalm(src: Path, **_: object):
    """Import a PandaLM data folder (or its ``testset-v1.json``) with every judge file beside it."""
    src = Path(src)
    folder = src.parent if src.is_file() else src
    testset_path = folder / TESTSET
    records = load_records(testset_path)
    exclusions = Exclusions()

    for row, rec in enumerate(records, 1):
        for name in ("idx", "cmp_key", "instruction", "input", "response1", "response2", *ANNOTATORS):
            get(rec, name, testset_path, row)
    idx_list = [rec["idx"] for rec in records]
    dup = [i for i, n in Counter(idx_list).items() if n > 1]
    if dup:
        raise TableError(str(testset_path), [f"field 'idx': {dup[0]!r} appears more than once"])
    generators = split_cmp_keys({rec["cmp_key"] for rec in records}, testset_path)

    judge_files = sorted(p for p in folder.glob(f"*-{TESTSET}") if p.name != TESTSET)
    judges = {p.name[: -len(f"-{TESTSET}")]: (p, read_verdicts(p, idx_list)) for p in judge_files}

    rows = []
    for row, rec in enumerate(records, 1):
        where = f"idx {rec['idx']}"
        problem = next((f"pair_{what}_{p}" for what in ("response1", "response2")
                        if (p := text_problem(rec[what]))), None)
        instruction = rec["instruction"].strip() if isinstance(rec["instruction"], str) else ""
        extra = rec["input"].strip() if isinstance(rec["input"], str) else ""
        prompt = f"{instruction}\n\n{extra}" if instruction and extra else instruction or extra
        if problem is None and not prompt:
            problem = "pair_prompt_empty"
        if problem:
            exclusions.add(problem, example=where)
            continue

        human = []
        for name in ANNOTATORS:
            value = label(rec[name], testset_path, row, name)
            if value == "tie":
                exclusions.add(f"{RECODED}human_tie_spelled_{rec[name]!s}")
            if value is not None:
                human.append(value)
        gen_a, gen_b = generators[rec["cmp_key"]]
        base = {
            "pair_id": f"pandalm/{rec['idx']}", "prompt": prompt,
            "response_a": rec["response1"], "response_b": rec["response2"],
            "generator_a": gen_a, "generator_b": gen_b, "human": human,
            "source": "pandalm", "source_idx": rec["idx"], "instruction": rec["instruction"],
            "input": rec["input"], "motivation_app": rec.get("motivation_app"),
        }
        if not judges:
            rows.append({**base, "judge": None})
        for judge, (path, verdicts) in judges.items():
            v = verdicts[rec["idx"]]
            verdict, error = _judge_verdict(v["raw"], path, v["row"], exclusions)
            rows.append({**base, "judge": judge, "verdict": verdict, "judge_error": error,
                         "raw_verdict": str(v["raw"]), "judge_reason": v["reason"]})
    return finish(rows, str(testset_path), exclusions)

