"""Supervised fine-tuning of the web policy on expert trajectories: the start the paper's RL begins from.

The paper initialises DynaWeb from NNetNav's SFT checkpoints; this is the same step on our data.
Each expert trajectory becomes *one* multi-turn conversation (system prompt, then observation and
policy turns alternating), tokenized by :func:`dynaweb_trainer.encoding.encode_expert_trajectory`,
the very encoding the RL trainer optimises. The loss covers only the policy's own tokens (its
``REASON: ... ACTION: ...`` turns): the system prompt, every observation and the chat template's
role headers are labelled ``-100``. Training is TRL's :class:`~trl.SFTTrainer` on the pre-tokenized
conversations, with LoRA (peft) by default or full fine-tuning.

Command line::

    dynaweb-sft --output_dir runs/sft-smollm2                       # LoRA on the shipped expert data
    dynaweb-sft --model_name_or_path tiny-random --max_steps 5 --output_dir /tmp/sft-smoke
    dynaweb-sft --config sft.yaml                                   # any field below, as YAML
    dynaweb-sft --output_dir runs/sft-smollm2 --resume_from_checkpoint last

The output directory receives the adapter (or full model) and the tokenizer, loadable by
``dynaweb-eval --policy <output_dir>``, plus ``sft_summary.json``.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import TrlParser

from dynaweb_env.agent import (
    PAGE_HISTORIES,
    PAGE_HISTORY_HELP,
    POLICY_SYSTEM_PROMPT,
    check_page_history,
    policy_system_prompt,
)
from dynaweb_env.compat.transformers import word_negated_flags
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import EXPERT_TRAJECTORIES
from dynaweb_env.models import name_adapter_base

from .checkpoint_state import checkpoint_on_interrupt, exit_interrupted
from .sft_base import (
    IGNORE_INDEX,
    LabelledHeadSFTTrainer,
    TrajectorySFTConfig,
    load_training_tokenizer,
    resolve_checkpoint,
    select_trajectories,
)


@dataclass
class PolicySFTConfig(TrajectorySFTConfig):
    r"""Configuration of :func:`train_policy_sft` (and the ``dynaweb-sft`` command).

    Every field of :class:`~trl.SFTConfig` (and so of :class:`~transformers.TrainingArguments`) is
    accepted as well; only the defaults below differ from TRL's.

    Parameters:
        model_name_or_path (`str`, *optional*, defaults to `"smollm2-135m"`):
            Policy to fine-tune: an embedded model name (`"smollm2-135m"`, `"tiny-random"`) or a local
            checkpoint directory.
        dataset_path (`list[str]`, *optional*):
            Expert trajectory files (JSONL in the trajectory schema) or directories of them. Defaults to
            the shipped `dynaweb_env/data/builtin/miniwob_small.jsonl`.
        dataset_split (`str` or `None`, *optional*, defaults to `"train"`):
            Keep trajectories whose `metadata["split"]` equals this; `None` (or `"all"`) keeps all.
        successful_only (`bool`, *optional*, defaults to `True`):
            Train only on trajectories marked `success`: imitation of failures teaches failing.
        response_style (`str`, *optional*, defaults to `"compact"`):
            Policy response format and system prompt (`"compact"` or the paper's five-section `"paper"`), see
            [`dynaweb_env.agent.policy_system_prompt`]. Expert turns are always written `REASON: ... ACTION: ...`.
        max_axtree_chars (`int`, *optional*, defaults to `4000`):
            Character budget of each accessibility tree in the prompt (`0`: no limit). Use the same value
            at evaluation and RL time, so the policy sees what it was trained on.
        page_history (`str`, *optional*, defaults to `"full"`):
            Pages after the first whole (`"full"`) or as edits of the page before (`"edits"`), see
            [`dynaweb_env.agent.observation_edits_message`], or `"actions"`: every turn its own example, the latest
            page and the actions so far ([`dynaweb_env.agent.observation_actions_message`]); the same value at
            evaluation and RL time.
        use_peft (`bool`, *optional*, defaults to `True`):
            Train a LoRA adapter (peft) instead of all weights.
        lora_r (`int`, *optional*, defaults to `16`):
            LoRA rank.
        lora_alpha (`int`, *optional*, defaults to `32`):
            LoRA scaling numerator (the update is scaled by `lora_alpha / lora_r`).
        lora_dropout (`float`, *optional*, defaults to `0.05`):
            Dropout on the LoRA branch.
        lora_target_modules (`list[str]`, *optional*, defaults to `["all-linear"]`):
            Modules that receive adapters; `["all-linear"]` targets every linear layer but the output head.

    > Defaults that differ from [`~trl.SFTConfig`]: `output_dir="runs/sft"`, `learning_rate=1e-3` (a LoRA
    > rate; 2e-4 left the loss at 1.13 after 15 steps where 1e-3 reached 0.04 in 30), `num_train_epochs=3`,
    > `max_length=4096` (multi-turn episodes are long),
    > `per_device_train_batch_size=1` with `gradient_accumulation_steps=8` and `gradient_checkpointing=True` (a
    > step's memory is its episodes' activations: 8 episodes at once passed 8.8 GB, one checkpointed ~2 GB),
    > `bf16` (autocast) where a CUDA device or the CPU (AVX-512 BF16 / AMX) supports it (`--bf16 false`: fp32),
    > `logging_steps=1`,
    > `save_steps=50`, `save_total_limit=2`, `report_to="none"`.
    """

    output_dir: str = field(
        default="runs/sft", metadata={"help": "Where checkpoints, the adapter/model and tokenizer go."}
    )
    dataset_path: list[str] | None = field(
        default=None,
        metadata={"help": "Expert trajectory JSONL files or directories (default: the shipped miniwob_small.jsonl)."},
    )
    successful_only: bool = field(default=True, metadata={"help": "Train only on successful trajectories."})
    response_style: str = field(
        default="compact", metadata={"help": "Policy system prompt style.", "choices": ["compact", "paper"]}
    )
    max_axtree_chars: int = field(
        default=4000, metadata={"help": "Character budget of each accessibility tree in the prompt (0: no limit)."}
    )
    page_history: str = field(
        default="full",
        metadata={"help": PAGE_HISTORY_HELP, "choices": list(PAGE_HISTORIES)},
    )

    # Defaults overridden from TrajectorySFTConfig / SFTConfig.
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the expert data."})
    max_length: int | None = field(default=4096, metadata={"help": "Longest tokenized episode; longer ones are cut."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every this many steps."})

    def __post_init__(self) -> None:
        if self.response_style not in ("compact", "paper"):
            raise ValueError(f"response_style must be 'compact' or 'paper', got {self.response_style!r}")
        if self.max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {self.max_axtree_chars}")
        check_page_history(self.page_history)
        super().__post_init__()


def load_expert_trajectories(
    paths: Sequence[str | os.PathLike[str]] | None = None,
    split: str | None = "train",
    successful_only: bool = True,
) -> list[Trajectory]:
    """Read expert trajectories for SFT.

    Args:
        paths: JSONL files or directories (default: the shipped expert demonstrations).
        split: Keep trajectories with ``metadata["split"] == split``; ``None`` keeps all.
        successful_only: Drop trajectories not marked ``success``.

    Returns:
        The selected trajectories, in file order. Corrupt lines are skipped with a warning naming them.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If nothing is left after selection (the message says what the files hold).
    """
    selected = select_trajectories(paths, [EXPERT_TRAJECTORIES], split, kind="expert trajectory")
    if successful_only:
        selected = [t for t in selected if t.success]
        if not selected:
            raise ValueError("no successful trajectories to imitate (set successful_only=False to use them all)")
    return selected


def build_sft_example(prompt_ids: Sequence[int], completion_ids: Sequence[int], env_mask: Sequence[int]) -> dict:
    """One pre-tokenized SFT example from an encoded episode.

    ``input_ids`` is the prompt followed by the completion; ``labels`` copies a token only where
    the policy produced it (``env_mask == 1`` in the completion) and is :data:`IGNORE_INDEX`
    everywhere else: the prompt, the observations and the template's role headers. The model shifts
    labels itself, so position ``i`` of ``labels`` is the target for token ``i``.

    Raises:
        ValueError: If ``env_mask`` and ``completion_ids`` differ in length or no token is the policy's.
    """
    if len(env_mask) != len(completion_ids):
        raise ValueError(f"env_mask has {len(env_mask)} entries for {len(completion_ids)} completion tokens")
    labels = [IGNORE_INDEX] * len(prompt_ids)
    labels += [token if keep else IGNORE_INDEX for token, keep in zip(completion_ids, env_mask, strict=True)]
    if all(label == IGNORE_INDEX for label in labels):
        raise ValueError("episode has no policy tokens to learn from")
    return {"input_ids": [*prompt_ids, *completion_ids], "labels": labels}


def build_sft_dataset(
    tokenizer: Any,
    trajectories: Sequence[Trajectory],
    max_axtree_chars: int = 0,
    system_prompt: str = POLICY_SYSTEM_PROMPT,
    page_history: str = "full",
) -> Any:
    """A pre-tokenized ``datasets.Dataset`` (``input_ids``, ``labels``, ``trajectory_id``), one row per episode (one
    per turn with ``page_history="actions"``, each turn's own prompt and answer).

    Every trajectory is encoded by :func:`dynaweb_trainer.encoding.encode_expert_trajectory`, the encoding
    the RL trainer uses, so SFT and GSPO optimise the same tokens.
    """
    from datasets import Dataset

    from .encoding import EpisodeEncoder, encode_expert_trajectory

    encoder = EpisodeEncoder(tokenizer, system_prompt, max_axtree_chars, page_history)
    rows = []
    for trajectory in trajectories:
        episode = encode_expert_trajectory(encoder, trajectory)
        if episode.per_turn:
            examples = [build_sft_example(prompt, answer, [1] * len(answer)) for prompt, answer in episode.turns()]
        else:
            examples = [build_sft_example(episode.prompt_ids, episode.completion_ids, episode.env_mask)]
        rows += [{**row, "trajectory_id": trajectory.id} for row in examples]
    return Dataset.from_list(rows)


class SFTDataError(ValueError):
    """The data cannot train anything under the given settings (the message says which flag to change)."""


def check_policy_tokens_kept(labels: Sequence[Sequence[int]], max_length: int | None) -> None:
    """Refuse a ``max_length`` that cuts every episode before its first policy token (nothing would be learned).

    Raises:
        SFTDataError: If no episode keeps a policy token within its first ``max_length`` tokens.
    """
    if not max_length or not labels:
        return
    firsts = [next((i for i, label in enumerate(row) if label != IGNORE_INDEX), len(row)) for row in labels]
    if min(firsts) >= max_length:
        raise SFTDataError(
            f"--max_length {max_length} cuts every episode before its first action (the earliest starts at token "
            f"{min(firsts)}), so there is nothing to learn: raise --max_length above {min(firsts)} "
            f"(default 4096), or shorten pages with --max_axtree_chars"
        )


def build_sft_trainer(
    config: PolicySFTConfig, trajectories: Sequence[Trajectory] | None = None
) -> tuple[LabelledHeadSFTTrainer, dict[str, Any]]:
    """Load the data, the tokenizer and the model, and build the :class:`PolicySFTTrainer` (nothing trained yet).

    Args:
        config: What to train and how.
        trajectories: Use these instead of reading ``config.dataset_path`` (for programmatic callers).

    Returns:
        The trainer and statistics of its data (trajectories, tasks, token counts, truncations).
    """
    if trajectories is None:
        trajectories = load_expert_trajectories(config.dataset_path, config.dataset_split, config.successful_only)
    model_path, tokenizer = load_training_tokenizer(config.model_name_or_path)
    system_prompt = policy_system_prompt(config.response_style)  # type: ignore[arg-type]
    dataset = build_sft_dataset(tokenizer, trajectories, config.max_axtree_chars, system_prompt, config.page_history)
    lengths = [len(ids) for ids in dataset["input_ids"]]
    check_policy_tokens_kept(dataset["labels"], config.max_length)
    data_stats = {
        "trajectories": len(trajectories),
        "examples": len(lengths),
        "tasks": dict(Counter(t.task_id for t in trajectories)),
        "tokens": sum(lengths),
        "policy_tokens": sum(sum(label != IGNORE_INDEX for label in labels) for labels in dataset["labels"]),
        "max_episode_tokens": max(lengths),
        "truncated_episodes": sum(length > config.max_length for length in lengths) if config.max_length else 0,
    }
    trainer = LabelledHeadSFTTrainer(
        model=model_path,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=config.peft_config(),
    )
    return trainer, data_stats


def train_policy_sft(
    config: PolicySFTConfig, trajectories: Sequence[Trajectory] | None = None, command: str | None = None
) -> dict[str, Any]:
    """Fine-tune the policy on expert trajectories with TRL's ``SFTTrainer`` and save it.

    Args:
        config: What to train and how.
        trajectories: Use these instead of reading ``config.dataset_path`` (for programmatic callers).
        command: The command line to record in the summary (default: this process's ``sys.argv``).

    Returns:
        The run summary (also written to ``<output_dir>/sft_summary.json``): data sizes, first and last
        logged loss, runtime, where the model went.

    Raises:
        TrainingInterrupted: On Ctrl-C during training, once the last finished update is saved as a checkpoint.
    """
    start = time.perf_counter()
    resume = resolve_checkpoint(config)
    trainer, data_stats = build_sft_trainer(config, trajectories)
    with checkpoint_on_interrupt(trainer, config.output_dir):  # Ctrl-C: the last finished update is saved
        result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(config.output_dir)
    trainer.processing_class.save_pretrained(config.output_dir)
    if trainer.is_world_process_zero():
        name_adapter_base(config.output_dir, config.model_name_or_path)

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    summary = {
        "model": config.model_name_or_path,
        "output_dir": str(config.output_dir),
        "adapter": bool(config.use_peft),
        **data_stats,
        "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "steps": trainer.state.global_step,
        "resumed_from": resume,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_loss": result.training_loss,
        "runtime_s": round(time.perf_counter() - start, 1),
        "command": command or shlex.join(sys.argv),
    }
    if trainer.is_world_process_zero():
        (Path(config.output_dir) / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """A short human-readable report of a :func:`train_policy_sft` run."""
    kind = "LoRA adapter" if summary["adapter"] else "full model"
    loss = (
        f"loss {summary['first_loss']:.3f} -> {summary['last_loss']:.3f}" if summary["first_loss"] is not None else ""
    )
    return "\n".join(
        [
            f"SFT of {summary['model']}: {summary['steps']} steps in {summary['runtime_s']} s, {loss}",
            f"  data: {summary['trajectories']} trajectories over {len(summary['tasks'])} tasks, "
            f"{summary['tokens']} tokens ({summary['policy_tokens']} policy tokens in the loss), "
            f"longest {summary['max_episode_tokens']}, {summary['truncated_episodes']} truncated",
            f"  saved {kind} ({summary['trainable_parameters']:,} trainable parameters) and tokenizer "
            f"to {summary['output_dir']}",
        ]
    )


def parse_config(argv: Sequence[str] | None = None) -> PolicySFTConfig:
    """Parse command-line arguments (``--config x.yaml`` gives defaults that flags override)."""
    parser = word_negated_flags(TrlParser(PolicySFTConfig, prog="dynaweb-sft"))
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-sft``: parse ``argv`` (and ``--config x.yaml``), train, print the summary.

    Returns:
        ``0`` on success; ``2`` (with the reason on stderr) when the data or a checkpoint to resume is
        missing or unusable, before any model is loaded; ``130`` after Ctrl-C (one line says what was saved).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(argv)
        resolve_checkpoint(config)
        trajectories = load_expert_trajectories(config.dataset_path, config.dataset_split, config.successful_only)
    except (FileNotFoundError, ValueError) as error:
        print(f"dynaweb-sft: error: {error}", file=sys.stderr)
        return 2
    try:
        summary = train_policy_sft(config, trajectories, command=shlex.join(["dynaweb-sft", *argv]))
    except SFTDataError as error:
        print(f"dynaweb-sft: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        return exit_interrupted("dynaweb-sft", interrupt, config.output_dir)
    print(format_summary(summary))
    return 0


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()
