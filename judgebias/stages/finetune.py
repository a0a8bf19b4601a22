"""Fine-tune ablation (DBG paper, Sec. 4.3): LoRA on the same data, regenerate, re-judge."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from judgebias.config.experiment import BUNDLED_SFT_DATA, ExperimentConfig, bundled_file
from judgebias.runs.layout import ADAPTER_RESULT, RunLayout
from judgebias.runs.store import RunStore
from judgebias.stages._common import Progress, call_cache, document, noop, stage_output
from judgebias.stages.compare import dbg_summary, format_compare
from judgebias.stages.data import subset
from judgebias.stages.results import compute_metrics, gold_for


def finetune_generator(
    cfg: ExperimentConfig, store: RunStore, generator: str, *, progress: Progress = noop
) -> dict:
    """A LoRA adapter for ``generator``'s model trained on the shared instruction data."""
    from judgebias.ablations.finetune import load_sft_data, lora_finetune
    from judgebias.backends.builder import load_local
    from judgebias.backends.kinds import chat_for, uses_chat
    from judgebias.backends.local import LocalBackend
    from judgebias.prompts import generation_template

    variant = RunLayout.finetune(cfg)

    def compute(info: dict) -> dict:
        ft = cfg.ablations.finetune
        g = cfg.generator(generator)
        if not g.can("finetune"):
            raise ValueError(
                f"ablations.finetune: generator {generator!r} runs on backend {g.backend!r}, which "
                "cannot be fine-tuned; only local models can be"
            )
        data = bundled_file(BUNDLED_SFT_DATA[ft.data]) if ft.data in BUNDLED_SFT_DATA else Path(ft.data)
        examples = load_sft_data(data, ft.train_size, ft.seed)
        template = generation_template(cfg.prompts.generation)
        # Through the builder, so the entry's dtype and quantize apply as in every other stage; a
        # fresh copy, never the resident one: LoRA wraps the model it trains.
        model = load_local(g.to_spec(name=generator))
        chat = uses_chat(model, chat_for(g.prompt_kind))
        encode = LocalBackend(model, name=generator).encode
        result: dict = {"base_model": g.model, "base_identity": model.identity}
        key = _adapter_key(model.identity, data, ft, template.tag(chat))
        cached = _adapter_cache(cfg, key)
        if cached is not None and (cached / ADAPTER_RESULT).exists():
            # Same base weights, data, layout and recipe: training is deterministic, reuse it.
            folder = store.write_dir(
                variant.adapter(generator),
                lambda tmp: shutil.copytree(cached, tmp, dirs_exist_ok=True),
            )
            result.update(
                json.loads((cached / ADAPTER_RESULT).read_text()), adapter_dir=str(folder), from_cache=True
            )
            info.update(steps=ft.steps, from_cache=True)
            progress(f"{generator}: LoRA adapter {result['adapter_sha256'][:12]} from the adapter cache")
            return result

        def fill(folder: Path) -> None:
            r = lora_finetune(
                model.model,
                model.tokenizer,
                examples,
                lambda q: template.build(q, chat=chat),
                encode,
                folder,
                r=ft.lora.r,
                alpha=ft.lora.alpha,
                dropout=ft.lora.dropout,
                target_modules=ft.lora.target_modules,
                steps=ft.steps,
                lr=ft.lr,
                batch_size=ft.batch_size,
                max_length=ft.max_length,
                seed=ft.seed,
                progress=lambda step, loss: progress(
                    f"{generator}: LoRA step {step}/{ft.steps} loss {loss:.3f}"
                ),
            )
            result.update(r.to_json())

        folder = store.write_dir(variant.adapter(generator), fill)
        result["adapter_dir"] = str(folder)
        info.update(steps=ft.steps, final_loss=result["losses"][-1] if result["losses"] else None)
        if cached is not None:
            _store_adapter(cached, folder, result)
        return result

    # The trained model goes with ``compute``'s frame; the peft wrapper's reference cycles with it.
    return stage_output(store, document(variant.adapter_record(generator)),
                        variant.stage(f"finetune_generator[{generator}]"), compute,
                        then=lambda _: gc.collect())


def _adapter_key(base_identity: dict, data: Path, ft, layout: str) -> str:
    """Content key of a LoRA adapter: base weights, training data, prompt layout and recipe."""
    import hashlib

    doc = {
        "trainer": "lora_finetune@1",
        "base": base_identity,
        "layout": layout,
        "data_sha256": hashlib.sha256(Path(data).read_bytes()).hexdigest(),
        "recipe": ft.model_dump(mode="json", exclude={"enabled", "generators", "sample"}),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def _adapter_cache(cfg: ExperimentConfig, key: str) -> Path | None:
    """``<call cache dir>/adapters/<key>``: trained adapters outlive a deleted run folder."""
    cache = call_cache(cfg)
    return None if cache.path is None else cache.path.parent / "adapters" / key


def _store_adapter(target: Path, folder: Path, result: dict) -> None:
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        (tmp / ADAPTER_RESULT).write_text(json.dumps({k: v for k, v in result.items() if k != "adapter_dir"}))
        if target.exists():  # another process stored the same adapter meanwhile
            shutil.rmtree(tmp)
        else:
            tmp.replace(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def finetune_instructions(cfg: ExperimentConfig, instructions: pd.DataFrame) -> pd.DataFrame:
    return subset(instructions, cfg.ablations.finetune.sample, cfg.dataset.seed)


def compare_finetune(
    cfg: ExperimentConfig,
    store: RunStore,
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    progress: Progress = noop,
) -> dict:
    """DBG per judge of the original models vs their fine-tuned versions (same instructions)."""
    variant = RunLayout.finetune(cfg)

    def compute(_: dict) -> dict:
        keep = set(after["prompt"])
        before_sub = before[before["prompt"].isin(keep)]
        gold = gold_for(cfg, before)
        out: dict[str, Any] = {
            "fine_tuned": cfg.finetune_generators,
            "judges": {},
            "pairs_before": int(before_sub["pair_id"].nunique()),
            "pairs_after": int(after["pair_id"].nunique()),
        }
        for j in cfg.self_map:
            out["judges"][j] = {
                "before": dbg_summary(before_sub, j, cfg, gold),
                "finetuned": dbg_summary(after, j, cfg, gold),
            }
        compute_metrics(cfg, store, after, variant=variant)
        from judgebias.reporting import plots, plots_ablations

        fig = plots_ablations.dbg_before_after(out, "DBG before and after fine-tuning on the same data")
        plots.save_figure(fig, store.path(variant.plot("dbg_before_after")))
        progress("fine-tune ablation DBG: " + format_compare(out))
        return out

    return stage_output(store, document(variant.comparison), variant.stage("compare_finetune"), compute)
