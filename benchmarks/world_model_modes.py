"""World-model fidelity and output modes: trained vs untrained, tree vs patch, on held-out real transitions.

Command (the one that produced ``benchmarks/results/world_model_modes/world_model_modes.json`` and
``world_model_modes_eval.json`` with its drift plot ``world_model_modes_eval.png``)::

    python benchmarks/world_model_modes.py --max-depth 2 --no-judge   # ~30 min on 2 CPU cores
    python benchmarks/world_model_modes.py --generate 0   # oracle token cost only, seconds

1. **Oracle token cost** (exact, no generation): over every real transition of the shipped expert data, the
   tokens of the tree-mode target (:func:`~dynaweb_env.world_model.prompts.format_world_model_target`: Δ, then the
   paper's full next tree) vs the patch-mode target (:func:`~dynaweb_env.world_model.patch.format_patch_target`:
   the edits, which are Δ), counted with the model's tokenizer: what a world model that writes the right answer
   generates in each mode.
2. **Generation**, in one ``dynaweb-eval-wm`` run on the held-out (``test`` split) transitions of the shipped
   expert and exploration data: the ``copy`` baseline (predicts "nothing changes"), the untrained base model
   prompted with the paper's system prompt (tree mode), the shipped tree-mode world model and the
   shipped patch-mode world model (each in its own mode). ``comparison`` in the JSON holds the issue's criteria:
   patch tokens per transition over tree at equal or better strict F1, and each trained model's strict-F1 points
   over the untrained one with its format validity; and, as the harder reference, strict F1 against ``copy``.
   Models are compared on *strict* F1 (an invalid output scores 0; see :mod:`dynaweb_trainer.evaluate_world_model`):
   the plain F1 of a malformed output is the F1 of the current page the parser falls back to, which is ``copy``'s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from dynaweb_env.axtree import structural_diff
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES as BUILTIN_TRAJECTORIES
from dynaweb_env.models import resolve_model
from dynaweb_env.world_model.patch import format_patch_target
from dynaweb_env.world_model.prompts import format_world_model_target
from dynaweb_trainer.evaluate_world_model import evaluate_world_models, parse_args
from dynaweb_trainer.world_model_sft import is_terminal_transition

RESULTS = Path(__file__).parent / "results" / "world_model_modes" / "world_model_modes.json"


def oracle_token_cost(model: str) -> dict:
    """Tokens of the tree-mode and patch-mode targets of every real transition of the shipped data."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)), trust_remote_code=False)
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


def compare_modes(summaries: dict[str, dict], tree_label: str, patch_label: str, base_label: str | None) -> dict:
    """Patch vs tree (and trained vs untrained) from one ``dynaweb-eval-wm`` run, with the issue's criteria."""
    tree, patch = summaries[tree_label], summaries[patch_label]
    comparison = {
        "tree": tree_label,
        "patch": patch_label,
        "tokens_per_transition": {"tree": tree["tokens"], "patch": patch["tokens"]},
        "patch_over_tree_tokens": round(patch["tokens"] / tree["tokens"], 3) if tree["tokens"] else None,
        "seconds_per_transition": {"tree": tree["seconds"], "patch": patch["seconds"]},
        "f1": {"tree": tree["f1"], "patch": patch["f1"]},
        "strict_f1": {"tree": tree["strict_f1"], "patch": patch["strict_f1"]},
        "valid": {"tree": tree["valid"], "patch": patch["valid"]},
    }
    comparison["patch_at_most_25pct_tokens_at_equal_or_better_f1"] = bool(
        comparison["patch_over_tree_tokens"] is not None
        and comparison["patch_over_tree_tokens"] <= 0.25
        and patch["strict_f1"] >= tree["strict_f1"]
    )
    if "copy" in summaries:
        comparison["copy_f1"] = summaries["copy"]["f1"]
        for mode, trained in (("tree", tree), ("patch", patch)):
            comparison[f"{mode}_strict_f1_points_over_copy"] = round(
                100 * (trained["strict_f1"] - comparison["copy_f1"]), 1
            )
    if base_label in summaries:
        base = summaries[base_label]
        comparison["untrained"] = {k: base[k] for k in ("f1", "strict_f1", "valid")} | {"label": base_label}
        for mode, trained in (("tree", tree), ("patch", patch)):
            points = round(100 * (trained["strict_f1"] - base["strict_f1"]), 1)
            comparison[f"{mode}_strict_f1_points_over_untrained"] = points
            comparison[f"{mode}_beats_untrained_by_20_points_with_95pct_validity"] = bool(
                points >= 20 and trained["valid"] >= 0.95
            )
    return comparison


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree-model", default="smollm2-135m-wm", help="World model evaluated in tree mode.")
    parser.add_argument("--patch-model", default="smollm2-135m-wm-patch", help="World model evaluated in patch mode.")
    parser.add_argument("--base-model", default="smollm2-135m", help="Untrained reference ('' to skip).")
    parser.add_argument("--limit", type=int, default=0, help="Held-out trajectories to generate on (0: all).")
    parser.add_argument("--max-depth", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=448)
    parser.add_argument("--generate", type=int, default=1, help="0: oracle token cost only.")
    parser.add_argument("--judge", action=argparse.BooleanOptionalAction, default=True, help="Measure judge accuracy.")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    report: dict = {"command": shlex.join(["python", "benchmarks/world_model_modes.py", *argv])}
    report["oracle"] = oracle_token_cost("smollm2-135m")
    print(json.dumps(report["oracle"], indent=2))
    if args.generate:
        models = ["copy", *([args.base_model] if args.base_model else []), args.tree_model, args.patch_model]
        eval_argv = ["--world-models", *models, "--output-modes", "tree", "--limit", str(args.limit)]
        eval_argv += ["--max-depth", str(args.max_depth), "--max-new-tokens", str(args.max_new_tokens)]
        eval_argv += ["--output", str(Path(args.output).with_name("world_model_modes_eval.json"))]
        eval_argv += [] if args.judge else ["--no-judge"]
        evaluation = evaluate_world_models(parse_args(eval_argv), shlex.join(["dynaweb-eval-wm", *eval_argv]))
        summaries = {label: result["summary"] for label, result in evaluation["results"].items()}
        report["generation"] = {"command": evaluation["command"], "table": evaluation["table"], "summaries": summaries}
        base_label = args.base_model or None
        report["comparison"] = compare_modes(summaries, args.tree_model, args.patch_model, base_label)
        print(evaluation["table"])
        print(json.dumps(report["comparison"], indent=2))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
