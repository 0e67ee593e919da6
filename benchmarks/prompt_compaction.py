"""Compact prompts vs the paper's: tokens per training example and seconds per LoRA SFT step, side by side.

Command (the one that produced ``benchmarks/results/prompt_compaction.json``)::

    python benchmarks/prompt_compaction.py --steps 2 --rounds 2

1. **Tokens per example** (exact, no training): every example ``dynaweb-train-wm`` builds from the shipped
   training data, for the tree-mode and patch-mode world models and for the judge, tokenized with the model's
   chat template, once with ``--prompt_style paper`` (the paper's long system prompts, as the shipped adapters
   were trained) and once with ``--prompt_style compact``: mean tokens per example, prompt and target.
2. **Seconds per training step**: the same LoRA SFT trainer (``dynaweb_trainer.world_model_sft``, its defaults:
   4 examples per optimizer step) run for ``--steps`` steps from the same seed on the same examples, once per
   style, the styles interleaved over ``--rounds`` rounds, so a machine shared with other jobs slows both alike.
   Model loading and tokenizing are outside the timed region (``train_seconds`` of the run summary).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from dynaweb_env.models import resolve_model
from dynaweb_env.world_model.prompts import PROMPT_STYLES
from dynaweb_trainer.world_model_sft import (
    IGNORE_INDEX,
    WorldModelSFTConfig,
    build_world_model_dataset,
    load_trajectories,
    train_world_model,
)

RESULTS = Path(__file__).parent / "results" / "prompt_compaction.json"
#: What is measured: name -> the dynaweb-train-wm options that build its examples.
KINDS = {
    "world_model_tree": {"examples": "world_model", "output_mode": "tree"},
    "world_model_patch": {"examples": "world_model", "output_mode": "patch"},
    "judge": {"examples": "judge"},
}


def token_counts(model: str, trajectories: list) -> dict:
    """Mean tokens per example (all, prompt, target) of every kind in every prompt style."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)))
    counts: dict = {}
    for kind, options in KINDS.items():
        counts[kind] = {}
        for style in PROMPT_STYLES:
            config = WorldModelSFTConfig(output_dir="/tmp/unused", max_length=None, prompt_style=style, **options)
            rows = build_world_model_dataset(tokenizer, trajectories, config).rows
            totals = [len(row["input_ids"]) for row in rows]
            targets = [sum(label != IGNORE_INDEX for label in row["labels"]) for row in rows]
            counts[kind][style] = {
                "examples": len(rows),
                "mean_tokens": round(statistics.mean(totals), 1),
                "mean_prompt_tokens": round(statistics.mean(t - g for t, g in zip(totals, targets, strict=True)), 1),
                "mean_target_tokens": round(statistics.mean(targets), 1),
                "total_tokens": sum(totals),
            }
        paper, compact = counts[kind]["paper"]["mean_tokens"], counts[kind]["compact"]["mean_tokens"]
        counts[kind]["compact_over_paper"] = round(compact / paper, 3)
    return counts


def step_seconds(model: str, trajectories: list, kinds: list[str], steps: int, rounds: int) -> dict:
    """Seconds per LoRA SFT step of each kind and style, the styles interleaved round by round."""
    runs: dict = {kind: {style: [] for style in PROMPT_STYLES} for kind in kinds}
    for round_index in range(rounds):
        for kind in kinds:
            for style in PROMPT_STYLES if round_index % 2 == 0 else reversed(PROMPT_STYLES):
                with tempfile.TemporaryDirectory() as output_dir:
                    config = WorldModelSFTConfig(
                        output_dir=output_dir, model_name_or_path=model, max_steps=steps, save_strategy="no",
                        prompt_style=style, seed=round_index, **KINDS[kind],
                    )  # fmt: skip
                    summary = train_world_model(config, trajectories, command="prompt_compaction")
                seconds = summary["train_seconds"] / steps
                runs[kind][style].append(round(seconds, 2))
                print(f"round {round_index} {kind} {style}: {seconds:.1f} s/step", file=sys.stderr, flush=True)
    result = {}
    for kind, by_style in runs.items():
        means = {style: round(statistics.mean(values), 2) for style, values in by_style.items()}
        result[kind] = {"seconds_per_step": by_style, "mean_seconds_per_step": means}
        result[kind]["compact_over_paper"] = round(means["compact"] / means["paper"], 3)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Embedded model whose tokenizer and weights are used.")
    parser.add_argument("--steps", type=int, default=2, help="Optimizer steps per timed run (0: tokens only).")
    parser.add_argument("--rounds", type=int, default=2, help="Interleaved rounds of timed runs per style.")
    parser.add_argument("--time", nargs="+", default=["world_model_tree", "judge"], choices=list(KINDS))
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    trajectories = load_trajectories()  # the shipped training split, as dynaweb-train-wm reads it by default
    report = {
        "command": shlex.join(
            ["python", "benchmarks/prompt_compaction.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "model": args.model,
        "data": {"trajectories": len(trajectories), "split": "train (shipped)"},
        "tokens_per_example": token_counts(args.model, trajectories),
    }
    print(json.dumps(report["tokens_per_example"], indent=2))
    if args.steps > 0:
        report["train_step"] = {
            "steps_per_run": args.steps,
            "rounds": args.rounds,
            "examples_per_step": WorldModelSFTConfig(output_dir="/tmp/unused").gradient_accumulation_steps,
            **step_seconds(args.model, trajectories, args.time, args.steps, args.rounds),
        }
        print(json.dumps(report["train_step"], indent=2))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
