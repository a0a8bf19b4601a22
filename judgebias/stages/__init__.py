"""The experiment's stages as plain functions: config + run store in, stage output out.

Each stage first looks for its output in the run folder (``RunStore``) and returns it when present;
otherwise it computes it (model calls go through the content-addressed ``CachedBackend``), writes
it atomically and records its wall time. Prefect tasks (``tasks/``) call exactly one of these;
nothing here knows about Prefect or MLflow.

One module per group of stages; every stage function is importable from here.
"""

from judgebias.stages._common import Progress, call_cache, open_backend
from judgebias.stages.data import (
    data_hash,
    dataset_path,
    load_instructions,
    read_instructions,
    subset,
)
from judgebias.stages.explain import (
    attention_analysis,
    attention_by_generator,
    attention_own_minus_other,
    perplexity_analysis,
)
from judgebias.stages.finetune import compare_finetune, finetune_generator, finetune_instructions
from judgebias.stages.generation import build_pairs, generate_responses
from judgebias.stages.judge import dtype_fidelity, judge_pairs
from judgebias.stages.leaderboard import compute_leaderboard
from judgebias.stages.pointwise import judge_responses, pointwise_report, response_items
from judgebias.stages.pointwise_probes import (
    pointwise_probe_judgments,
    pointwise_probe_report,
    probe_items,
    probe_judges,
)
from judgebias.stages.probes import pairs_for, probe_pairs, probe_result
from judgebias.stages.results import (
    aggregate_gold,
    annotated_metrics,
    assemble_table,
    compute_metrics,
    gold_for,
)
from judgebias.stages.style import compare_style, rewrite_style, rewriter_judges, semantic_preservation

__all__ = [
    "Progress",
    "aggregate_gold",
    "annotated_metrics",
    "assemble_table",
    "attention_analysis",
    "attention_by_generator",
    "attention_own_minus_other",
    "build_pairs",
    "call_cache",
    "compare_finetune",
    "compare_style",
    "compute_leaderboard",
    "compute_metrics",
    "data_hash",
    "dataset_path",
    "dtype_fidelity",
    "finetune_generator",
    "finetune_instructions",
    "generate_responses",
    "gold_for",
    "judge_pairs",
    "judge_responses",
    "load_instructions",
    "open_backend",
    "pairs_for",
    "perplexity_analysis",
    "pointwise_probe_judgments",
    "pointwise_probe_report",
    "pointwise_report",
    "probe_items",
    "probe_judges",
    "probe_pairs",
    "probe_result",
    "read_instructions",
    "response_items",
    "rewrite_style",
    "rewriter_judges",
    "semantic_preservation",
    "subset",
]
