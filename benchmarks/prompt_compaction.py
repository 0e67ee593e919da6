"""Compact prompts vs the paper's: tokens per training example and seconds per LoRA SFT step, side by side.

Command (the one that produced ``benchmarks/results/prompt_compaction.json``)::

    python benchmarks/prompt_compaction.py --examples 4 --time world_model_tree judge

1. **Tokens per example** (exact, no training): every example ``dynaweb-train-wm`` builds from the shipped
   training data, for the tree-mode and patch-mode world models and for the judge, tokenized with the model's
   chat template, once with ``--prompt_style paper`` (the paper's long system prompts, as the shipped adapters
   were trained) and once with ``--prompt_style compact``: mean tokens per example, prompt and target.
2. **Seconds per training step**: the same LoRA SFT trainer (``dynaweb_trainer.world_model_sft``, its defaults:
   4 examples per optimizer step), one per style, times ``training_step`` (forward, loss, backward) on the
   same first ``--examples`` examples, the two styles alternating example by example, so a machine shared
   with other jobs slows both alike (:func:`step_seconds`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dynaweb_env.models import resolve_model
from dynaweb_env.world_model.prompts import PROMPT_STYLES
from dynaweb_trainer.world_model_sft import (
    IGNORE_INDEX,
    WorldModelSFTConfig,
    build_world_model_dataset,
    load_trajectories,
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


def step_seconds(model: str, trajectories: list, kinds: list[str], examples: int, on_kind=None) -> dict:
    """Seconds per LoRA SFT step of each kind and style, measured example by example with the styles alternating.

    One trainer per style (``build_world_model_trainer``: the same LoRA model, loss and data order) runs
    ``trainer.training_step`` (forward, loss on the target tokens, backward) on the first ``examples`` examples
    of its data loader, the styles taking turns example by example, so a machine shared with other jobs slows
    both alike. An optimizer step is ``gradient_accumulation_steps`` such examples plus AdamW on the LoRA weights
    (negligible): its time is estimated as ``gradient_accumulation_steps`` x the mean seconds per example.
    """
    import itertools

    from dynaweb_trainer.world_model_sft import build_world_model_trainer

    result = {}
    for kind in kinds:
        trainers, batches = {}, {}
        for style in PROMPT_STYLES:
            config = WorldModelSFTConfig(
                output_dir=tempfile.mkdtemp(), model_name_or_path=model, prompt_style=style, **KINDS[kind]
            )
            trainer, _ = build_world_model_trainer(config, trajectories)
            trainer.model.train()
            # Set by Trainer.train() for each step; training_step divides the loss by it.
            trainer.current_gradient_accumulation_steps = config.gradient_accumulation_steps
            trainers[style] = trainer
            batches[style] = list(itertools.islice(trainer.get_train_dataloader(), examples))
        seconds: dict[str, list[float]] = {style: [] for style in PROMPT_STYLES}
        tokens: dict[str, list[int]] = {style: [] for style in PROMPT_STYLES}
        for index in range(examples):
            order = PROMPT_STYLES if index % 2 == 0 else tuple(reversed(PROMPT_STYLES))
            for style in order:
                trainer, batch = trainers[style], batches[style][index]
                started = time.perf_counter()
                trainer.training_step(trainer.model, batch)
                seconds[style].append(round(time.perf_counter() - started, 2))
                tokens[style].append(int(batch["input_ids"].numel()))
                print(f"{kind} example {index} {style}: {seconds[style][-1]:.1f} s", file=sys.stderr, flush=True)
        accumulation = WorldModelSFTConfig(output_dir="/tmp/unused").gradient_accumulation_steps
        means = {style: statistics.mean(values) for style, values in seconds.items()}
        result[kind] = {
            "seconds_per_example": seconds,
            "tokens_per_example": tokens,
            "mean_seconds_per_example": {style: round(mean, 2) for style, mean in means.items()},
            "est_seconds_per_step": {style: round(accumulation * mean, 1) for style, mean in means.items()},
            "compact_over_paper": round(means["compact"] / means["paper"], 3),
        }
        if on_kind is not None:  # save each kind as it is measured: a long run interrupted keeps what it has
            on_kind(result)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Embedded model whose tokenizer and weights are used.")
    parser.add_argument("--examples", type=int, default=4, help="Timed examples per style (0: tokens only).")
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
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    if args.examples > 0:
        header = {
            "timed_examples_per_style": args.examples,
            "examples_per_step": WorldModelSFTConfig(output_dir="/tmp/unused").gradient_accumulation_steps,
            "load_average_at_start": os.getloadavg()[0],
        }

        def save(measured: dict) -> None:
            report["train_step"] = {**header, **measured}
            output.write_text(json.dumps(report, indent=2) + "\n")

        save(step_seconds(args.model, trajectories, args.time, args.examples, on_kind=save))
        print(json.dumps(report["train_step"], indent=2))
    return report


if __name__ == "__main__":
    main()
