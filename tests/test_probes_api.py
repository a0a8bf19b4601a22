"""Both probes with an API judge: `backend: openai` against a real `transformers serve` (SmolLM2),
which returns no log-probabilities, so every answer is a parsed verdict. The figures fall back to
votes (stated in each figure's method), and a rerun sends no request."""

from __future__ import annotations

import math
import os

import pytest
import yaml
from conftest import tiny_config

pytestmark = [pytest.mark.slow, pytest.mark.server]
TAGS = ("authority@1", "verbosity@1")


@pytest.fixture(scope="module")
def api_probe_run(prefect_harness, tiny_models, transformers_server, tmp_path_factory):
    from judgebias.backends.builder import freeze_before_first_model
    from judgebias.config.experiment import load_config
    from judgebias.flows.experiment import perturbation_probe, self_recognition_probe
    from judgebias.runs.store import RunStore

    freeze_before_first_model()  # as `judgebias run` does (conftest's experiment_run says why)
    base = tmp_path_factory.mktemp("api-probes")
    doc = tiny_config(tiny_models, base)
    doc["dataset"]["sample"] = 3
    doc["judges"] = [{"name": "api", "backend": "openai", "model": transformers_server["model"],
                      "base_url": transformers_server["base_url"]}]
    doc["self_map"] = {"api": "ta"}  # as if the served model had written ta's answers
    doc["analyses"] = {"perplexity": False, "attention": False}
    doc["ablations"] = {"style_rewrite": {"enabled": False}, "finetune": {"enabled": False}}
    doc["probes"] = {"perturbations": {"names": [t.split("@")[0] for t in TAGS], "sample": 3},
                     "self_recognition": {"sample": 3}}
    path = base / "api-probes.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    cwd = os.getcwd()
    os.chdir(base)
    try:
        out = {"perturbed": perturbation_probe(cfg), "recognised": self_recognition_probe(cfg)}
    finally:
        os.chdir(cwd)
    return {**out, "cfg": cfg, "store": RunStore(cfg.run_path()), "base": base}


def test_an_api_judge_is_probed_on_votes(api_probe_run):
    from judgebias.runs.layout import RunLayout

    cfg, store, out = api_probe_run["cfg"], api_probe_run["store"], api_probe_run["perturbed"]
    judged = store.read_frame(RunLayout.perturbation(cfg).judgments("api"))
    assert len(judged) == 6  # 2 perturbations x 3 pairs, each asked in both orders
    assert judged["p_a_ab"].isna().all() and judged["p_a_ba"].isna().all()  # no log-probs served
    assert judged["verdict_ab"].notna().any(), judged["raw_ab"].tolist()
    computed = 0
    for tag in TAGS:
        fig = out["judges"]["api"][tag]
        for key in ("robustness_rate", "shift"):
            assert fig[key].get("value") is not None or fig[key].get("skipped"), fig[key]
        if fig["shift"].get("value") is not None:
            computed += 1
            assert fig["shift"]["scale"] == "vote" and "no probabilities" in fig["shift"]["method"]
            assert -1 <= fig["shift"]["value"] <= 1
    assert computed, out["judges"]["api"]


def test_an_api_judge_is_asked_which_answer_it_wrote(api_probe_run):
    from judgebias.runs.layout import RunLayout

    cfg, store, out = api_probe_run["cfg"], api_probe_run["store"], api_probe_run["recognised"]
    asked = store.read_frame(RunLayout.recognition(cfg).judgments("api"))
    assert len(asked) == 3 and asked["template_version"].str.startswith("self-recognition@1").all()
    assert ((asked["generator_a"] == "ta") ^ (asked["generator_b"] == "ta")).all()
    assert asked["p_a_ab"].isna().all()
    # SmolLM2 tends to answer this question in a sentence ("The answer I wrote was A."): the parser
    # keeps such an answer out with its reason rather than guess, and the figure says it is skipped.
    for row in asked.to_dict("records"):
        assert row["verdict_ab"] is not None or "off-format" in row["judge_error"], row
    rec = out["judges"]["api"]["self_recognition"]
    if asked["verdict"].notna().any():
        assert 0 <= rec["value"] <= 1 and rec["n"] <= 3
    else:
        assert rec["value"] is None and rec["skipped"]


def _failed(rows) -> int:
    """Orders that failed (off-format answers: never cached, so asked again on a rerun)."""
    errors = rows["judge_error"].dropna()
    return int(errors.str.count(r"(?:^|; )(?:ab|ba): ").sum())


def test_a_rerun_asks_again_only_what_failed(api_probe_run):
    from judgebias.flows.experiment import perturbation_probe, self_recognition_probe
    from judgebias.runs.layout import RunLayout

    cfg, store = api_probe_run["cfg"], api_probe_run["store"]
    failed, asked = {}, {}
    for layout in (RunLayout.perturbation(cfg), RunLayout.recognition(cfg)):
        rows = store.read_frame(layout.judgments("api"))
        failed[layout.prefix], asked[layout.prefix] = _failed(rows), 2 * len(rows)
        store.path(layout.judgments("api")).unlink()
        store.path(layout.probe_result).unlink()
    cwd = os.getcwd()
    os.chdir(api_probe_run["base"])
    try:
        again = perturbation_probe(cfg)
        self_recognition_probe(cfg)
    finally:
        os.chdir(cwd)
    stages = store.manifest()["stages"]
    reran = {s.split("judge_pairs")[0]: stages[s] for s in stages
             if s.endswith("judge_pairs[api]") and "/" in s}
    assert set(reran) == set(failed)
    for prefix, stage in reran.items():
        assert stage["calls"] == failed[prefix], (prefix, stage, failed)
        assert stage["hits"] == asked[prefix] - failed[prefix], (prefix, stage, asked)
    before = api_probe_run["perturbed"]["judges"]["api"]
    for tag in TAGS:
        a, b = again["judges"]["api"][tag]["shift"], before[tag]["shift"]
        assert (a.get("value") is None and b.get("value") is None) or math.isclose(a["value"], b["value"])
