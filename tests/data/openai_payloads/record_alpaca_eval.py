"""Provenance: how the ``alpaca_eval_*.json`` fixtures were cut from alpaca_eval's results.

Each fixture's ``choices[0]`` is alpaca_eval's recorded ``raw_completion`` (a real GPT-4-Turbo
chat-completions choice with logprobs), verbatim except for two keys alpaca_eval added to it
(``text``, ``total_tokens``); the envelope around it (id, object, model, usage) is rebuilt in the
chat-completions schema. ``x_source`` says where it came from and the annotation's ``preference``.
Run from the repository root with the path of alpaca_eval's ``results/`` folder (not needed by tests).
"""

import json
import sys
from pathlib import Path

SRC = Path(sys.argv[1])  # a checkout of tatsu-lab/alpaca_eval, or its results/ folder
OUT = Path(__file__).parent
CASES = {
    "alpaca_eval_M_top_quoted_variant": ("gpt-3.5-turbo-1106", 0),
    "alpaca_eval_m_top": ("alpaca-7b", 3),
    "alpaca_eval_close_call": ("alpaca-7b", 34),
    "alpaca_eval_m_top_space_variant": ("alpaca-7b", 205),
    "alpaca_eval_neither_top": ("gpt-3.5-turbo-1106", 214),
}

for name, (model, index) in CASES.items():
    rel = f"{model}/weighted_alpaca_eval_gpt4_turbo/annotations.json"
    record = json.loads((SRC / rel).read_text())[index]
    choice = dict(record["raw_completion"])
    total_tokens = int(choice.pop("total_tokens"))
    choice.pop("text")
    response = {
        "id": f"alpaca_eval-{model}-{index}",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4-1106-preview",
        "choices": [choice],
        "usage": {"prompt_tokens": total_tokens - 1, "completion_tokens": 1, "total_tokens": total_tokens},
        "x_source": {"file": f"tatsu-lab/alpaca_eval results/{rel}", "index": index,
                     "preference": record["preference"]},
    }
    (OUT / f"{name}.json").write_text(json.dumps(response, indent=1) + "\n")
