"""Stable identity of a pair pushed for annotation, and the seeded left/right swap shown to annotators."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def pair_key(pair_id: str, prompt: str, response_a: str, response_b: str) -> str:
    """A hash of the pair id AND its texts: the same pair id with edited texts is a different task, so a
    label is never attached to texts the annotator did not see. Opaque on purpose: pair ids of real
    datasets often spell the generators (PandaLM's ``bloom-7b_llama-7b``), and the key travels with
    the task data that annotators can see. The ledger maps it back to the pair id."""
    digest = hashlib.sha256(
        "\x1f".join((pair_id, prompt, response_a, response_b)).encode("utf-8")
    ).hexdigest()
    return "pk-" + digest[:24]


def content_key(prompt: str, response_a: str, response_b: str) -> str:
    """A hash of the texts alone. Datasets reuse outputs (in PandaLM's test set two generator pairs can
    carry byte-identical responses), so different pair ids can show an annotator the very same task;
    pairs with one content key share one task and its labels (``LabelStudioClient.push``)."""
    digest = hashlib.sha256("\x1f".join((prompt, response_a, response_b)).encode("utf-8")).hexdigest()
    return "ck-" + digest[:24]


def swapped(key: str, seed: int) -> bool:
    """Whether response A is shown on the right. Derived from (seed, key) alone, so the choice does not
    depend on batch order and is reproducible; it is also stored in the ledger, which is authoritative."""
    digest = hashlib.sha256(f"judgebias-swap\x1f{seed}\x1f{key}".encode()).digest()
    return bool(digest[0] & 1)


def keyed_pairs(table) -> pd.DataFrame:
    """One row per pair of a judgment table (index ``pair_id``): its texts, ``pair_key`` and
    ``content_key``."""
    pairs = table.drop_duplicates("pair_id").set_index("pair_id")[["prompt", "response_a", "response_b"]]
    texts = list(zip(pairs["prompt"], pairs["response_a"], pairs["response_b"], strict=True))
    return pairs.assign(pair_key=[pair_key(pid, *t) for pid, t in zip(pairs.index, texts, strict=True)],
                        content_key=[content_key(*t) for t in texts])
