"""Supervised fine-tuning of the web world model on real transitions (paper, section 3.2, eq. 4).

Every real transition ``(o_t, a_t, o_{t+1})`` of the expert trajectories becomes one chat example in
the world model's own prompt format, the one :class:`~dynaweb_env.world_model.WebWorldModel` sends at
dream time::

    system     the paper's world-model prompt (appendix A.2)         ┐ prompt: no loss
    user       objective, URL, current tree, previous / current action ┘
    assistant  [Web state changes]                                    ┐ completion: the loss
               <teacher reasoning, if any> <Δ>                        │ (``loss_on="full"``), or
               [Next page accessibility tree]                         │ only up to the tree header
               URL: <next url, if it changed>                         │ (``loss_on="changes"``,
               <next tree>                                            │ the paper's eq. 4)
               [Episode ended]      (when the action ended the episode)┘

Δ comes from ``Step.changes`` (labelled by :mod:`dynaweb_env.world_model.state_changes`: a teacher LLM or the
structural diff); transitions not labelled yet get the structural diff on the fly
(``label_missing="diff"``). Both trees are cut by :func:`~dynaweb_env.observation.truncate_axtree`
to ``max_axtree_chars``; sequences longer than ``max_length`` tokens are cut (counted in the summary)
and those whose prompt alone fills ``max_length`` are dropped. Training is TRL's
:class:`~trl.SFTTrainer` on the pre-tokenized examples (through the policy SFT's subclass that scores the
LM head only on labelled positions on CPU), with a LoRA adapter (peft) by default.

Command line::

    dynaweb-train-wm --output_dir runs/wm-smollm2                     # LoRA on the shipped data
    dynaweb-train-wm --model_name_or_path tiny-random --max_steps 3 --output_dir /tmp/wm-smoke
    dynaweb-train-wm --dataset_path labelled.jsonl --loss_on changes  # teacher labels, eq. 4 loss
    dynaweb-train-wm --output_mode patch --output_dir runs/wm-patch   # Δ as tree edits (world_model.patch)
    dynaweb-train-wm --output_dir runs/wm-smollm2 --resume_from_checkpoint last
    dynaweb-train-wm --examples judge --output_dir runs/judge        # the trajectory judge (real outcomes)

``--examples judge`` (or ``both``) trains the trajectory judge instead of (or besides) the world model: each
real trajectory in the judge's prompt, with the verdict of its real outcome as the target
(:func:`judge_examples`); successes cut before their last actions are the failures of a task left unfinished.

The output directory holds the adapter (``adapter_config.json``, ``adapter_model.safetensors``), the
tokenizer and ``wm_sft_summary.json``. It loads as a world-model backend with
``make_backend("<output_dir>")`` (transformers attaches the adapter to its base model).
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

from trl import SFTConfig, TrlParser

from dynaweb_env.axtree import structural_diff
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.models import WORLD_MODEL_INFO_FILE, name_adapter_base
from dynaweb_env.observation import truncate_axtree
from dynaweb_env.world_model.judge import (
    DEFAULT_JUDGE_MAX_AXTREE_CHARS,
    build_judge_messages,
    format_judge_target,
    judge_cases,
)
from dynaweb_env.world_model.model import DEFAULT_MAX_AXTREE_CHARS, OUTPUT_MODE_PROMPTS, OUTPUT_MODES
from dynaweb_env.world_model.patch import PATCH_HEADER, format_patch_target
from dynaweb_env.world_model.prompts import TREE_HEADER, build_world_model_messages, format_world_model_target
from dynaweb_env.world_model.state_changes import transition_reasoning

from .sft import PolicySFTTrainer as LabelledHeadSFTTrainer
from .sft import make_lora_config, resolve_checkpoint

#: Real trajectories shipped with the package (scripted experts on MiniWoB++ tasks).
BUILTIN_TRAJECTORIES = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_small.jsonl"))
#: Shipped exploration trajectories on the same tasks and seeds (the expert with random actions, failures included).
BUILTIN_EXPLORATION = Path(str(files("dynaweb_env.data") / "builtin" / "miniwob_explore.jsonl"))
#: What the world model trains and is evaluated on by default: every shipped real transition.
BUILTIN_WORLD_MODEL_DATA = (BUILTIN_TRAJECTORIES, BUILTIN_EXPLORATION)
#: Label of tokens left out of the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100
#: Written into the output directory next to the adapter.
SUMMARY_FILE = "wm_sft_summary.json"

LOSS_ON = ("full", "changes")
LABEL_MISSING = ("diff", "skip")
#: What one adapter learns: the world model's transitions, the judge's verdicts, or both (one adapter serving as
#: both, as ``DreamWeb-v0`` uses its world model's backend as judge by default).
EXAMPLES = ("world_model", "judge", "both")


@dataclass
class WorldModelSFTConfig(SFTConfig):
    r"""Configuration of :func:`train_world_model` (and the ``dynaweb-train-wm`` command).

    Every field of :class:`~trl.SFTConfig` (and so of :class:`~transformers.TrainingArguments`) is accepted
    as well; only the defaults below differ from TRL's.

    Parameters:
        model_name_or_path (`str`, *optional*, defaults to `"smollm2-135m"`):
            Base model of the world model: an embedded model name (`"smollm2-135m"`, `"tiny-random"`) or a local
            checkpoint directory.
        dataset_path (`list[str]`, *optional*):
            Trajectory files (JSONL in the trajectory schema) or directories of them; consecutive steps are the
            real transitions. Defaults to the shipped expert and exploration trajectories
            (`dynaweb_env/data/builtin/miniwob_small.jsonl` and `miniwob_explore.jsonl`).
        dataset_split (`str` or `None`, *optional*, defaults to `"train"`):
            Keep trajectories whose `metadata["split"]` equals this; `None` (or `"all"`) keeps all. Failed
            trajectories are kept: their transitions are as real as successful ones.
        label_missing (`str`, *optional*, defaults to `"diff"`):
            Transitions without `changes`: `"diff"` labels them with the structural diff, `"skip"` leaves them out.
        include_reasoning (`bool`, *optional*, defaults to `True`):
            Put the teacher's reasoning trace (recorded by `dynaweb_env.world_model.state_changes`) before Δ in
            the target.
        loss_on (`str`, *optional*, defaults to `"full"`):
            `"full"`: loss on the whole world-model output (reasoning, Δ, next tree, markers, end of turn), so a
            small model learns to write the tree. `"changes"`: loss on the changes section only (paper, eq. 4),
            the next tree stays in the sequence as context.
        output_mode (`str`, *optional*, defaults to `"tree"`):
            What the world model writes: `"tree"` (the paper's full next tree) or `"patch"` (edits of the current
            tree, `dynaweb_env.world_model.patch`; the prompt is patch mode's system prompt). Load the result with
            `WebWorldModel(..., output_mode=...)` of the same mode.
        examples (`str`, *optional*, defaults to `"world_model"`):
            What to learn: `"world_model"` (every real transition), `"judge"` (the trajectory judge's verdicts on
            real trajectories with their real outcome: each as recorded, and every prefix of each success as a
            failure, `dynaweb_env.world_model.judge.judge_cases`) or `"both"` in one adapter.
        judge_max_axtree_chars (`int`, *optional*, defaults to `4000`):
            Character budget of the final tree in judge examples: the judge's own prompt budget.
        max_axtree_chars (`int`, *optional*, defaults to `6000`):
            Character budget of the current tree in the prompt and of the next tree in the target (`0`: no
            limit). The default is the world model's own prompt budget.
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

    > Defaults that differ from [`~trl.SFTConfig`]: `output_dir="runs/wm-sft"`, `learning_rate=2e-4` (a LoRA
    > rate), `num_train_epochs=1` (the paper trains its world models for one epoch), `max_length=3072`,
    > `per_device_train_batch_size=1` with `gradient_accumulation_steps=4` (no padding; on CPU a batch of 4
    > examples of ~1.9k tokens needs ~20 GB for smollm2-135m, one needs ~9 GB), `gradient_checkpointing=False`
    > (it saves memory at ~30% more time), `bf16` only where a CUDA device supports it, `logging_steps=1`,
    > `save_steps=5` (a CPU epoch takes hours: checkpoint often, resume with `--resume_from_checkpoint last`),
    > `save_total_limit=2`, `report_to="none"`.
    """

    output_dir: str = field(default="runs/wm-sft", metadata={"help": "Where checkpoints, adapter and tokenizer go."})
    model_name_or_path: str = field(
        default="smollm2-135m",
        metadata={"help": "Embedded model name (smollm2-135m, tiny-random) or local checkpoint directory."},
    )
    dataset_path: list[str] | None = field(
        default=None,
        metadata={"help": "Trajectory JSONL files or directories (default: the shipped expert + exploration data)."},
    )
    dataset_split: str | None = field(
        default="train",
        metadata={"help": "Keep trajectories with metadata['split'] equal to this ('all' or None: keep all)."},
    )
    label_missing: str = field(
        default="diff",
        metadata={"help": "Unlabelled transitions: 'diff' (structural diff) or 'skip'.", "choices": LABEL_MISSING},
    )
    include_reasoning: bool = field(
        default=True, metadata={"help": "Put the teacher's reasoning (if recorded) before the changes."}
    )
    loss_on: str = field(
        default="full",
        metadata={"help": "'full' world-model output, or 'changes' only (paper eq. 4).", "choices": LOSS_ON},
    )
    output_mode: str = field(
        default="tree",
        metadata={"help": "'tree' (the paper's full next tree) or 'patch' (edits).", "choices": ["tree", "patch"]},
    )
    examples: str = field(
        default="world_model",
        metadata={"help": "What to learn: 'world_model', 'judge' or 'both'.", "choices": list(EXAMPLES)},
    )
    judge_max_axtree_chars: int = field(
        default=DEFAULT_JUDGE_MAX_AXTREE_CHARS,
        metadata={"help": "Character budget of the final tree in judge examples (0: no limit)."},
    )
    max_axtree_chars: int = field(
        default=DEFAULT_MAX_AXTREE_CHARS,
        metadata={"help": "Character budget of the current and next trees (0: no limit)."},
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
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the transitions (paper: 1)."})
    max_length: int | None = field(default=3072, metadata={"help": "Longest tokenized example; longer ones are cut."})
    per_device_train_batch_size: int = field(default=1, metadata={"help": "Examples per device per forward pass."})
    gradient_accumulation_steps: int = field(default=4, metadata={"help": "Forward passes per optimizer step."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for memory."})
    logging_steps: float = field(default=1, metadata={"help": "Log every this many steps."})
    save_steps: float = field(default=5, metadata={"help": "Save a checkpoint every this many steps."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Experiment trackers to report to."})

    def __post_init__(self) -> None:
        if self.bf16 is None:
            # TRL turns bf16 on by default; on a CPU that is slow, so only where a GPU supports it.
            import torch

            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        if isinstance(self.dataset_split, str) and self.dataset_split.lower() in ("all", "none", ""):
            self.dataset_split = None
        if self.label_missing not in LABEL_MISSING:
            raise ValueError(f"label_missing must be one of {LABEL_MISSING}, got {self.label_missing!r}")
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"loss_on must be one of {LOSS_ON}, got {self.loss_on!r}")
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {sorted(OUTPUT_MODES)}, got {self.output_mode!r}")
        if self.examples not in EXAMPLES:
            raise ValueError(f"examples must be one of {EXAMPLES}, got {self.examples!r}")
        if self.max_axtree_chars < 0 or self.judge_max_axtree_chars < 0:
            raise ValueError(
                f"max_axtree_chars and judge_max_axtree_chars must be >= 0, got {self.max_axtree_chars} and "
                f"{self.judge_max_axtree_chars}"
            )
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be >= 1, got {self.lora_r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path must not be empty")
        super().__post_init__()


# ---------------------------------------------------------------------------------------------------
# Data: trajectories -> transitions -> (prompt, target) -> tokens with a loss mask.
# ---------------------------------------------------------------------------------------------------


def load_trajectories(paths: Sequence[str | os.PathLike[str]] | None = None, split: str | None = "train") -> list:
    """Read trajectories for world-model SFT (default: the shipped data), keeping ``metadata["split"] == split``.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If nothing is left after selection (the message says which splits exist).
    """
    paths = list(paths) if paths else list(BUILTIN_WORLD_MODEL_DATA)
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"trajectory file not found: {path}")
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


def is_terminal_transition(trajectory: Trajectory, index: int) -> bool:
    """Whether the action of ``steps[index]`` ended the episode (the world model then writes ``[Episode ended]``).

    The last step of a trajectory holds the final page; when its action is empty, the episode was ended by the
    environment (e.g. a MiniWoB++ task completed) right after the previous step's action. A final ``stop``
    belongs to the agent, not to the world model, and an episode cut by a step or token limit
    (``metadata["truncated"]``, or a ``metadata["end_reason"]`` other than ``"terminated"`` as
    ``dynaweb-collect`` records it) did not end by its last action either.
    """
    last = len(trajectory.steps) - 1
    cut_by_a_limit = trajectory.metadata.get("truncated", False) or trajectory.metadata.get(
        "end_reason", "terminated"
    ) not in ("terminated", "expert")
    return index + 1 == last and not trajectory.steps[last].action.strip() and not cut_by_a_limit


def world_model_example(
    trajectory: Trajectory,
    index: int,
    *,
    max_axtree_chars: int = DEFAULT_MAX_AXTREE_CHARS,
    include_reasoning: bool = True,
    label_missing: str = "diff",
    output_mode: str = "tree",
) -> tuple[list[dict[str, str]], str] | None:
    """The ``(messages, target)`` of transition ``steps[index] -> steps[index + 1]``, or ``None`` to skip it.

    ``messages`` is exactly what :class:`~dynaweb_env.world_model.WebWorldModel` sends for this transition;
    ``target`` is :func:`~dynaweb_env.world_model.prompts.format_world_model_target` of its Δ (with the teacher's
    reasoning before it), the next URL when it changed, the next tree and the terminal marker.
    """
    before, after = trajectory.steps[index], trajectory.steps[index + 1]
    if not before.action.strip():
        return None
    changes = before.changes.strip()
    if not changes:
        if label_missing == "skip":
            return None
        changes = structural_diff(before.axtree, after.axtree, before.url, after.url)
    reasoning = transition_reasoning(trajectory, index) if include_reasoning else ""
    if reasoning:
        changes = f"{reasoning.strip()}\n\n{changes}"
    previous = trajectory.steps[index - 1].action if index > 0 else ""
    messages = build_world_model_messages(
        goal=trajectory.goal,
        url=before.url,
        axtree=before.axtree,
        action=before.action,
        previous_action=previous,
        max_axtree_chars=max_axtree_chars,
        system_prompt=OUTPUT_MODE_PROMPTS[output_mode](),
    )
    next_url = after.url if after.url.strip() != before.url.strip() else ""
    if output_mode == "patch":  # edits of the full current tree (the one WebWorldModel applies them to); Δ = edits
        terminal = is_terminal_transition(trajectory, index)
        return messages, format_patch_target(next_url, before.axtree, after.axtree, terminal)
    target = format_world_model_target(
        changes, next_url, truncate_axtree(after.axtree, max_axtree_chars), is_terminal_transition(trajectory, index)
    )
    return messages, target


def tokenize_example(
    tokenizer: Any, messages: list[dict[str, str]], target: str, loss_on: str = "full"
) -> dict[str, list[int]]:
    """Tokenize one chat example; ``labels`` keep only the world model's own tokens.

    The prompt (system + user message + the assistant header) is labelled :data:`IGNORE_INDEX`; the target is
    labelled up to and including the end-of-turn token (text the chat template adds after it is not the
    model's). With ``loss_on="changes"`` the labels stop at the ``[Next page accessibility tree]`` header.

    Raises:
        ValueError: If the chat template does not render the prompt as a prefix of the full conversation.
    """
    prompt_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    full_text = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": target}], add_generation_prompt=False, tokenize=False
    )
    if not full_text.startswith(prompt_text):
        raise ValueError("the chat template does not render the prompt as a prefix of prompt + answer")
    target_start = full_text.find(target, len(prompt_text))
    if target_start < 0:  # a template that reformats the answer (e.g. trims it): train on all it renders
        target_start = len(prompt_text)
    eos = tokenizer.eos_token or ""
    eos_at = full_text.find(eos, target_start + len(target)) if eos else -1
    end = eos_at + len(eos) if eos_at >= 0 else target_start + len(target)
    if loss_on == "changes":
        header = next((h for h in (TREE_HEADER, PATCH_HEADER) if h in target), None)
        end = target_start + target.index(header) if header else end
    encoded = tokenizer(full_text, add_special_tokens=False, return_offsets_mapping=True)
    labels = [
        token if start >= target_start and stop <= end and stop > start else IGNORE_INDEX
        for token, (start, stop) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)
    ]
    return {"input_ids": list(encoded["input_ids"]), "labels": labels}


@dataclass
class WorldModelData:
    """Pre-tokenized examples and what building them found."""

    rows: list[dict[str, list[int]]]
    stats: dict[str, Any]


def judge_examples(
    trajectories: Sequence[Trajectory], max_axtree_chars: int = DEFAULT_JUDGE_MAX_AXTREE_CHARS
) -> list[tuple[list[dict[str, str]], str, bool]]:
    """The judge's ``(messages, target, success)`` examples: every case of ``judge_cases(..., every_prefix=True)``
    in the prompt :class:`~dynaweb_env.world_model.TrajectoryJudge` sends, with the verdict of its real outcome."""
    examples = []
    for request, reward, _ in judge_cases(trajectories, every_prefix=True):
        success = reward >= 0.5
        examples.append((build_judge_messages(request, max_axtree_chars), format_judge_target(success), success))
    return examples


def build_world_model_dataset(
    tokenizer: Any, trajectories: Sequence[Trajectory], config: WorldModelSFTConfig
) -> WorldModelData:
    """Tokenize the examples ``config.examples`` asks for (with a progress bar), applying ``max_length``."""
    from tqdm.auto import tqdm

    rows: list[dict[str, list[int]]] = []
    stats: Counter[str] = Counter()
    lengths: list[int] = []

    def add(row: dict[str, list[int]]) -> None:
        lengths.append(len(row["input_ids"]))
        if config.max_length is not None and len(row["input_ids"]) > config.max_length:
            row = {key: value[: config.max_length] for key, value in row.items()}
            if all(label == IGNORE_INDEX for label in row["labels"]):
                stats["dropped_prompt_too_long"] += 1
                return
            stats["truncated"] += 1
        stats["loss_tokens"] += sum(label != IGNORE_INDEX for label in row["labels"])
        stats["tokens"] += len(row["input_ids"])
        rows.append(row)

    if config.examples in ("judge", "both"):
        for messages, target, success in judge_examples(trajectories, config.judge_max_axtree_chars):
            stats["judge_examples"] += 1
            stats["judge_successes"] += success
            add(tokenize_example(tokenizer, messages, target))
    transitions = [] if config.examples == "judge" else [(t, i) for t in trajectories for i in range(len(t.steps) - 1)]
    for trajectory, index in tqdm(
        transitions, desc="tokenizing transitions", unit="ex", file=sys.stderr, disable=not transitions
    ):
        stats["transitions"] += 1
        example = world_model_example(
            trajectory,
            index,
            max_axtree_chars=config.max_axtree_chars,
            include_reasoning=config.include_reasoning,
            label_missing=config.label_missing,
            output_mode=config.output_mode,
        )
        if example is None:
            stats["skipped_unlabelled_or_no_action"] += 1
            continue
        if trajectory.steps[index].changes.strip():
            stats["labelled"] += 1
        else:
            stats["diff_labelled_on_the_fly"] += 1
        stats["terminal"] += is_terminal_transition(trajectory, index)
        add(tokenize_example(tokenizer, *example, loss_on=config.loss_on))
    if not rows:
        raise ValueError(f"no usable {config.examples} examples in {len(trajectories)} trajectories ({dict(stats)})")
    summary: dict[str, Any] = {"trajectories": len(trajectories), "examples": len(rows), **stats}
    summary["max_example_tokens"] = max(lengths)
    summary["mean_example_tokens"] = round(sum(lengths) / len(lengths), 1)
    return WorldModelData(rows, summary)


# ---------------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------------


def build_world_model_trainer(
    config: WorldModelSFTConfig, trajectories: Sequence[Trajectory] | None = None
) -> tuple[LabelledHeadSFTTrainer, dict[str, Any]]:
    """Load data, tokenizer and model and build the ``SFTTrainer`` (nothing trained yet).

    Args:
        config: What to train and how.
        trajectories: Use these instead of reading ``config.dataset_path``.

    Returns:
        The trainer and the statistics of its data.
    """
    from datasets import Dataset
    from transformers import AutoTokenizer

    from dynaweb_env.models import resolve_model

    if trajectories is None:
        trajectories = load_trajectories(config.dataset_path, config.dataset_split)
    model_path = str(resolve_model(config.model_name_or_path))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    data = build_world_model_dataset(tokenizer, trajectories, config)
    # Most tokens are prompt (the paper's system prompt alone is ~850 tokens): the trainer scores the LM head only
    # where there is a label, on CPU (the same loss as TRL's, checked in tests/test_sft.py).
    trainer = LabelledHeadSFTTrainer(
        model=model_path,
        args=config,
        train_dataset=Dataset.from_list(data.rows),
        processing_class=tokenizer,
        peft_config=make_lora_config(config),
    )
    return trainer, data.stats


def train_world_model(
    config: WorldModelSFTConfig, trajectories: Sequence[Trajectory] | None = None, command: str | None = None
) -> dict[str, Any]:
    """Fine-tune the world model on real transitions with TRL's ``SFTTrainer`` and save the adapter.

    Args:
        config: What to train and how.
        trajectories: Use these instead of reading ``config.dataset_path``.
        command: The command line recorded in the summary (default: this process's ``sys.argv``).

    Returns:
        The run summary (also written to ``<output_dir>/wm_sft_summary.json``): data statistics, first and last
        logged loss, steps, throughput, where the adapter went.
    """
    start = time.perf_counter()
    resume = resolve_checkpoint(config)
    trainer, data_stats = build_world_model_trainer(config, trajectories)
    train_start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    train_seconds = time.perf_counter() - train_start
    trainer.save_model(config.output_dir)
    trainer.processing_class.save_pretrained(config.output_dir)
    if trainer.is_world_process_zero():
        name_adapter_base(config.output_dir, config.model_name_or_path)
        # output_mode is read back by dynaweb_env.models.world_model_output_mode
        info = {"output_mode": config.output_mode, "examples": config.examples}
        (Path(config.output_dir) / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    steps_this_run = trainer.state.global_step - (int(Path(resume).name.split("-")[-1]) if resume else 0)
    summary = {
        "model": config.model_name_or_path,
        "output_dir": str(config.output_dir),
        "adapter": bool(config.use_peft),
        "loss_on": config.loss_on,
        "output_mode": config.output_mode,
        "examples": config.examples,
        "max_axtree_chars": config.max_axtree_chars,
        "max_length": config.max_length,
        "data": data_stats,
        "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "steps": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "resumed_from": resume,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_loss": result.training_loss,
        "train_seconds": round(train_seconds, 1),
        "seconds_per_step": round(train_seconds / steps_this_run, 2) if steps_this_run > 0 else None,
        "runtime_s": round(time.perf_counter() - start, 1),
        "command": command or shlex.join(sys.argv),
    }
    if trainer.is_world_process_zero():
        (Path(config.output_dir) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """A short human-readable report of a :func:`train_world_model` run."""
    data = summary["data"]
    loss = (
        f", loss {summary['first_loss']:.3f} -> {summary['last_loss']:.3f}" if summary["first_loss"] is not None else ""
    )
    kind = "LoRA adapter" if summary["adapter"] else "full model"
    return "\n".join(
        [
            f"world-model SFT of {summary['model']}: {summary['steps']} steps in {summary['train_seconds']} s"
            f" ({summary['seconds_per_step']} s/step){loss}",
            f"  data: {data['examples']} examples ({data['examples'] - data.get('judge_examples', 0)} transitions, "
            f"{data.get('judge_examples', 0)} judge verdicts, {data.get('judge_successes', 0)} of them SUCCESS) "
            f"from {data['trajectories']} trajectories, "
            f"{data.get('loss_tokens', 0)} of {data.get('tokens', 0)} tokens in the loss ({summary['loss_on']}), "
            f"longest {data['max_example_tokens']}, {data.get('truncated', 0)} truncated, "
            f"{data.get('dropped_prompt_too_long', 0)} dropped",
            f"  saved {kind} ({summary['trainable_parameters']:,} trainable parameters) and tokenizer to "
            f"{summary['output_dir']}",
        ]
    )


def parse_config(argv: Sequence[str] | None = None) -> WorldModelSFTConfig:
    """Parse command-line arguments (``--config x.yaml`` gives defaults that flags override)."""
    parser = TrlParser(WorldModelSFTConfig, prog="dynaweb-train-wm")
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Entry point of ``dynaweb-train-wm``: parse ``argv``, train, print and return the summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    summary = train_world_model(parse_config(argv), command=shlex.join(["dynaweb-train-wm", *argv]))
    print(format_summary(summary))
    return summary


def cli() -> None:
    """Console-script wrapper of :func:`main`."""
    main()


__all__ = [
    "BUILTIN_TRAJECTORIES",
    "IGNORE_INDEX",
    "SUMMARY_FILE",
    "WorldModelSFTConfig",
    "WorldModelData",
    "EXAMPLES",
    "load_trajectories",
    "is_terminal_transition",
    "judge_examples",
    "world_model_example",
    "tokenize_example",
    "build_world_model_dataset",
    "make_lora_config",
    "resolve_checkpoint",
    "build_world_model_trainer",
    "train_world_model",
    "format_summary",
    "parse_config",
    "main",
    "cli",
]


if __name__ == "__main__":
    cli()
