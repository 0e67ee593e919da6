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
from importlib.resources import files
from pathlib import Path
from typing import Any

from trl import SFTConfig, SFTTrainer, TrlParser

from dynaweb_env.agent import POLICY_SYSTEM_PROMPT, policy_system_prompt
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.models import name_adapter_base

#: Expert demonstrations shipped with the package (scripted experts on MiniWoB++ tasks).
BUILTIN_EXPERT_DATA = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_small.jsonl"))

#: Label of tokens left out of the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100


@dataclass
class PolicySFTConfig(SFTConfig):
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

    > Defaults that differ from [`~trl.SFTConfig`]: `output_dir="runs/sft"`, `learning_rate=2e-4` (a LoRA
    > rate), `num_train_epochs=3`, `max_length=4096` (multi-turn episodes are long), `gradient_checkpointing=False`
    > (small models on CPU: it only costs time), `bf16` on only where a CUDA device supports it, `logging_steps=1`,
    > `save_steps=50`, `save_total_limit=2`, `report_to="none"`.
    """

    output_dir: str = field(
        default="runs/sft", metadata={"help": "Where checkpoints, the adapter/model and tokenizer go."}
    )
    model_name_or_path: str = field(
        default="smollm2-135m",
        metadata={"help": "Embedded model name (smollm2-135m, tiny-random) or local checkpoint directory."},
    )
    dataset_path: list[str] | None = field(
        default=None,
        metadata={"help": "Expert trajectory JSONL files or directories (default: the shipped miniwob_small.jsonl)."},
    )
    dataset_split: str | None = field(
        default="train",
        metadata={"help": "Keep trajectories with metadata['split'] equal to this ('all' or None: keep all)."},
    )
    successful_only: bool = field(default=True, metadata={"help": "Train only on successful trajectories."})
    response_style: str = field(
        default="compact", metadata={"help": "Policy system prompt style.", "choices": ["compact", "paper"]}
    )
    max_axtree_chars: int = field(
        default=4000, metadata={"help": "Character budget of each accessibility tree in the prompt (0: no limit)."}
    )
    use_peft: bool = field(default=True, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (update scaled by lora_alpha / lora_r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["all-linear"], metadata={"help": "Modules that receive LoRA adapters."}
    )

    # Defaults overridden from SFTConfig / TrainingArguments.
    learning_rate: float = field(default=2e-4, metadata={"help": "Initial AdamW learning rate."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the expert data."})
    max_length: int | None = field(default=4096, metadata={"help": "Longest tokenized episode; longer ones are cut."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for memory."})
    logging_steps: float = field(default=1, metadata={"help": "Log every this many steps."})
    save_steps: float = field(default=50, metadata={"help": "Save a checkpoint every this many steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Experiment trackers to report to."})

    def __post_init__(self) -> None:
        if self.bf16 is None:
            # TRL turns bf16 on by default; on a CPU that is slow, so only where a GPU supports it.
            import torch

            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        if self.dataloader_pin_memory:
            import torch

            # Pinning needs an accelerator; without one torch only warns at every epoch.
            self.dataloader_pin_memory = torch.cuda.is_available()
        if isinstance(self.dataset_split, str) and self.dataset_split.lower() in ("all", "none", ""):
            self.dataset_split = None
        if self.response_style not in ("compact", "paper"):
            raise ValueError(f"response_style must be 'compact' or 'paper', got {self.response_style!r}")
        if self.max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {self.max_axtree_chars}")
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be >= 1, got {self.lora_r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path must not be empty")
        super().__post_init__()


def load_expert_trajectories(
    paths: Sequence[str | os.PathLike[str]] | None = None,
    split: str | None = "train",
    successful_only: bool = True,
) -> list[Trajectory]:
    """Read expert trajectories for SFT.

    Args:
        paths: JSONL files or directories (default: :data:`BUILTIN_EXPERT_DATA`).
        split: Keep trajectories with ``metadata["split"] == split``; ``None`` keeps all.
        successful_only: Drop trajectories not marked ``success``.

    Returns:
        The selected trajectories, in file order. Corrupt lines are skipped with a warning naming them.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If nothing is left after selection (the message says what the files hold).
    """
    paths = list(paths) if paths else [BUILTIN_EXPERT_DATA]
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"expert trajectory file not found: {path}")
    trajectories = read_trajectories(paths)
    if not trajectories:
        raise ValueError(f"no trajectories in {', '.join(map(str, paths))}")
    selected = [t for t in trajectories if split is None or t.metadata.get("split") == split]
    if not selected:
        splits = Counter(str(t.metadata.get("split")) for t in trajectories)
        raise ValueError(
            f"no trajectories with metadata['split'] == {split!r} in {', '.join(map(str, paths))}; "
            f"splits present: {dict(splits)} (use dataset_split='all' to keep every trajectory)"
        )
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
) -> Any:
    """A pre-tokenized ``datasets.Dataset`` (``input_ids``, ``labels``, ``trajectory_id``), one row per episode.

    Every trajectory is encoded by :func:`dynaweb_trainer.encoding.encode_expert_trajectory`, the encoding
    the RL trainer uses, so SFT and GSPO optimise the same tokens.
    """
    from datasets import Dataset

    from .encoding import EpisodeEncoder, encode_expert_trajectory

    encoder = EpisodeEncoder(tokenizer, system_prompt, max_axtree_chars)
    rows = []
    for trajectory in trajectories:
        episode = encode_expert_trajectory(encoder, trajectory)
        row = build_sft_example(episode.prompt_ids, episode.completion_ids, episode.env_mask)
        row["trajectory_id"] = trajectory.id
        rows.append(row)
    return Dataset.from_list(rows)


class PolicySFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` with the LM head computed only where there is a label, on CPU.

    A web episode is ~1k tokens of system prompt and pages for a few dozen policy tokens. TRL 1.16's
    fused LM head scores every position (without Triton, i.e. on CPU, in chunks over the whole
    vocabulary), so >90% of the head's work and memory goes to positions whose label is ``-100``. On
    CPU this override runs the backbone once and the head on the labelled positions only; the loss
    (summed NLL over ``num_items_in_batch``, as TRL's ``nll``) and the logged ``entropy`` /
    ``mean_token_accuracy`` are the same quantities. Anywhere else (GPU, other loss types, label
    smoothing, packing without attention mask, soft-capped logits, MoE aux loss) TRL's own
    ``compute_loss`` runs. ``tests/test_sft.py`` checks both agree.
    """

    #: Labelled positions scored per head call (bounds the ``(positions, vocab)`` logits in memory).
    head_chunk_tokens = 256

    def _scores_labels_only(self, model: Any, inputs: dict[str, Any], return_outputs: bool) -> bool:
        causal_lm = self.accelerator.unwrap_model(model)
        causal_lm = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
        config = causal_lm.config.get_text_config()
        return not (
            return_outputs
            or inputs["input_ids"].device.type != "cpu"
            or "attention_mask" not in inputs
            or "labels" not in inputs
            or self.args.loss_type != "nll"
            or self.label_smoother is not None
            or self.compute_loss_func is not None
            or self.aux_loss_enabled
            or getattr(config, "final_logit_softcapping", None)
            or getattr(config, "logit_scale", None)
            or getattr(causal_lm, "base_model", causal_lm) is causal_lm
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not self._scores_labels_only(model, inputs, return_outputs):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        import torch

        causal_lm = self.accelerator.unwrap_model(model)
        causal_lm = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
        backbone, head = causal_lm.base_model, causal_lm.get_output_embeddings()
        hidden = backbone(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False
        ).last_hidden_state
        targets = inputs["labels"][:, 1:]
        labelled = targets != IGNORE_INDEX
        hidden, targets = hidden[:, :-1][labelled], targets[labelled]

        def score(hidden_chunk, target_chunk):
            logps = torch.log_softmax(head(hidden_chunk).float(), dim=-1)
            entropy = -(logps.exp() * logps).sum(-1)
            is_top1 = logps.argmax(-1) == target_chunk
            return logps.gather(-1, target_chunk.unsqueeze(-1)).squeeze(-1), entropy, is_top1

        pieces = []
        for start in range(0, targets.numel(), self.head_chunk_tokens):
            chunk = (hidden[start : start + self.head_chunk_tokens], targets[start : start + self.head_chunk_tokens])
            if torch.is_grad_enabled():
                pieces.append(torch.utils.checkpoint.checkpoint(score, *chunk, use_reentrant=False))
            else:
                pieces.append(score(*chunk))
        logps = torch.cat([piece[0] for piece in pieces]) if pieces else hidden.new_zeros(0)
        entropy = torch.cat([piece[1] for piece in pieces]) if pieces else hidden.new_zeros(0)
        is_top1 = torch.cat([piece[2] for piece in pieces]) if pieces else hidden.new_zeros(0, dtype=torch.bool)
        num_tokens = labelled.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -logps.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())

        # The metrics TRL logs, over the same labelled positions.
        mode = "train" if self.model.training else "eval"
        num_valid = self.accelerator.gather_for_metrics(labelled.sum()).sum()
        entropy_sum = self.accelerator.gather_for_metrics(entropy.detach().sum()).sum()
        num_correct = self.accelerator.gather_for_metrics(is_top1.sum()).sum()
        self._metrics[mode]["entropy"].append((entropy_sum / num_valid).item() if num_valid > 0 else 0.0)
        self._metrics[mode]["mean_token_accuracy"].append((num_correct / num_valid).item() if num_valid > 0 else 0.0)
        if mode == "train":
            num_tokens_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += num_tokens_in_batch // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return loss


def resolve_checkpoint(config: SFTConfig) -> str | None:
    """The checkpoint to resume from: ``resume_from_checkpoint`` as a path, or ``"last"`` for the newest one.

    Shared by ``dynaweb-sft`` and ``dynaweb-train-wm``.

    Raises:
        FileNotFoundError: If the named checkpoint, or any checkpoint for ``"last"``, is missing.
    """
    value = config.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "no", "none"):
        return None
    if str(value).lower() in ("last", "latest", "true", "yes"):
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(config.output_dir) if os.path.isdir(config.output_dir) else None
        if last is None:
            raise FileNotFoundError(
                f"resume_from_checkpoint={value!r}: no checkpoint-* directory in {config.output_dir}"
            )
        return last
    if not os.path.isdir(value):
        raise FileNotFoundError(f"resume_from_checkpoint: checkpoint directory not found: {value}")
    return str(value)


def make_lora_config(config: SFTConfig) -> Any:
    """The :class:`peft.LoraConfig` of ``config``'s ``use_peft`` and ``lora_*`` fields (``None``: full fine-tuning).

    Shared by ``dynaweb-sft`` and ``dynaweb-train-wm``.
    """
    if not config.use_peft:
        return None
    from peft import LoraConfig

    targets: Any = config.lora_target_modules
    if list(targets) == ["all-linear"]:
        targets = "all-linear"
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def build_sft_trainer(
    config: PolicySFTConfig, trajectories: Sequence[Trajectory] | None = None
) -> tuple[PolicySFTTrainer, dict[str, Any]]:
    """Load the data, the tokenizer and the model, and build the :class:`PolicySFTTrainer` (nothing trained yet).

    Args:
        config: What to train and how.
        trajectories: Use these instead of reading ``config.dataset_path`` (for programmatic callers).

    Returns:
        The trainer and statistics of its data (trajectories, tasks, token counts, truncations).
    """
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    if trajectories is None:
        trajectories = load_expert_trajectories(config.dataset_path, config.dataset_split, config.successful_only)
    model_path = str(resolve_model(config.model_name_or_path))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    system_prompt = policy_system_prompt(config.response_style)  # type: ignore[arg-type]
    dataset = build_sft_dataset(tokenizer, trajectories, config.max_axtree_chars, system_prompt)
    lengths = [len(ids) for ids in dataset["input_ids"]]
    data_stats = {
        "trajectories": len(trajectories),
        "tasks": dict(Counter(t.task_id for t in trajectories)),
        "tokens": sum(lengths),
        "policy_tokens": sum(sum(label != IGNORE_INDEX for label in labels) for labels in dataset["labels"]),
        "max_episode_tokens": max(lengths),
        "truncated_episodes": sum(length > config.max_length for length in lengths) if config.max_length else 0,
    }
    trainer = PolicySFTTrainer(
        model=model_path,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=make_lora_config(config),
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
    """
    start = time.perf_counter()
    resume = resolve_checkpoint(config)
    trainer, data_stats = build_sft_trainer(config, trajectories)
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
    parser = TrlParser(PolicySFTConfig, prog="dynaweb-sft")
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dynaweb-sft``: parse ``argv`` (and ``--config x.yaml``), train, print the summary.

    Returns:
        ``0`` on success; ``2`` (with the reason on stderr) when the data or a checkpoint to resume is
        missing or unusable, before any model is loaded.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = parse_config(argv)
        resolve_checkpoint(config)
        trajectories = load_expert_trajectories(config.dataset_path, config.dataset_split, config.successful_only)
    except (FileNotFoundError, ValueError) as error:
        print(f"dynaweb-sft: error: {error}", file=sys.stderr)
        return 2
    summary = train_policy_sft(config, trajectories, command=shlex.join(["dynaweb-sft", *argv]))
    print(format_summary(summary))
    return 0


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    raise SystemExit(main())


if __name__ == "__main__":
    cli()
