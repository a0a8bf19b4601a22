"""How a judge's two presentation orders of a pair fold into one verdict.

Every judge is asked twice, A first and B first; the judgment table keeps both (``verdict_ab``/
``verdict_ba`` and, for judges with probabilities, ``p_a_ab``/``p_a_ba``) and one ``verdict``. The
rule that makes the one from the two changed 3-class agreement by up to 0.12 on real data, so it is
one documented rule, applied by the pipeline, every importer and the table validator, and recorded
per row in ``fold_rule``:

* ``agree-else-tie``: the verdict both orders give; a verdict that changes with the order is a tie
  (the DBG paper's rule for API judges, A.1; LLMBar's and MT-bench's released judgments).
* ``mean-probability``: the verdict of P(A) averaged over both orders (the self-preference paper's
  Eq. 3): > 0.5 is A, < 0.5 is B, exactly 0.5 a tie. Needs both per-order probabilities.
* ``auto`` (the default): ``mean-probability`` where both orders have a probability, otherwise
  ``agree-else-tie``; what the pipeline has always done, so tables written before the rule
  existed validate unchanged.

A per-order verdict missing where that order's probability exists is read off the probability.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
import pandas as pd

FoldRule = Literal["auto", "agree-else-tie", "mean-probability"]
FOLD_RULES: tuple[str, ...] = get_args(FoldRule)
DEFAULT_FOLD: FoldRule = "auto"
AGREE, MEAN = "agree-else-tie", "mean-probability"


def check_rule(rule: str) -> FoldRule:
    if rule not in FOLD_RULES:
        raise ValueError(f"unknown fold rule {rule!r}; known: {', '.join(FOLD_RULES)}")
    return rule  # type: ignore[return-value]


# One object per verdict, shared by every row: a numpy string array cast to object made a string
# object per row (about 50 bytes each, 0.4 GB for the verdicts of ten million rows).
VERDICT_OF_CODE = np.array(["a", "b", "tie", None], dtype=object)
NO_VERDICT = 3  # the code of "no verdict"
_CODE_OF_VERDICT = {"a": 0, "b": 1, "tie": 2}
APPLIED_OF_CODE = np.array([AGREE, MEAN, None], dtype=object)  # -1 (none) reads the last


def _from_p_codes(p: np.ndarray) -> np.ndarray:
    code = np.where(p > 0.5, 0, np.where(p < 0.5, 1, 2)).astype(np.int8)
    code[np.isnan(p)] = NO_VERDICT
    return code


def verdict_codes(values, column: str = "verdict", missing: int = NO_VERDICT) -> np.ndarray:
    """"a" / "b" / "tie" / missing -> 0 / 1 / 2 / ``missing`` (int8), hashed once per distinct value
    (the few labels then mapped in Python); anything else is a ValueError naming ``column``."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object) if isinstance(values, np.ndarray)
                                  else values, use_na_sentinel=True)
    lut = np.full(len(uniques) + 1, missing, dtype=np.int8)  # the NA sentinel (-1) reads the last
    for i, u in enumerate(uniques):
        if u not in _CODE_OF_VERDICT:
            raise ValueError(f"column {column!r}: label {u!r} is not 'a', 'b' or 'tie' "
                             "(validate the table with judgebias.tables.pairwise.validate first)")
        lut[i] = _CODE_OF_VERDICT[u]
    return lut[codes]


def _column(df: pd.DataFrame, name: str, kind: type) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), np.nan) if kind is float else np.full(len(df), None, dtype=object)
    if kind is float:
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
    values = df[name].to_numpy(dtype=object).copy()
    values[pd.isna(df[name]).to_numpy()] = None
    return values


def fold(df: pd.DataFrame, rules: str | np.ndarray = DEFAULT_FOLD) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, applied rule) per row of a table from its per-order columns; see ``fold_arrays``."""
    verdict, applied = fold_frame_codes(df, rules)
    return VERDICT_OF_CODE[verdict], APPLIED_OF_CODE[applied]


def fold_frame_codes(df: pd.DataFrame, rules: str | np.ndarray = DEFAULT_FOLD
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``fold`` as codes: (verdict 0 / 1 / 2 / 3 = a / b / tie / none, applied rule 0 / 1 / -1 =
    agree-else-tie / mean-probability / none), int8, without an object per row."""
    none = np.full(len(df), NO_VERDICT, dtype=np.int8)
    v_ab = verdict_codes(df["verdict_ab"], "verdict_ab") if "verdict_ab" in df.columns else none
    v_ba = verdict_codes(df["verdict_ba"], "verdict_ba") if "verdict_ba" in df.columns else none
    return fold_codes(v_ab, v_ba, _column(df, "p_a_ab", float), _column(df, "p_a_ba", float), rules)


def fold_arrays(v_ab: np.ndarray, v_ba: np.ndarray, p_ab: np.ndarray, p_ba: np.ndarray,
                rules: str | np.ndarray = DEFAULT_FOLD) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, applied rule) per row; both None where a row has not both orders to fold (nothing
    to fold, or ``mean-probability`` without both probabilities).

    Verdicts are "a" | "b" | "tie" | None in original terms, probabilities P(A) per order (NaN when
    absent). ``rules`` is one rule for every row or one per row. The applied rule is never
    ``auto``: it is the rule that decided the row.
    """
    v_ab = verdict_codes(np.asarray(v_ab, dtype=object), "verdict_ab")
    v_ba = verdict_codes(np.asarray(v_ba, dtype=object), "verdict_ba")
    verdict, applied = fold_codes(v_ab, v_ba, p_ab, p_ba, rules)
    return VERDICT_OF_CODE[verdict], APPLIED_OF_CODE[applied]


def fold_codes(v_ab: np.ndarray, v_ba: np.ndarray, p_ab: np.ndarray, p_ba: np.ndarray,
               rules: str | np.ndarray = DEFAULT_FOLD) -> tuple[np.ndarray, np.ndarray]:
    """``fold_arrays`` on verdict codes (``verdict_codes``); returns ``fold_frame_codes``'s codes."""
    n = len(v_ab)
    p_ab, p_ba = np.asarray(p_ab, dtype=float), np.asarray(p_ba, dtype=float)
    if isinstance(rules, str):
        check_rule(rules)
        is_mean, is_auto = np.full(n, rules == MEAN), np.full(n, rules == "auto")
    else:
        rule_code, distinct = pd.factorize(np.asarray(rules, dtype=object), use_na_sentinel=False)
        for rule in distinct:  # the distinct rules, not a Python list of every row's
            check_rule(rule)
        is_mean = np.asarray([r == MEAN for r in distinct], dtype=bool)[rule_code]
        is_auto = np.asarray([r == "auto" for r in distinct], dtype=bool)[rule_code]
    v_ab = np.where(v_ab == NO_VERDICT, _from_p_codes(p_ab), v_ab)
    v_ba = np.where(v_ba == NO_VERDICT, _from_p_codes(p_ba), v_ba)
    both_p = ~np.isnan(p_ab) & ~np.isnan(p_ba)
    both_v = (v_ab != NO_VERDICT) & (v_ba != NO_VERDICT)
    use_mean = both_p & (is_mean | is_auto)
    use_agree = both_v & ~use_mean & ~is_mean
    verdict = np.full(n, NO_VERDICT, dtype=np.int8)
    verdict[use_agree] = np.where(v_ab[use_agree] == v_ba[use_agree], v_ab[use_agree], 2)
    verdict[use_mean] = _from_p_codes((p_ab[use_mean] + p_ba[use_mean]) / 2)
    applied = np.full(n, -1, dtype=np.int8)
    applied[use_agree], applied[use_mean] = 0, 1
    return verdict, applied


def refold(df: pd.DataFrame, rule: str) -> pd.DataFrame:
    """The table with ``verdict`` and ``fold_rule`` recomputed under ``rule`` wherever a row has
    both orders; rows without them keep their verdict. Raises ``ValueError`` naming the rows that
    ``rule`` cannot fold although they have per-order verdicts (``mean-probability`` without
    probabilities)."""
    check_rule(rule)
    verdict, applied = fold(df, rule)
    has_orders = ~pd.isna(_column(df, "verdict_ab", str)) | ~np.isnan(_column(df, "p_a_ab", float))
    unfolded = np.flatnonzero(has_orders & pd.isna(applied))
    if unfolded.size and rule == MEAN:
        rows = ", ".join(str(i + 1) for i in unfolded[:10])
        raise ValueError(f"fold rule {rule!r} needs p_a_ab and p_a_ba; {unfolded.size} row(s) with per-order "
                         f"verdicts have none (rows {rows}{', ...' if unfolded.size > 10 else ''}); "
                         f"use {AGREE!r} or 'auto' for verdict-only judges")
    done = ~pd.isna(applied)
    old_verdict = _column(df, "verdict", str)
    old_rule = _column(df, "fold_rule", str)
    return df.assign(verdict=pd.Series(np.where(done, verdict, old_verdict), index=df.index, dtype=object),
                     fold_rule=pd.Series(np.where(done, applied, old_rule), index=df.index, dtype=object))
