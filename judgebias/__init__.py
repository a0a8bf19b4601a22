"""judgebias: measure, explain and reduce the biases of LLM-as-a-judge evaluators.

The domain (records, the judgment table, importers, prompts, backends, metrics, reporting) lives in
this package's own folder. The Prefect flows and tasks, MLflow tracking and the Label Studio loop sit
at the repository's top (``flows/``, ``tasks/``, ``tracking/``, ``annotation/``) and are installed as
``judgebias.flows``, ``judgebias.tasks``, ``judgebias.tracking`` and ``judgebias.annotation``, so
nothing this project installs takes a common top-level name; the command line is ``judgebias.cli``.
"""

__version__ = "0.1.0"
