"""How much attention a judge pays to each response while judging (DBG paper, Section 4.4, Fig. 7).

For one judging prompt, per layer: the attention weights from the final prompt position (the
position whose next-token distribution is the verdict) to every token of a response, averaged over
heads and then over that response's tokens. The final position is the one that decides the
answer, so it is the attention that can explain a verdict; the paper averages "over all tokens in
the model-generated responses" without naming the query position, and this is our reading.

Needs eager attention (SDPA never materializes the weights): the backend's model is switched to
eager for the call and back afterwards. Weights are captured by hooks one layer at a time, keeping
only the final row, so memory stays at one layer's (heads x T x T) matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

from judgebias.backends.protocol import AttentionSummary, Prompt
from judgebias.prompts.base import JudgeTemplate
from judgebias.tables.records import Order, Pair


def char_spans(rendered: str, markers: tuple[str, str], first: str, second: str
               ) -> tuple[tuple[int, int], tuple[int, int]]:
    """Character spans of the two judged responses in the rendered prompt.

    The judged responses follow the *last* occurrence of each marker (few-shot examples come
    first and use the same markers).
    """
    spans = []
    search_from = 0
    for marker, text in zip(markers, (first, second), strict=True):
        at = rendered.rfind(marker)
        if at < search_from:
            raise ValueError(f"marker {marker!r} not found after position {search_from} of the prompt")
        start = at + len(marker)
        if not rendered.startswith(text, start):
            raise ValueError(f"response text does not follow marker {marker!r} in the rendered prompt")
        spans.append((start, start + len(text)))
        search_from = start + len(text)
    return spans[0], spans[1]


def token_indices(offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """Tokens overlapping a character span (a token straddling the boundary counts)."""
    lo, hi = span
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < hi and e > lo]


def _attention_layers(model):
    decoder = model.get_decoder()
    return [layer.self_attn for layer in decoder.layers]


def last_position_attention(backend, prompt: Prompt) -> tuple[list, list[tuple[int, int]], str]:
    """(per-layer head-averaged attention row of the final position [T], token offsets, rendered text)."""
    import torch

    rendered = backend.render(prompt)
    enc = backend.tokenizer(rendered, add_special_tokens=prompt.text is not None, return_offsets_mapping=True)
    ids = torch.tensor([enc["input_ids"]], device=backend.device)
    rows: list = []

    def hook(_module, _args, output):
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if weights is None:
            raise RuntimeError("attention module returned no weights; eager attention is required")
        rows.append(weights[0, :, -1, :].float().mean(0).cpu())

    model = backend.model
    previous = model.config._attn_implementation
    handles = [m.register_forward_hook(hook) for m in _attention_layers(model)]
    try:
        model.set_attn_implementation("eager")
        with torch.inference_mode():
            backend._body()(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
        model.set_attn_implementation(previous)
    return rows, [tuple(o) for o in enc["offset_mapping"]], rendered


def summarize(backend, pairs: Sequence[Pair], template: JudgeTemplate, *, order: Order = "ab",
              chat: bool | None = None) -> list[AttentionSummary]:
    """Per pair: mean attention per layer paid to response A's and response B's tokens.

    Keys are "a" and "b" in the pair's original terms, whatever ``order`` showed first.
    """
    chat = backend.is_chat if chat is None else chat
    out = []
    for pair in pairs:
        first, second = pair.shown(order)
        prompt = template.build(pair.prompt, first, second, chat=chat)
        rows, offsets, rendered = last_position_attention(backend, prompt)
        spans = char_spans(rendered, template.markers, first, second)
        means = []
        for span in spans:
            idx = token_indices(offsets, span)
            if not idx:
                raise ValueError(f"pair {pair.pair_id!r}: a response has no tokens")
            means.append(tuple(float(r[idx].mean()) for r in rows))
        shown = {"first": means[0], "second": means[1]}
        a, b = (shown["first"], shown["second"]) if order == "ab" else (shown["second"], shown["first"])
        out.append(AttentionSummary(per_layer={"a": a, "b": b}))
    return out
