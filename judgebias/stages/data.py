"""Stage inputs: the instruction set, its hash and seeded subsets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

from judgebias.config.experiment import BUNDLED_DATASETS, ExperimentConfig, bundled_file
from judgebias.runs.layout import RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import frame, stage_output
from judgebias.tables.files import iter_jsonl


def dataset_path(source: str) -> Path:
    if source in BUNDLED_DATASETS:
        return bundled_file(BUNDLED_DATASETS[source])
    return Path(source)


def read_instructions(path: str | Path) -> pd.DataFrame:
    """Instructions from JSONL (``instruction`` required; ``id``/``category`` optional); errors name
    the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: dataset file does not exist")
    rows = []
    for line_no, obj in iter_jsonl(path):
        text = obj.get("instruction")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:{line_no}: field 'instruction' must be a non-empty string")
        rows.append(
            {
                "instruction_id": str(obj.get("id", f"row-{line_no}")),
                "category": str(obj.get("category") or ""),
                "instruction": text,
            }
        )
    ids = [r["instruction_id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate instruction ids")
    if not rows:
        raise ValueError(f"{path}: no instructions")
    return pd.DataFrame(rows)


def check_sample(cfg: ExperimentConfig, df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The dataset's instructions; a ValueError saying how many exist when ``dataset.sample`` asks for
    more (a silent "all of them" would run a different experiment than the config says)."""
    path = dataset_path(cfg.dataset.source)
    df = read_instructions(path) if df is None else df
    if cfg.dataset.sample is not None and cfg.dataset.sample > len(df):
        raise ValueError(f"dataset.sample is {cfg.dataset.sample} but {path} holds {len(df)} instructions: "
                         f"ask for at most {len(df)}, or leave sample out to use them all")
    return df


def load_instructions(cfg: ExperimentConfig, store: RunStore) -> pd.DataFrame:
    def compute(info: dict) -> pd.DataFrame:
        df = subset(check_sample(cfg), cfg.dataset.sample, cfg.dataset.seed)
        info["n"] = len(df)
        return df

    return stage_output(store, frame(RunLayout.instructions), "load_instructions", compute)


def data_hash(df: pd.DataFrame) -> str:
    import hashlib

    doc = json.dumps(df[["instruction_id", "instruction"]].to_dict(orient="records"), sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def subset(df: pd.DataFrame, n: int | None, seed: int) -> pd.DataFrame:
    """The first ``n`` instructions of a seeded shuffle (ablations run on a sub-sample)."""
    if n is None or n >= len(df):
        return df
    keep = sorted(random.Random(seed).sample(range(len(df)), n))
    return df.iloc[keep].reset_index(drop=True)

