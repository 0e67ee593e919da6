"""Compact prompts vs the paper's, fp32 vs bf16: tokens per training example and seconds per LoRA SFT step.

Command (the one that produced ``benchmarks/results/prompt_compaction/prompt_compaction.json``)::

    python benchmarks/prompt_compaction.py --examples 3 --time world_model_patch judge \
        --variants paper-fp32 compact-fp32 compact-bf16

1. **Tokens per example** (exact, no training): every example ``dynaweb-train-wm`` builds from the training
   data (``--data``, default the shipped data; its train split), for the tree-mode and patch-mode world models and
   for the judge, tokenized with the model's chat template, once with ``--prompt_style paper`` (the paper's long
   system prompts, as the shipped adapters were first trained) and once with ``--prompt_style compact``: mean
   tokens per example, prompt and target.
2. **Seconds per training step**, before and after: the same LoRA SFT trainer (``dynaweb_trainer.world_model_sft``,
   its defaults: 4 examples per optimizer step) in each ``--variants`` (prompt style x precision: ``paper-fp32``
   is how the shipped adapters were trained, ``compact-bf16`` the default of new runs on a CPU with bf16
   instructions) times ``training_step`` (forward, loss, backward) on the same first ``--examples`` examples,
   the variants taking turns example by example, so a machine shared with other jobs slows all alike
   (:func:`step_seconds`). The same examples at the same weights in both precisions also give the loss and
   gradient agreement of bf16 autocast with fp32.
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
from typing import Any

from dynaweb_env.models import resolve_model
from dynaweb_env.world_model.prompts import PROMPT_STYLES
from dynaweb_trainer.sft_base import cpu_supports_bf16
from dynaweb_trainer.world_model_sft import (
    IGNORE_INDEX,
    WorldModelSFTConfig,
    build_world_model_dataset,
    load_trajectories,
)

RESULTS = Path(__file__).parent / "results" / "prompt_compaction" / "prompt_compaction.json"
#: What is measured: name -> the dynaweb-train-wm options that build its examples.
KINDS = {
    "world_model_tree": {"examples": "world_model", "output_mode": "tree"},
    "world_model_patch": {"examples": "world_model", "output_mode": "patch"},
    "judge": {"examples": "judge"},
}


def token_counts(model: str, trajectories: list) -> dict:
    """Mean tokens per example (all, prompt, target) of every kind in every prompt style."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)), trust_remote_code=False)
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


#: Training variants timed side by side: name -> (prompt style, bf16 autocast). ``paper-fp32`` is how the shipped
#: adapters were trained; ``compact-bf16`` is the default of new runs on a CPU with bf16 instructions.
VARIANTS = {
    "paper-fp32": ("paper", False),
    "compact-fp32": ("compact", False),
    "compact-bf16": ("compact", True),
    "paper-bf16": ("paper", True),
}


def _lora_gradient(trainer) -> Any:
    """The trainable parameters' gradients as one flat vector (then cleared)."""
    import torch

    grads = [
        p.grad.detach().flatten().clone() for p in trainer.model.parameters() if p.requires_grad and p.grad is not None
    ]
    trainer.model.zero_grad(set_to_none=True)
    return torch.cat(grads) if grads else torch.zeros(0)


def step_seconds(
    model: str, trajectories: list, kinds: list[str], variants: list[str], examples: int, on_kind=None
) -> dict:
    """Seconds, tokens and loss per training example of each kind and variant, the variants taking turns.

    One trainer per variant (``build_world_model_trainer``: the same LoRA model, loss and data order; the
    variant sets the prompt style and ``bf16``) runs ``trainer.training_step`` (forward, loss on the target
    tokens, backward) on the first ``examples`` examples of its data loader, the variants taking turns example by
    example (the order rotating), so a machine shared with other jobs slows all alike. An optimizer step is
    ``gradient_accumulation_steps`` such examples plus AdamW on the LoRA weights (negligible): its time is
    estimated as ``gradient_accumulation_steps`` x the mean seconds per example.

    Variants of the same prompt style see the same examples at the same (initial) weights with the same dropout
    seed, so their losses and gradients compare directly: ``bf16_vs_fp32`` gives the largest relative loss
    difference and the smallest cosine similarity of the LoRA gradients over the examples.
    """
    import itertools

    import torch

    from dynaweb_trainer.world_model_sft import build_world_model_trainer

    result = {}
    for kind in kinds:
        trainers, batches = {}, {}
        for variant in variants:
            style, bf16 = VARIANTS[variant]
            config = WorldModelSFTConfig(
                output_dir=tempfile.mkdtemp(), model_name_or_path=model, prompt_style=style, bf16=bf16, **KINDS[kind]
            )
            torch.manual_seed(0)  # the same LoRA initialisation in every variant
            trainer, _ = build_world_model_trainer(config, trajectories)
            trainer.model.train()
            # Set by Trainer.train() for each step; training_step divides the loss by it.
            trainer.current_gradient_accumulation_steps = config.gradient_accumulation_steps
            trainers[variant] = trainer
            batches[variant] = list(itertools.islice(trainer.get_train_dataloader(), examples))
        seconds: dict[str, list[float]] = {variant: [] for variant in variants}
        tokens: dict[str, list[int]] = {variant: [] for variant in variants}
        losses: dict[str, list[float]] = {variant: [] for variant in variants}
        gradients: dict[str, list] = {variant: [] for variant in variants}
        for index in range(examples):
            shift = index % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                trainer, batch = trainers[variant], batches[variant][index]
                torch.manual_seed(1000 + index)  # the same LoRA dropout masks in every variant
                started = time.perf_counter()
                loss = trainer.training_step(trainer.model, batch)
                seconds[variant].append(round(time.perf_counter() - started, 2))
                tokens[variant].append(int(batch["input_ids"].numel()))
                losses[variant].append(round(float(loss) * trainer.current_gradient_accumulation_steps, 5))
                gradients[variant].append(_lora_gradient(trainer))
                print(f"{kind} example {index} {variant}: {seconds[variant][-1]:.1f} s", file=sys.stderr, flush=True)
        accumulation = WorldModelSFTConfig(output_dir="/tmp/unused").gradient_accumulation_steps
        means = {variant: statistics.mean(values) for variant, values in seconds.items()}
        result[kind] = {
            "seconds_per_example": seconds,
            "tokens_per_example": tokens,
            "loss_per_example": losses,
            "mean_seconds_per_example": {variant: round(mean, 2) for variant, mean in means.items()},
            "est_seconds_per_step": {variant: round(accumulation * mean, 1) for variant, mean in means.items()},
            "tokens_per_second": {
                variant: round(sum(tokens[variant]) / sum(seconds[variant]), 1) for variant in variants
            },
            "seconds_over_paper_fp32": {variant: round(means[variant] / means["paper-fp32"], 3) for variant in variants}
            if "paper-fp32" in means
            else None,
            "bf16_vs_fp32": _precision_agreement(variants, losses, gradients),
        }
        if on_kind is not None:  # save each kind as it is measured: a long run interrupted keeps what it has
            on_kind(result)
    return result


def _precision_agreement(variants: list[str], losses: dict, gradients: dict) -> dict:
    """Per prompt style timed in both precisions: max relative loss difference, min gradient cosine similarity."""
    import torch

    agreement = {}
    for style in PROMPT_STYLES:
        low, full = f"{style}-bf16", f"{style}-fp32"
        if low not in variants or full not in variants:
            continue
        relative = [abs(a - b) / max(abs(b), 1e-8) for a, b in zip(losses[low], losses[full], strict=True)]
        cosine = [
            float(torch.nn.functional.cosine_similarity(a, b, dim=0)) if a.numel() else None
            for a, b in zip(gradients[low], gradients[full], strict=True)
        ]
        agreement[style] = {
            "max_relative_loss_difference": round(max(relative), 5),
            "min_gradient_cosine": round(min(c for c in cosine if c is not None), 5) if any(cosine) else None,
        }
    return agreement


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Embedded model whose tokenizer and weights are used.")
    parser.add_argument("--examples", type=int, default=4, help="Timed examples per style (0: tokens only).")
    parser.add_argument("--time", nargs="+", default=["world_model_tree", "judge"], choices=list(KINDS))
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["paper-fp32", "compact-fp32", "compact-bf16"],
        choices=list(VARIANTS),
        help="Prompt style x precision variants timed side by side.",
    )
    parser.add_argument(
        "--data",
        nargs="+",
        default=None,
        help="Trajectory files or directories (default: the shipped data); their train split is used.",
    )
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    # the training split, as dynaweb-train-wm reads it (default: the shipped data)
    trajectories = load_trajectories(args.data)
    report = {
        "command": shlex.join(
            ["python", "benchmarks/prompt_compaction.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "model": args.model,
        "data": {"trajectories": len(trajectories), "split": "train", "paths": args.data or "shipped"},
        "tokens_per_example": token_counts(args.model, trajectories),
    }
    print(json.dumps(report["tokens_per_example"], indent=2))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    if args.examples > 0:
        import torch

        header = {
            "timed_examples_per_style": args.examples,
            "examples_per_step": WorldModelSFTConfig(output_dir="/tmp/unused").gradient_accumulation_steps,
            "load_average_at_start": os.getloadavg()[0],
            "cpu_supports_bf16": cpu_supports_bf16(),
            "torch_threads": torch.get_num_threads(),
        }

        def save(measured: dict) -> None:
            report["train_step"] = {**header, **measured}
            output.write_text(json.dumps(report, indent=2) + "\n")

        save(step_seconds(args.model, trajectories, args.time, args.variants, args.examples, on_kind=save))
        print(json.dumps(report["train_step"], indent=2))
    return report


if __name__ == "__main__":
    main()
