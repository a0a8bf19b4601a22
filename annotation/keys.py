"""Stable identity of a pair pushed for annotation, and the seeded left/right swap shown to annotators."""

from __future__ import annotations

import hashlib


def pair_key(pair_id: str, prompt: str, response_a: str, response_b: str) -> str:
    """A hash of the pair id AND its texts: the same pair id with edited texts is a different task, so a
    label is never attached to texts the annotator did not see. Opaque on purpose: pair ids of real
    datasets often spell the generators (PandaLM's ``bloom-7b_llama-7b``), and the key travels with
    the task data that annotators can see. The ledger maps it back to the pair id."""
    digest = hashlib.sha256(
        "\x1f".join((pair_id, prompt, response_a, response_b)).encode("utf-8")
    ).hexdigest()
    return "pk-" + digest[:24]


def swapped(key: str, seed: int) -> bool:
    """Whether response A is shown on the right. Derived from (seed, key) alone, so the choice does not
    depend on batch order and is reproducible; it is also stored in the ledger, which is authoritative."""
    digest = hashlib.sha256(f"judgebias-swap\x1f{seed}\x1f{key}".encode()).digest()
    return bool(digest[0] & 1)
