"""What the two SFT commands (``dynaweb-sft``, ``dynaweb-train-wm``) share, in one place.

- :class:`LoraSettings`: the LoRA fields (named as TRL's :class:`~trl.ModelConfig` names them) and
  the peft config built from them by TRL's :func:`~trl.get_peft_config`; ``dynaweb-train`` uses them too.
- :class:`TrajectorySFTConfig`: an :class:`~trl.SFTConfig` trained on trajectory files, with the
  defaults both commands use on a CPU.
- :func:`select_trajectories`: reading trajectory files and keeping one split.
- :func:`resolve_checkpoint`: ``--resume_from_checkpoint last`` (complete checkpoints only).
- :class:`LabelledHeadSFTTrainer`: TRL's trainer with the LM head scored only on labelled positions.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import SFTConfig, SFTTrainer

from dynaweb_env.compat import trl as compat_trl
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.llm.base import cpu_supports_bf16

from .checkpoint_state import AtomicTrainerState
from .labelled_head import score_positions
from .model_loading import last_checkpoint

#: Label of tokens left out of the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100


@dataclass
class LoraSettings:
    """LoRA fields of a config (see the configs' docstrings); :meth:`peft_config` builds peft's ``LoraConfig``."""

    use_peft: bool = field(
        default=True,
        metadata={"help": "Train a LoRA adapter instead of all weights.", "aliases": ["--use_lora", "--use-lora"]},
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (update scaled by lora_alpha / lora_r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["all-linear"], metadata={"help": "Modules that receive LoRA adapters."}
    )

    def validate_lora(self) -> None:
        """``ValueError`` for LoRA settings peft would refuse or silently misuse."""
        if isinstance(self.lora_target_modules, str):
            self.lora_target_modules = [self.lora_target_modules]
        if isinstance(self.lora_r, bool) or not isinstance(self.lora_r, int) or self.lora_r < 1:
            raise ValueError(f"lora_r must be a positive integer, got {self.lora_r!r}")
        if isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, int) or self.lora_alpha < 1:
            raise ValueError(f"lora_alpha must be a positive integer, got {self.lora_alpha!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")

    def peft_config(self) -> Any:
        """The peft ``LoraConfig`` of these settings (``None`` without ``use_peft``), by TRL's ``get_peft_config``."""
        from trl import ModelConfig, get_peft_config

        model_config = ModelConfig(
            use_peft=self.use_peft,
            lora_r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            lora_target_modules=list(self.lora_target_modules),
            lora_task_type="CAUSAL_LM",
        )
        return get_peft_config(model_config)


@dataclass
class TrajectorySFTConfig(SFTConfig, LoraSettings):
    """An :class:`~trl.SFTConfig` trained on trajectory files: the fields and defaults both SFT commands share.

    See :class:`~dynaweb_trainer.sft.PolicySFTConfig` and
    :class:`~dynaweb_trainer.world_model_sft.WorldModelSFTConfig` for what each field means there.
    """

    model_name_or_path: str = field(
        default="smollm2-135m",
        metadata={"help": "Embedded model name (smollm2-135m, tiny-random) or local checkpoint directory."},
    )
    dataset_path: list[str] | None = field(
        default=None, metadata={"help": "Trajectory JSONL files or directories (default: the shipped data)."}
    )
    dataset_split: str | None = field(
        default="train",
        metadata={"help": "Keep trajectories with metadata['split'] equal to this ('all' or None: keep all)."},
    )

    # Defaults overridden from SFTConfig / TrainingArguments.
    # Measured: 2e-4 left the policy's loss at 1.13 after 15 steps, 1e-3 took it to 0.04 in 30 (the SFT start of every
    # paper_claims run); the shipped world models were trained at 1e-3 too.
    learning_rate: float = field(default=1e-3, metadata={"help": "Initial AdamW learning rate (of a LoRA adapter)."})
    # One episode through the model at a time, checkpointed: a whole multi-turn episode's activations are a step's
    # memory (8 at once passed 8.8 GB in the first step; 1 with checkpointing ~2 GB). The same 8 examples a step.
    per_device_train_batch_size: int = field(default=1, metadata={"help": "Examples per forward pass."})
    gradient_accumulation_steps: int = field(default=8, metadata={"help": "Forward passes per optimizer step."})
    gradient_checkpointing: bool = field(
        default=True,
        metadata={"help": "Recompute activations in the backward pass (a 2,000-token episode: 2.5 GiB, not 3.2-5.4)."},
    )
    logging_steps: float = field(default=1, metadata={"help": "Log every this many steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Experiment trackers to report to."})

    def __post_init__(self) -> None:
        import torch

        if self.bf16 is None:
            # TRL turns bf16 on by default. A GPU needs native bf16 support; a CPU needs bf16 matrix instructions
            # (AVX-512 BF16 / AMX), where bf16 autocast about halves a LoRA step (benchmarks/prompt_compaction.py).
            on_gpu = torch.cuda.is_available()
            self.bf16 = bool(torch.cuda.is_bf16_supported() if on_gpu else cpu_supports_bf16())
        if self.bf16 and not torch.cuda.is_available():
            # transformers refuses bf16 without a bf16 GPU unless told the run is on CPU (then: autocast on CPU).
            self.use_cpu = True
        if self.dataloader_pin_memory:
            # Pinning needs an accelerator; without one torch only warns at every epoch.
            self.dataloader_pin_memory = torch.cuda.is_available()
        if isinstance(self.dataset_split, str) and self.dataset_split.lower() in ("all", "none", ""):
            self.dataset_split = None
        self.validate_lora()
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path must not be empty")
        super().__post_init__()


def select_trajectories(
    paths: Sequence[str | os.PathLike[str]] | None,
    default: Sequence[str | os.PathLike[str]],
    split: str | None = "train",
    kind: str = "trajectory",
) -> list[Trajectory]:
    """Read trajectory files (``default`` when ``paths`` is empty) and keep ``metadata["split"] == split``.

    Args:
        paths: JSONL files or directories.
        default: What to read when ``paths`` is empty (the shipped files).
        split: Keep trajectories of this split; ``None`` keeps all.
        kind: What the files hold, for messages (``"expert trajectory"``).

    Returns:
        The selected trajectories, in file order. Corrupt lines are skipped with a warning naming them.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If nothing is left after selection (the message says which splits exist).
    """
    from dynaweb_env.data.io import read_trajectories

    paths = list(paths) if paths else list(default)
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"{kind} file not found: {path}")
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
    return selected


def resolve_checkpoint(config: SFTConfig) -> str | None:
    """The checkpoint to resume from: ``resume_from_checkpoint`` as a path, or ``"last"`` for the newest complete one.

    Raises:
        FileNotFoundError: If the named checkpoint, or any complete checkpoint for ``"last"``, is missing.
    """
    value = config.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "no", "none"):
        return None
    if str(value).lower() in ("last", "latest", "true", "yes"):
        last = last_checkpoint(config.output_dir)
        if last is None:
            raise FileNotFoundError(
                f"resume_from_checkpoint={value!r}: no checkpoint-* directory with a finished save "
                f"(trainer_state.json and weights) in {config.output_dir}"
            )
        return last
    if not os.path.isdir(value):
        raise FileNotFoundError(f"resume_from_checkpoint: checkpoint directory not found: {value}")
    return str(value)


def load_training_tokenizer(model_name_or_path: str) -> tuple[str, Any]:
    """``(resolved model path, tokenizer)`` of a model to fine-tune; the tokenizer pads with EOS if it has no pad."""
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    model_path = str(resolve_model(model_name_or_path))
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model_path, tokenizer


class LabelledHeadSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` with the LM head computed only where there is a label, on CPU.

    A web episode is ~1k tokens of system prompt and pages for a few dozen policy tokens. TRL 1.16's
    fused LM head scores every position (without Triton, i.e. on CPU, in chunks over the whole
    vocabulary), so >90% of the head's work and memory goes to positions whose label is ``-100``. On
    CPU this override runs the backbone once and the head on the labelled positions only
    (:func:`~dynaweb_trainer.labelled_head.score_positions`, as the GSPO trainer does on completions); the loss
    (summed NLL over ``num_items_in_batch``, as TRL's ``nll``) and the logged ``entropy`` /
    ``mean_token_accuracy`` are the same quantities. Anywhere else (GPU, other loss types, label
    smoothing, packing without attention mask, soft-capped logits, MoE aux loss) TRL's own
    ``compute_loss`` runs. ``tests/test_sft.py`` checks both agree.
    """

    #: Labelled positions scored per head call (bounds the ``(positions, vocab)`` logits in memory).
    head_chunk_tokens = 256

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.add_callback(AtomicTrainerState())  # every trainer_state.json whole or not at all

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
        # The backbone is called directly, not through the prepared model's forward that accelerate wraps in
        # autocast: ``bf16`` (mixed precision) has to be entered here.
        with self.accelerator.autocast():
            hidden = backbone(
                input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False
            ).last_hidden_state
        targets = inputs["labels"][:, 1:]
        labelled = targets != IGNORE_INDEX
        logps, entropy, is_top1 = score_positions(
            head, hidden[:, :-1][labelled], targets[labelled], chunk_tokens=self.head_chunk_tokens, compute_top1=True
        )
        num_tokens = labelled.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -logps.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())

        # The metrics TRL logs, over the same labelled positions.
        mode = "train" if self.model.training else "eval"
        num_valid = self.accelerator.gather_for_metrics(labelled.sum()).sum()
        entropy_sum = self.accelerator.gather_for_metrics(entropy.detach().sum()).sum()
        num_correct = self.accelerator.gather_for_metrics(is_top1.sum()).sum()
        compat_trl.log_metric(self, "entropy", (entropy_sum / num_valid).item() if num_valid > 0 else 0.0, mode)
        accuracy = (num_correct / num_valid).item() if num_valid > 0 else 0.0
        compat_trl.log_metric(self, "mean_token_accuracy", accuracy, mode)
        tokens_in_batch = 0
        if mode == "train":
            tokens_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
        compat_trl.count_sft_tokens(self, mode, tokens_in_batch)
        return loss


__all__ = [
    "IGNORE_INDEX",
    "LabelledHeadSFTTrainer",
    "LoraSettings",
    "TrajectorySFTConfig",
    "cpu_supports_bf16",
    "load_training_tokenizer",
    "resolve_checkpoint",
    "select_trajectories",
]
