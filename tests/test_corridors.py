"""scripts/corridors.py, the structure figure of issue 44, on a toy package whose walk is counted by hand."""
from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "corridors.py"


@pytest.fixture(scope="module")
def corridors():
    spec = importlib.util.spec_from_file_location("corridors", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "judgebias" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


TOY = {
    "__init__.py": "",
    "cli/__init__.py": "",
    "cli/pipeline.py": """
        from judgebias import stages
        from judgebias.cli import helpers

        def register(app):
            def run_cmd(cfg):
                helpers.banner()            # reaches no target: left out of the corridor
                stages.generate(cfg)        # through the package's re-export
                tasks_table[0](cfg)         # through a module-level binding
            return run_cmd

        tasks_table = (stages.generate,)
    """,
    "cli/helpers.py": "def banner():\n    return 'hi'\n",
    "cli/analyze.py": """
        import mlflow
        from judgebias.metrics import registry

        def analyze_cmd(table):
            value = registry.FIGURES[0](table)
            mlflow.log_metrics({"dbg": value})
    """,
    "stages/__init__.py": "from judgebias.stages.gen import generate\n",
    "stages/gen.py": """
        from judgebias.stages import common

        def generate(cfg):
            return common.clip(cfg.max_new_tokens)
    """,
    "stages/common.py": "def clip(n):\n    return n\n",
    "metrics/__init__.py": "",
    "metrics/registry.py": """
        from judgebias.metrics.dbg import dbg_score

        FIGURES = (lambda t: dbg_score(t),)
    """,
    "metrics/dbg.py": "def dbg_score(t):\n    return 0.0\n",
}


def test_walks_of_a_toy_package(tmp_path, corridors):
    figures = corridors.measure(write(tmp_path, TOY))
    config, figure = figures.values()
    # config: run_cmd reads no field itself; generate does. Corridor: run_cmd, generate, tasks_table
    # (binding that names generate). common.clip and banner reach no reader and are left out.
    # Walk: cli.pipeline(run_cmd) > stages.gen(generate) > cli.pipeline (return; tasks_table is in
    # the same module, then generate is already read) => 2 stops, 1 back.
    assert config["trail"] == ["judgebias.cli.pipeline", "judgebias.stages.gen", "judgebias.cli.pipeline"]
    assert (config["stops"], config["back"], config["functions"], config["targets"]) == (2, 1, 3, 1)
    # figure: analyze_cmd (logs to MLflow: a target) > registry.FIGURES > dbg_score > back up twice
    # => cli.analyze > metrics.registry > metrics.dbg > metrics.registry > cli.analyze: 4 stops, 2 back.
    assert figure["trail"] == ["judgebias.cli.analyze", "judgebias.metrics.registry", "judgebias.metrics.dbg",
                               "judgebias.metrics.registry", "judgebias.cli.analyze"]
    assert (figure["stops"], figure["back"], figure["targets"]) == (4, 2, 2)


def test_a_missing_entry_is_named(tmp_path, corridors):
    files = dict(TOY)
    del files["cli/analyze.py"]
    with pytest.raises(SystemExit, match=r"no module judgebias\.cli\.analyze"):
        corridors.measure(write(tmp_path, files))


def test_this_checkout_has_both_walks(corridors):
    figures = corridors.measure(SCRIPT.parents[1])
    assert all(f["targets"] >= 1 and f["stops"] >= 2 for f in figures.values()), figures
