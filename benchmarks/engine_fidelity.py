"""Does the CTranslate2 engine keep the world model's and the judge's quality? Both engines, same held-out data.

    python benchmarks/engine_fidelity.py                 # the shipped tree world model and judge, test split
    python benchmarks/engine_fidelity.py --limit 4       # quicker look

On the held-out real transitions (``dynaweb-eval-wm``'s data and scoring, reused from
:mod:`dynaweb_trainer.evaluate_world_model`), greedy decoding, for the ``transformers`` reference and the
``ct2`` engine (int8) of the same shipped models:

- world model: strict F1 of the predicted next tree (and validity, F1, exact match) on every transition;
- judge: accuracy (and success / failure recall) on the real trajectories and their truncated copies;
- token for token: how many greedy outputs are identical, and where the first differing token is.

Saved to ``benchmarks/results/engine_fidelity.json``.
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
from dynaweb_env.world_model import WebWorldModel
from dynaweb_trainer.evaluate_world_model import evaluate_judge, evaluate_one_step, load_trajectories, summarise

RESULTS = Path(__file__).parent / "results" / "engine_fidelity.json"
ENGINES = ("transformers", "ct2")


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


def measure(engine: str, args: argparse.Namespace, trajectories: list) -> dict[str, Any]:
    """World-model and judge quality of one engine, with its raw outputs for the token comparison."""
    started = time.perf_counter()
    world_backend = RecordingBackend(make_backend(f"{engine}:{args.world_model}"))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    world_model = WebWorldModel(world_backend, sampling, max_axtree_chars=args.max_axtree_chars, output_mode="tree")
    records, _ = evaluate_one_step(world_model, trajectories, args.batch_size, args.seed, f"{engine}: world model")
    world_seconds = time.perf_counter() - started
    judge_backend = RecordingBackend(make_backend(f"{engine}:{args.judge}"))
    started = time.perf_counter()
    judged = evaluate_judge(judge_backend, trajectories, args.judge_max_new_tokens, args.seed)
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
    parser.add_argument("--world-model", default="smollm2-135m-wm", help="shipped or local world model")
    parser.add_argument("--judge", default="smollm2-135m-judge", help="shipped or local judge")
    parser.add_argument("--split", default="test", help="held-out split of the shipped data")
    parser.add_argument("--limit", type=int, default=0, help="first N trajectories (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=448, help="world-model token budget")
    parser.add_argument("--judge-max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-axtree-chars", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    trajectories = load_trajectories(None, args.split)[: args.limit or None]
    runs = {engine: measure(engine, args, trajectories) for engine in ENGINES}
    reference, engine = runs["transformers"], runs["ct2"]
    keys = ("valid", "f1", "strict_f1", "exact", "judge_accuracy", "judge_success_recall", "judge_failure_recall")
    report = {
        "command": shlex.join(["python", sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
        "trajectories": len(trajectories),
        "split": args.split,
        "decoding": "greedy",
        "quality": {key: {name: runs[name]["summary"].get(key) for name in ENGINES} for key in keys},
        "world_model_tokens": compare_tokens(reference["world_model_outputs"], engine["world_model_outputs"]),
        "judge_tokens": compare_tokens(reference["judge_outputs"], engine["judge_outputs"]),
        "seconds": {name: {k: runs[name][k] for k in ("world_model_seconds", "judge_seconds")} for name in ENGINES},
        "summaries": {name: runs[name]["summary"] for name in ENGINES},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("quality", "world_model_tokens", "judge_tokens", "seconds")}, indent=1))
    print(f"saved {args.output}")
    return report


if __name__ == "__main__":
    main()
