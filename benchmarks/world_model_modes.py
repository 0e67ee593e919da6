"""Tree mode vs patch mode of the world model: oracle target cost, and generation on held-out transitions.

Command (the one that produced ``benchmarks/results/world_model_modes.json``)::

    python benchmarks/world_model_modes.py --model smollm2-135m --limit 1 --max-new-tokens 96

1. **Oracle token cost** (exact, no generation): over every real transition of the shipped data, the tokens of
   the tree-mode target (:func:`~dynaweb_env.world_model.prompts.format_world_model_target`, the paper's full
   next tree) vs the patch-mode target (:func:`~dynaweb_env.world_model.patch.format_patch_target`), both with
   the structural-diff Δ, counted with the model's tokenizer. This is the ceiling of the saving: what a world
   model that writes the right answer generates in each mode.
2. **Generation**: ``dynaweb-eval-wm`` with ``--output-modes tree patch`` on the same held-out transitions
   (tokens per transition, latency, validity, F1). An untrained model has not learned either format, so these
   numbers measure the prompt variants, not trained fidelity; ``--generate 0`` skips this part.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.labels import structural_diff
from dynaweb_env.models import resolve_model
from dynaweb_env.world_model.patch import format_patch_target
from dynaweb_env.world_model.prompts import format_world_model_target
from dynaweb_trainer.evaluate_world_model import evaluate_world_models, parse_args
from dynaweb_trainer.world_model_sft import BUILTIN_TRAJECTORIES, is_terminal_transition

RESULTS = Path(__file__).parent / "results" / "world_model_modes.json"


def oracle_token_cost(model: str) -> dict:
    """Tokens of the tree-mode and patch-mode targets of every real transition of the shipped data."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)))
    tree_tokens, patch_tokens = [], []
    for trajectory in read_trajectories(BUILTIN_TRAJECTORIES):
        for index in range(len(trajectory.steps) - 1):
            before, after = trajectory.steps[index], trajectory.steps[index + 1]
            if not before.action.strip():
                continue
            changes = structural_diff(before.axtree, after.axtree, before.url, after.url)
            next_url = after.url if after.url != before.url else ""
            terminal = is_terminal_transition(trajectory, index)
            tree = format_world_model_target(changes, next_url, after.axtree, terminal)
            patch = format_patch_target(next_url, before.axtree, after.axtree, terminal)
            tree_tokens.append(len(tokenizer(tree, add_special_tokens=False)["input_ids"]))
            patch_tokens.append(len(tokenizer(patch, add_special_tokens=False)["input_ids"]))
    ratios = [p / t for p, t in zip(patch_tokens, tree_tokens, strict=True)]
    return {
        "tokenizer": model,
        "transitions": len(tree_tokens),
        "tree_tokens_mean": round(statistics.mean(tree_tokens), 1),
        "patch_tokens_mean": round(statistics.mean(patch_tokens), 1),
        "tree_tokens_total": sum(tree_tokens),
        "patch_tokens_total": sum(patch_tokens),
        "patch_over_tree_total": round(sum(patch_tokens) / sum(tree_tokens), 3),
        "patch_over_tree_median": round(statistics.median(ratios), 3),
        "tree_tokens_max": max(tree_tokens),
        "patch_tokens_max": max(patch_tokens),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="World model (and tokenizer) spec.")
    parser.add_argument("--limit", type=int, default=1, help="Held-out trajectories to generate on.")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--generate", type=int, default=1, help="0: oracle token cost only.")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    report: dict = {"command": shlex.join(["python", "benchmarks/world_model_modes.py", *argv])}
    report["oracle"] = oracle_token_cost(args.model)
    print(json.dumps(report["oracle"], indent=2))
    if args.generate:
        eval_argv = [
            "--world-models",
            args.model,
            "--output-modes",
            "tree",
            "patch",
            "--limit",
            str(args.limit),
            "--max-depth",
            "1",
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--no-judge",
            "--output",
            str(Path(args.output).with_name("world_model_modes_eval.json")),
        ]
        evaluation = evaluate_world_models(parse_args(eval_argv), shlex.join(["dynaweb-eval-wm", *eval_argv]))
        report["generation"] = {
            "command": evaluation["command"],
            "table": evaluation["table"],
            "summaries": {label: r["summary"] for label, r in evaluation["results"].items()},
        }
        print(evaluation["table"])
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
