"""What each saved figure of a run shows, in a sentence: the captions of the report page (a file
name such as ``perplexity_own_other_gemma`` says nothing to a reader)."""

from __future__ import annotations

from collections.abc import Iterable

from judgebias.display import file_stem, terminal_safe
from judgebias.reporting.plots import label
from judgebias.runs.layout import slug

# What each saved figure shows, by file stem: the page's captions (a file name says nothing to a
# reader). Per-judge kinds are matched to their judge; "{judge}" is filled with its name.
_CAPTIONS = {
    "dbg": "DBG score per judge: its win rate on its own responses minus the gold panel's on the same "
           "pairs, with 95% intervals; above 0 the judge favours its own responses more than the panel does.",
    "win_rates": "Win rate of the first-named generator in each pairing, per rater (judges, then the gold "
                 "panel and the humans); n per cell.",
    "verbosity_humans": "Humans: how often they prefer A by the relative length difference of A and B "
                        "(Saito et al., Fig. 4), with 95% intervals.",
    "verbosity_judges": "Every judge's agreement with the humans by how much longer the humans' choice is "
                        "than the other response (Saito et al., Fig. 5), overlaid, with 95% intervals.",
    "perturbations": "Perturbation probe (CALM): how far each perturbation moves P(perturbed side wins), "
                     "every judge overlaid, with 95% intervals; dashed lines: the 0.05 reading aid.",
    "pointwise_probes": "Pointwise probes: how far each scoring perturbation (rubric order, score IDs, a "
                        "reference's stated score, rubric permutation, scale) moves the mean score, every "
                        "pointwise judge overlaid, with 95% intervals (Li et al. 2025).",
    "dbg_before_after": "DBG per judge in each ablation condition with 95% intervals; n/a: not computable "
                        "(the table says why).",
    "semantic_shift": "Responses before and after the style rewrite in one projection of their sentence "
                      "embeddings: how far the rewrite moved the meaning.",
}
_JUDGE_CAPTIONS = {
    "confusion": "{judge}: on pairs with one of its own responses, whether the human and the judge found "
                 "its own response better (Wataoka et al., Fig. 2).",
    "verbosity": "{judge}: agreement with the humans by how much longer the chosen response is than the "
                 "rejected one (Saito et al., Fig. 5), with 95% intervals.",
    "perplexity": "{judge}: P(A wins) by the log-perplexity difference of A and B under the judge's own "
                  "model, beside the humans where labelled (Wataoka et al., Fig. 3), with 95% intervals.",
    "perplexity_own_other": "{judge}: P(A wins) by perplexity difference, its own responses against other "
                            "models' pairs (Wataoka et al., Sec. 5), with 95% intervals.",
    "score_distribution": "{judge} (pointwise): the share of its scores at each level of its scale, beside "
                          "the humans' where they rated the same responses (Stureborg et al. 2024).",
    "attention": "{judge}: mean attention from the answer position to each generator's responses, per layer "
                 "(DBG paper, Fig. 7).",
}


def caption(stem: str, judges: Iterable[str] = ()) -> str:
    """What the figure saved as ``<stem>.png`` shows, in a sentence (``judges``: the run's judges,
    to name the judge of a per-judge figure); an unknown stem is described by its words."""
    if stem in _CAPTIONS:
        return _CAPTIONS[stem]
    # Longest kind first: "perplexity_own_other_x" is not "perplexity" of judge "own_other_x".
    for kind in sorted(_JUDGE_CAPTIONS, key=len, reverse=True):
        for judge in judges:
            if stem in (file_stem(f"{kind}_{judge}"), f"{kind}_{slug(judge)}"):
                return _JUDGE_CAPTIONS[kind].format(judge=label(judge))
    return "Figure: " + terminal_safe(stem).replace("_", " ")
