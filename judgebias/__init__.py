"""judgebias: measure, explain and reduce the biases of LLM-as-a-judge evaluators.

This package holds the pure domain logic (records, the judgment table, importers, metrics,
prompts, model backends, cache). Prefect flows (``flows/``), tasks (``tasks/``), MLflow tracking
(``tracking/``) and the Label Studio loop (``annotation/``) wire it together.
"""

__version__ = "0.1.0"
