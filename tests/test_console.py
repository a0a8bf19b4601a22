"""What `judgebias run` prints (issue 34, item 9): one line per stage (ran with its time, or reused
from the run folder), no Prefect task-state lines, no library warnings or weight-loading bars the
user cannot act on, and nothing after the summary.

The end-to-end test runs the CLI in a subprocess on the flow tests' tiny random-weights models (the
style ablation and attention left out to save time) three times on one run folder: stopped by a full
disk as the judgments are written (the one-line error of tests/test_disk_full.py), resumed, and run
again. One sequence serves both files' checks: the full disk's resume is the console's cold run.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys
import warnings

import pytest
import yaml
from conftest import tiny_config

PREFECT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| ")  # Prefect's console format
STAGE_LINE = re.compile(r"^  (ran|reused) +(\S.*?)(?: {2,}|$)")
NOISE = ("Finished in state", "FutureWarning", "DeprecationWarning", "UserWarning", "Loading weights",
         "it/s]", "past_key_values", "temporary server", "torchao")


# --- the console lines, without Prefect ------------------------------------------------------------
def test_a_stage_says_whether_it_computed_or_found_its_output(tmp_path):
    from judgebias.runs.store import RunStore, watch

    store = RunStore(tmp_path)

    def stage():  # the shape of every stage: return what the run folder has, else compute and write
        if store.has("out.json"):
            return store.read_json("out.json")
        store.record_stage("stage", 0.1)
        store.write_json("out.json", {"x": 1})
        return {"x": 1}

    for expected in ("ran", "reused"):
        with watch() as seen:
            stage()
        assert seen.outcome == expected
    with watch() as seen:  # a stage that does not apply (dtype_fidelity of a float32 judge)
        store.has("absent.json")
    assert seen.outcome is None
    with watch() as seen:  # the manifest every recording stage reads is not a found output
        store.manifest()
    assert seen.outcome is None


def test_reused_stages_are_reported_once_per_experiment(caplog):
    from judgebias.runs.layout import RunLayout
    from judgebias.tasks.stage_lines import LOGGER, new_experiment, report_stage, variant_words

    assert variant_words("style-3f2a/attractive") == "style ablation, attractive"
    assert variant_words("finetune-1c2d") == "fine-tune ablation" and variant_words("") == ""
    new_experiment()
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        report_stage("ran", "judge_pairs[ta]", None, 2.25, "ta: 6 pairs judged")
        for _ in range(4):  # the ablations and probes read the main stages back
            report_stage("reused", "judge_pairs[ta]", RunLayout(), 0.01, "")
        report_stage("reused", "judge_pairs[ta]", RunLayout("finetune-1c2d/"), 0.01, "")
        report_stage("ran", "log_to_mlflow", None, 1.0, "")
        report_stage("ran", "log_to_mlflow", None, 1.0, "")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4
    assert re.fullmatch(r"ran +judge_pairs\[ta\] +2\.2 s  ta: 6 pairs judged", lines[0]), lines[0]
    assert lines[1].startswith("reused  judge_pairs[ta] (fine-tune ablation)")
    new_experiment()
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        report_stage("reused", "judge_pairs[ta]", None, 0.01, "")
    assert len(caplog.records) == 5  # a new experiment reports it again


def test_peft_filter_hides_only_its_own_warning():
    from judgebias.backends.library_noise import peft_reads_deprecated_attributes

    def warn(message: str, module: str) -> None:
        warnings.warn_explicit(message, FutureWarning, filename=f"{module}.py", lineno=1, module=module)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with peft_reads_deprecated_attributes():
            warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.",
                 "transformers.modeling_utils")
            warn("`something_else` is deprecated", "transformers.modeling_utils")
            warn("`is_gradient_checkpointing` is deprecated", "somebody.else")
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated",
                                                "`is_gradient_checkpointing` is deprecated"]


def test_the_kv_cache_goes_by_the_name_the_model_declares():
    from judgebias.backends.kv_cache import returned_cache, with_cache

    class New:
        def forward(self, input_ids=None, cache=None): ...

    class Old:
        def forward(self, input_ids=None, past_key_values=None): ...

    assert with_cache(New(), "kv") == {"cache": "kv"}
    assert with_cache(Old(), "kv") == {"past_key_values": "kv"}

    class OldOut:
        past_key_values = "kv-old"

    class NewOut:
        cache = "kv-new"

    assert returned_cache(OldOut()) == "kv-old" and returned_cache(NewOut()) == "kv-new"


def test_prefix_reuse_raises_no_deprecation_warning():
    from judgebias.backends import loading as models
    from judgebias.backends.local import LocalBackend
    from judgebias.backends.random_weights import random_model
    from judgebias.prompts import DBG_AB

    tok = models.load_tokenizer("smollm2-135m-instruct")
    lm = random_model("tiny-llama", tokenizer=tok, seed=0, device="cpu")
    backend = LocalBackend(lm, token_budget=512, max_batch=4)
    prompts = [DBG_AB.build("Say hi.", a, b) for a, b in (("hi", "hello"), ("yo", "hey"), ("a", "b"))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # transformers 5 warns on `past_key_values`
        backend.score_options(prompts, ["A", "B"])


def test_demo_help_quotes_no_timing():
    from typer.testing import CliRunner

    from judgebias.cli import app

    out = CliRunner().invoke(app, ["demo", "--help"], terminal_width=100).output
    assert not re.search(r"\d+(\.\d+)?\s*(min|minutes|s|seconds)\b", out), out  # README has the figure
    assert "--verbose" in out


# --- the console of a real run: stopped by a full disk, resumed, run again ------------------------
def _env(base) -> dict:
    from servers import migrated_prefect_home

    env = {k: v for k, v in os.environ.items()
           if k != "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL" and not k.startswith("PREFECT_API")}
    # A Prefect home of the test's own, migrated already: not the user's ~/.prefect, whose first use
    # on a fresh machine would migrate it (10-30 s) beside the other worker's runs.
    home = base / "prefect-home"
    env["PREFECT_HOME"] = str(home if home.is_dir() else migrated_prefect_home(home))
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleaved as printed
    return env


def _run_cli(base, config, *, code: int = 0, script=None) -> list[str]:
    command = [str(script)] if script else ["-m", "judgebias"]
    proc = subprocess.run([sys.executable, *command, "run", str(config)], cwd=base, env=_env(base),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert proc.returncode == code, proc.stdout[-4000:]
    return proc.stdout.splitlines()


def _check_common(lines: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    noisy = [line for line in lines if PREFECT_LINE.match(line) or any(n in line for n in NOISE)]
    assert not noisy, noisy
    header = next(i for i, line in enumerate(lines) if "judgebias experiment 'tiny' finished in" in line)
    after = lines[header:]
    # Nothing after the summary but the summary: no stage line, log line or warning.
    assert not [line for line in after if STAGE_LINE.match(line)], after
    stages = [m.groups() for m in map(STAGE_LINE.match, lines[:header]) if m]
    names = [name for _, name in stages]
    assert len(names) == len(set(names)), names  # one line per stage
    return stages, after


DEV_FULL = "/dev/full"  # every write to it fails with ENOSPC (tests/test_disk_full.py)
KEPT_BEFORE_JUDGING = ("load_instructions", "generate_responses[ta]", "generate_responses[tb]", "build_pairs")


@pytest.mark.slow
def test_a_run_stopped_by_a_full_disk_resumes_and_says_one_line_per_stage(tiny_models, experiment_run,
                                                                          tmp_path):
    """Three `judgebias run` of one config, each a process of its own as a user runs it (Prefect's
    temporary server, its console handler): the judgments' file goes to /dev/full, and the run ends
    in one line that names it and the command that resumes; that command reads the finished stages
    back and computes the rest, each stage in one line; run once more, it computes nothing."""
    if not (os.path.exists(DEV_FULL) and stat.S_ISCHR(os.stat(DEV_FULL).st_mode)):
        pytest.skip("no /dev/full (a Linux device) here")
    from judgebias.config.experiment import load_config

    conf = tiny_config(tiny_models, tmp_path)
    conf["analyses"]["attention"] = False
    conf["ablations"]["style_rewrite"]["enabled"] = False
    # The shared experiment's call cache: the same models on the same instructions, so the stages
    # run from cached model calls.
    conf["cache_dir"] = experiment_run["cache_dir"]
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(conf))
    run = load_config(config).run_path()

    # 1. The disk is full when the judgments are written (pandas' writes to that file go to /dev/full).
    script = tmp_path / "full_at_judgments.py"
    script.write_text(
        "import sys\n"
        "import pandas as pd\n"
        "real = pd.DataFrame.to_parquet\n"
        "def to_parquet(self, path, *args, **kwargs):\n"
        f"    return real(self, {DEV_FULL!r} if 'judgments' in str(path) else path, *args, **kwargs)\n"
        "pd.DataFrame.to_parquet = to_parquet\n"
        "from judgebias.cli import main\n"
        "sys.argv = ['judgebias', *sys.argv[1:]]\n"
        "main()\n")
    full = "\n".join(_run_cli(tmp_path, config, code=74, script=script))
    assert "Traceback" not in full and "Task run failed" not in full and "Finished in state" not in full
    [line] = [ln for ln in full.splitlines() if ln.startswith("error:")]
    assert line == (f"error: disk full (no space left on device) while writing {run}/judgments/ta.parquet; "
                    f"the stages already finished are kept in {run}. Free some space, then run the same "
                    f"command to resume: judgebias run {config}"), full
    kept = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert kept == ["instructions.parquet", "manifest.json", "pairs.parquet", "pairs_exclusions.json",
                    "responses/ta.parquet", "responses/tb.parquet"], kept

    # 2. The command the line gives, the disk no longer full: the finished stages are read back (and
    # said so once each), every other stage runs, each in one line, and the summary ends the output.
    resumed = _run_cli(tmp_path, config)
    stages, after = _check_common(resumed)
    assert {name for outcome, name in stages if outcome == "reused"} == set(KEPT_BEFORE_JUDGING), stages
    ran = {name for outcome, name in stages if outcome == "ran"}
    assert {"judge_pairs[ta]", "judge_pairs[tb]", "compute_metrics", "finetune_generator[ta]",
            "judge_pairs[ta] (fine-tune ablation)", "log_to_mlflow"} <= ran, stages
    # The fine-tune ablation read the main stages back: not listed a second time as reused.
    assert not [s for s in stages if s[0] == "reused" and "(" in s[1]], stages
    assert any(line.startswith("headline figures") for line in after)
    assert (run / "judgments" / "ta.parquet").exists()

    # 3. Once more: everything is read back; only the MLflow run and the summary are written again.
    again = _run_cli(tmp_path, config)
    stages, _ = _check_common(again)
    always = {"log_to_mlflow", "publish_summary"}
    outcomes = {name: outcome for outcome, name in stages}
    assert {n for n, o in outcomes.items() if o == "ran"} == always, stages
    assert outcomes.keys() - always == (ran | set(KEPT_BEFORE_JUDGING)) - always  # all reused now
