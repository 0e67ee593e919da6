"""Does the CTranslate2 engine keep the world model's and the judge's quality? Each engine, same held-out data.

    python benchmarks/engine_fidelity.py --data runs/judge-dagger/heldout/heldout.jsonl --split all --max-per-task 2
    python benchmarks/engine_fidelity.py --limit 4       # the shipped test split, a quicker look

On held-out real transitions (``dynaweb-eval-wm``'s data and scoring, reused from
:mod:`dynaweb_trainer.evaluate_world_model`), greedy decoding in batches (as dreams are drawn), for the
``transformers`` reference and the CTranslate2 engine at each weight type (``--quantizations``) of the same
shipped models:

- world model: strict F1 of the predicted next page (and validity, F1, exact match) on every transition;
- judge: accuracy (and success / failure recall) on the real trajectories and their truncated copies;
- token for token: how many greedy outputs are identical to the reference's, and where the first differing
  token is.

Saved to ``benchmarks/results/engine/engine_fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.llm import make_backend
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.models import DEFAULT_WORLD_MODEL, TRAINED_JUDGE, model_prompt_style, world_model_output_mode
from dynaweb_env.world_model import WebWorldModel
from dynaweb_trainer.evaluate_world_model import (
    evaluate_judge,
    evaluate_one_step,
    load_trajectories,
    per_task_sample,
    summarise,
)

RESULTS = Path(__file__).parent / "results" / "engine" / "engine_fidelity.json"
REFERENCE = "transformers"


class RecordingBackend:
    """Passes calls through and keeps every generation's completion ids, in call order."""

    def __init__(self, backend: Any):
        self.backend, self.outputs = backend, []
        self.model_name = backend.model_name

    def generate(self, conversations, params):
        generations = self.backend.generate(conversations, params)
        self.outputs.extend(list(g.completion_ids) for g in generations)
        return generations


def compare_tokens(reference: list[list[int]], engine: list[list[int]]) -> dict[str, Any]:
    """How often two engines' greedy outputs of the same prompts are identical, and where they part."""
    if len(reference) != len(engine):
        raise ValueError(f"{len(reference)} vs {len(engine)} outputs: the runs saw different prompts")
    first_differences = []
    for ours, theirs in zip(reference, engine, strict=True):
        if ours != theirs:
            pairs = enumerate(zip(ours, theirs, strict=False))
            same = next((i for i, (a, b) in pairs if a != b), min(len(ours), len(theirs)))
            first_differences.append(same)
    return {
        "outputs": len(reference),
        "identical": len(reference) - len(first_differences),
        "identical_share": round(1 - len(first_differences) / max(1, len(reference)), 4),
        "first_difference_at_token": sorted(first_differences),
        "reference_tokens": sum(map(len, reference)),
        "engine_tokens": sum(map(len, engine)),
    }


def backend_for(engine: str, model: str) -> RecordingBackend:
    """``transformers`` or ``ct2-<weight type>`` for ``model``, recording its outputs."""
    if engine == REFERENCE:
        return RecordingBackend(make_backend(f"transformers:{model}"))
    quantization = engine.removeprefix("ct2-")
    return RecordingBackend(make_backend({"backend": "ct2", "model": model, "quantization": quantization}))


def measure(engine: str, args: argparse.Namespace, trajectories: list) -> dict[str, Any]:
    """World-model and judge quality of one engine, with its raw outputs for the token comparison."""
    started = time.perf_counter()
    world_backend = backend_for(engine, args.world_model)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    mode, style = world_model_output_mode(args.world_model) or "tree", model_prompt_style(args.world_model)
    world_model = WebWorldModel(
        world_backend, sampling, max_axtree_chars=args.max_axtree_chars, output_mode=mode, prompt_style=style
    )
    records, _ = evaluate_one_step(world_model, trajectories, args.batch_size, args.seed, f"{engine}: world model")
    world_seconds = time.perf_counter() - started
    judge_backend = backend_for(engine, args.judge)
    started = time.perf_counter()
    judged = evaluate_judge(
        judge_backend, trajectories, args.judge_max_new_tokens, args.seed, model_prompt_style(args.judge)
    )
    summary = summarise(records, {}, judged)
    return {
        "world_model": f"{engine}:{args.world_model}",
        "judge": f"{engine}:{args.judge}",
        "summary": summary,
        "world_model_seconds": round(world_seconds, 1),
        "judge_seconds": round(time.perf_counter() - started, 1),
        "world_model_outputs": world_backend.outputs,
        "judge_outputs": judge_backend.outputs,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-model", default=DEFAULT_WORLD_MODEL, help="shipped or local world model")
    parser.add_argument("--judge", default=TRAINED_JUDGE, help="shipped or local judge")
    parser.add_argument("--data", nargs="+", help="trajectory JSONL files (default: the shipped data)")
    parser.add_argument("--split", default="test", help="held-out split of the data ('all': every one)")
    parser.add_argument("--max-per-task", type=int, default=0, help="first N trajectories per task (0: all)")
    parser.add_argument("--limit", type=int, default=0, help="first N trajectories (0: all)")
    parser.add_argument(
        "--quantizations", nargs="+", default=["int8", "float32"], help="engine weight types to compare"
    )
    parser.add_argument("--max-new-tokens", type=int, default=448, help="world-model token budget")
    parser.add_argument("--judge-max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-axtree-chars", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    split = None if args.split.lower() in ("all", "none", "") else args.split
    trajectories = per_task_sample(load_trajectories(args.data, split), args.max_per_task)[: args.limit or None]
    engines = [REFERENCE, *(f"ct2-{quantization}" for quantization in args.quantizations)]
    runs = {engine: measure(engine, args, trajectories) for engine in engines}
    reference = runs[REFERENCE]
    keys = ("valid", "f1", "strict_f1", "exact", "judge_accuracy", "judge_success_recall", "judge_failure_recall")
    report = {
        "command": shlex.join(
            ["python", "benchmarks/engine_fidelity.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
        "world_model": args.world_model,
        "judge": args.judge,
        "data": args.data or "shipped",
        "trajectories": len(trajectories),
        "transitions": len(reference["world_model_outputs"]),
        "split": args.split,
        "decoding": f"greedy, batches of {args.batch_size}",
        "quality": {key: {name: runs[name]["summary"].get(key) for name in engines} for key in keys},
        "world_model_tokens": {
            name: compare_tokens(reference["world_model_outputs"], runs[name]["world_model_outputs"])
            for name in engines[1:]
        },
        "judge_tokens": {
            name: compare_tokens(reference["judge_outputs"], runs[name]["judge_outputs"]) for name in engines[1:]
        },
        "seconds": {name: {k: runs[name][k] for k in ("world_model_seconds", "judge_seconds")} for name in engines},
        "summaries": {name: runs[name]["summary"] for name in engines},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("quality", "world_model_tokens", "judge_tokens", "seconds")}, indent=1))
    print(f"saved {args.output}")
    return report


if __name__ == "__main__":
    main()
