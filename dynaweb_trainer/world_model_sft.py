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
to ``max_axtree_chars``; sequences longer than ``max_length`` tokens are cut (counted in the summary), or
left out with ``overlong="drop"``, and those whose prompt alone fills ``max_length`` are dropped. Training is TRL's
:class:`~trl.SFTTrainer` on the pre-tokenized examples (through the policy SFT's subclass that scores the
LM head only on labelled positions on CPU), with a LoRA adapter (peft) by default.

Command line::

    dynaweb-train-wm --output_dir runs/wm-smollm2                     # LoRA on the shipped data
    dynaweb-train-wm --model_name_or_path tiny-random --max_steps 3 --output_dir /tmp/wm-smoke
    dynaweb-train-wm --dataset_path labelled.jsonl --loss_on changes  # teacher labels, eq. 4 loss
    dynaweb-train-wm --output_mode patch --output_dir runs/wm-patch   # Δ as tree edits (world_model.patch)
    dynaweb-train-wm --output_dir runs/wm-smollm2 --resume_from_checkpoint last
    dynaweb-train-wm --dataset_path data/miniwob-large/train --max_train_minutes 60   # a time budget, not a step count
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
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import TrlParser

from dynaweb_env.compat.transformers import word_negated_flags
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.models import (
    WORLD_MODEL_INFO_FILE,
    adapter_base,
    model_prompt_style,
    name_adapter_base,
    resolve_model,
)
from dynaweb_env.ship import TRAINING_RECORD_FILE
from dynaweb_env.world_model.judge import DEFAULT_JUDGE_MAX_AXTREE_CHARS
from dynaweb_env.world_model.model import DEFAULT_MAX_AXTREE_CHARS, OUTPUT_MODES
from dynaweb_env.world_model.prompts import PROMPT_STYLES, check_prompt_style, continues_prompt_style

from .checkpoint_state import TimeBudgetCallback, checkpoint_on_interrupt, exit_interrupted
from .model_loading import checkpoint_step
from .sft_base import (
    IGNORE_INDEX,
    LabelledHeadSFTTrainer,
    TrajectorySFTConfig,
    load_training_tokenizer,
    resolve_checkpoint,
)
from .world_model_data import (
    WorldModelData,
    build_world_model_dataset,
    is_terminal_transition,
    judge_examples,
    load_trajectories,
    tokenize_example,
    world_model_example,
)

#: Written into the output directory next to the adapter.
SUMMARY_FILE = TRAINING_RECORD_FILE

LOSS_ON = ("full", "changes")
LABEL_MISSING = ("diff", "skip")
#: What one adapter learns: the world model's transitions, the judge's verdicts, or both (one adapter serving as
#: both, as ``DreamWeb-v0`` uses its world model's backend as judge by default).
EXAMPLES = ("world_model", "judge", "both")
#: Failure cases a real success yields for the judge: every shorter cut, or only the cut before its last action.
JUDGE_PREFIXES = ("all", "last")
#: An example over ``max_length`` tokens: cut to it, or left out.
OVERLONG = ("cut", "drop")


@dataclass
class WorldModelSFTConfig(TrajectorySFTConfig):
    r"""Configuration of :func:`train_world_model` (and the ``dynaweb-train-wm`` command).

    Every field of :class:`~trl.SFTConfig` (and so of :class:`~transformers.TrainingArguments`) is accepted
    as well; only the defaults below differ from TRL's.

    Parameters:
        model_name_or_path (`str`, *optional*, defaults to `"smollm2-135m"`):
            Base model of the world model: an embedded model name (`"smollm2-135m"`, `"tiny-random"`) or a local
            checkpoint directory. A LoRA adapter (a shipped name such as `"smollm2-135m-judge"`, or a directory)
            is continued: its own LoRA weights train on, e.g. the judge retrained on dreamed pages.
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
            failure, `dynaweb_env.world_model.judge_cases.judge_cases`) or `"both"` in one adapter.
        prompt_style (`str`, *optional*, defaults to `"compact"`):
            The prompts trained on: `"compact"` (the output format alone; a fraction of the tokens per example),
            `"grounded"` (compact; a judge's prompts also state which of the objective's names were acted on and
            the final page shows, `dynaweb_env.world_model.grounding`), `"grounded-text"` (grounded, and an unnamed
            element acted on is read by the text it shows) or `"paper"` (the paper's long system
            prompts). Recorded beside the adapter, so `DreamWeb-v0` prompts the trained model the same way.
        judge_prefixes (`str`, *optional*, defaults to `"all"`):
            Which failure cases a real success yields: `"all"` (every shorter cut of it) or `"last"` (only the cut
            before its last action, the hardest to tell apart; ~35% fewer judge examples on the large data).
        judge_early_final (`bool`, *optional*, defaults to `False`):
            Also learn each success's final action taken too early (after each shorter prefix, on the page where
            the next action was taken) as a failure, `dynaweb_env.world_model.judge_cases.judge_cases`: the near misses
            (a Submit on an empty form) that a judge trained on successes and their cuts alone pays for.
        judge_max_axtree_chars (`int`, *optional*, defaults to `4000`):
            Character budget of the final tree in judge examples: the judge's own prompt budget.
        max_train_minutes (`float`, *optional*, defaults to `0`):
            Time budget of this run's training: after the first optimizer step that ends past it, a checkpoint is
            saved and training stops as if it had reached `max_steps` (the adapter and summary are written). `0`: no
            budget. On a shared CPU the seconds per step vary several-fold: a budget keeps a deadline that a step
            count cannot.
        max_axtree_chars (`int`, *optional*, defaults to `6000`):
            Character budget of the current tree in the prompt and of the next tree in the target (`0`: no
            limit). The default is the world model's own prompt budget.
        overlong (`str`, *optional*, defaults to `"cut"`):
            An example longer than `max_length` tokens: `"cut"` (its first `max_length` tokens; its target loses its
            end, `[Episode ended]` included) or `"drop"` (left out, counted in the summary).
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

    > Defaults that differ from [`~trl.SFTConfig`]: `output_dir="runs/wm-sft"`, `learning_rate=1e-3` (a LoRA
    > rate, as the shipped world models were trained), `num_train_epochs=1` (the paper trains its world models
    > for one epoch), `max_length=3072`,
    > `per_device_train_batch_size=1` with `gradient_accumulation_steps=4` (no padding; on CPU a batch of 4
    > examples of ~1.9k tokens needs ~20 GB for smollm2-135m, one needs ~9 GB), `gradient_checkpointing=True`
    > (one example then needs ~2-3 GB, at ~30% more time), `bf16` (autocast) where a CUDA device or the CPU
    > (AVX-512 BF16 / AMX) supports it (`--bf16 false`: fp32), `logging_steps=1`,
    > `save_steps=5` (a CPU epoch takes hours: checkpoint often, resume with `--resume_from_checkpoint last`),
    > `save_total_limit=2`, `report_to="none"`.
    """

    output_dir: str = field(default="runs/wm-sft", metadata={"help": "Where checkpoints, adapter and tokenizer go."})
    dataset_path: list[str] | None = field(
        default=None,
        metadata={"help": "Trajectory JSONL files or directories (default: the shipped expert + exploration data)."},
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
    prompt_style: str = field(
        default="compact",
        metadata={
            "help": "Prompts trained on: 'compact', 'grounded' (compact with the judge's objective-grounding notes), "
            "'grounded-text' (grounded, and an unnamed element is read by its text) or 'paper' (the paper's).",
            "choices": list(PROMPT_STYLES),
        },
    )
    judge_prefixes: str = field(
        default="all",
        metadata={
            "help": "Judge cases per success: 'all' (every shorter cut is a failure case) or 'last' (only the cut "
            "before the last action).",
            "choices": list(JUDGE_PREFIXES),
        },
    )
    judge_early_final: bool = field(
        default=False,
        metadata={"help": "Also learn each success's final action taken too early as a failure (near misses)."},
    )
    judge_max_axtree_chars: int = field(
        default=DEFAULT_JUDGE_MAX_AXTREE_CHARS,
        metadata={"help": "Character budget of the final tree in judge examples (0: no limit)."},
    )
    max_axtree_chars: int = field(
        default=DEFAULT_MAX_AXTREE_CHARS,
        metadata={"help": "Character budget of the current and next trees (0: no limit)."},
    )

    overlong: str = field(
        default="cut",
        metadata={"help": "Examples over max_length tokens: 'cut' or 'drop'.", "choices": list(OVERLONG)},
    )
    max_train_minutes: float = field(
        default=0.0,
        metadata={
            "help": "Stop (and save) after the first step that ends past this many minutes of training (0: no limit)."
        },
    )

    # Defaults overridden from TrajectorySFTConfig / SFTConfig.
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the transitions (paper: 1)."})
    max_length: int | None = field(default=3072, metadata={"help": "Longest tokenized example; longer ones are cut."})
    per_device_train_batch_size: int = field(default=1, metadata={"help": "Examples per device per forward pass."})
    gradient_accumulation_steps: int = field(default=4, metadata={"help": "Forward passes per optimizer step."})
    save_steps: float = field(default=5, metadata={"help": "Save a checkpoint every this many steps."})

    def __post_init__(self) -> None:
        if self.label_missing not in LABEL_MISSING:
            raise ValueError(f"label_missing must be one of {LABEL_MISSING}, got {self.label_missing!r}")
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"loss_on must be one of {LOSS_ON}, got {self.loss_on!r}")
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {sorted(OUTPUT_MODES)}, got {self.output_mode!r}")
        check_prompt_style(self.prompt_style)
        if self.examples not in EXAMPLES:
            raise ValueError(f"examples must be one of {EXAMPLES}, got {self.examples!r}")
        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong must be one of {OVERLONG}, got {self.overlong!r}")
        if not self.max_train_minutes >= 0:
            raise ValueError(f"max_train_minutes must be >= 0, got {self.max_train_minutes}")
        if self.judge_prefixes not in JUDGE_PREFIXES:
            raise ValueError(f"judge_prefixes must be one of {JUDGE_PREFIXES}, got {self.judge_prefixes!r}")
        if self.max_axtree_chars < 0 or self.judge_max_axtree_chars < 0:
            raise ValueError(
                f"max_axtree_chars and judge_max_axtree_chars must be >= 0, got {self.max_axtree_chars} and "
                f"{self.judge_max_axtree_chars}"
            )
        super().__post_init__()


# ---------------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------------


def trained_adapter_base(model_name_or_path: str) -> str | None:
    """The base model of ``model_name_or_path`` if it is a LoRA adapter (to continue), else ``None``."""
    resolved = resolve_model(model_name_or_path)
    return adapter_base(resolved) if isinstance(resolved, Path) else None


def load_model_to_train(config: WorldModelSFTConfig) -> tuple[Any, Any, Any]:
    """``(model or its path, tokenizer, peft config)`` for the trainer.

    A LoRA adapter as ``model_name_or_path`` (a shipped name such as ``smollm2-135m-judge``, or a directory) is
    trained on as it is: its own LoRA weights continue, on its base model, instead of a fresh adapter on the
    adapter's weights merged. That is how a judge is retrained on new data (dreamed pages) in a fraction of the
    time a judge takes from scratch.
    """
    from .model_loading import load_model_and_tokenizer

    if trained_adapter_base(config.model_name_or_path) is not None:
        if not config.use_peft:
            raise ValueError(f"{config.model_name_or_path} is a LoRA adapter: it trains with use_peft (the default)")
        recorded = model_prompt_style(config.model_name_or_path)
        # one adapter, one prompt style: DreamWeb prompts it in the recorded one (compact may go on to grounded,
        # which only adds lines; the new adapter records the new style)
        if not continues_prompt_style(recorded, config.prompt_style):
            raise ValueError(
                f"{config.model_name_or_path} was trained on {recorded!r} prompts: continue it with "
                f"--prompt_style {recorded}, not {config.prompt_style!r}"
            )
        model, tokenizer, _ = load_model_and_tokenizer(config.model_name_or_path, trainable=True)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer, None
    model_path, tokenizer = load_training_tokenizer(config.model_name_or_path)
    return model_path, tokenizer, config.peft_config()


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

    if trajectories is None:
        trajectories = load_trajectories(config.dataset_path, config.dataset_split)
    model, tokenizer, peft_config = load_model_to_train(config)
    data = build_world_model_dataset(tokenizer, trajectories, config)
    # Most tokens are prompt (the paper's system prompt alone is ~850 tokens): the trainer scores the LM head only
    # where there is a label, on CPU (the same loss as TRL's, checked in tests/test_sft.py).
    trainer = LabelledHeadSFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(data.rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    if config.max_train_minutes > 0:
        trainer.add_callback(TimeBudgetCallback(config.max_train_minutes * 60))
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

    Raises:
        TrainingInterrupted: On Ctrl-C during training, once the last finished update is saved as a checkpoint.
    """
    start = time.perf_counter()
    resume = resolve_checkpoint(config)
    trainer, data_stats = build_world_model_trainer(config, trajectories)
    train_start = time.perf_counter()
    with checkpoint_on_interrupt(trainer, config.output_dir):  # Ctrl-C: the last finished update is saved
        result = trainer.train(resume_from_checkpoint=resume)
    train_seconds = time.perf_counter() - train_start
    trainer.save_model(config.output_dir)
    trainer.processing_class.save_pretrained(config.output_dir)
    if trainer.is_world_process_zero():
        base = trained_adapter_base(config.model_name_or_path) or config.model_name_or_path
        name_adapter_base(config.output_dir, base)
        # read back by dynaweb_env.models.world_model_output_mode and model_prompt_style
        info = {"output_mode": config.output_mode, "examples": config.examples, "prompt_style": config.prompt_style}
        (Path(config.output_dir) / WORLD_MODEL_INFO_FILE).write_text(json.dumps(info) + "\n")

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    steps_this_run = trainer.state.global_step - checkpoint_step(resume)
    summary = {
        "model": config.model_name_or_path,
        "output_dir": str(config.output_dir),
        "adapter": bool(config.use_peft),
        "loss_on": config.loss_on,
        "output_mode": config.output_mode,
        "prompt_style": config.prompt_style,
        "examples": config.examples,
        "judge_prefixes": config.judge_prefixes,
        "judge_early_final": config.judge_early_final,
        "max_axtree_chars": config.max_axtree_chars,
        "max_length": config.max_length,
        "overlong": config.overlong,
        "max_train_minutes": config.max_train_minutes,
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
            f"{data.get('dropped_prompt_too_long', 0) + data.get('dropped_overlong', 0)} dropped",
            f"  saved {kind} ({summary['trainable_parameters']:,} trainable parameters) and tokenizer to "
            f"{summary['output_dir']}",
        ]
    )


def parse_config(argv: Sequence[str] | None = None) -> WorldModelSFTConfig:
    """Parse command-line arguments (``--config x.yaml`` gives defaults that flags override)."""
    parser = word_negated_flags(TrlParser(WorldModelSFTConfig, prog="dynaweb-train-wm"))
    (config,) = parser.parse_args_and_config(args=argv)
    return config


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Entry point of ``dynaweb-train-wm``: parse ``argv``, train, print and return the summary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    summary = train_world_model(parse_config(argv), command=shlex.join(["dynaweb-train-wm", *argv]))
    print(format_summary(summary))
    return summary


def cli() -> None:
    """Console-script entry point: :func:`main`, and after Ctrl-C exit 130 with one line saying what was saved."""
    argv = sys.argv[1:]
    config = parse_config(argv)
    try:
        summary = train_world_model(config, command=shlex.join(["dynaweb-train-wm", *argv]))
    except KeyboardInterrupt as interrupt:
        raise SystemExit(exit_interrupted("dynaweb-train-wm", interrupt, config.output_dir)) from None
    print(format_summary(summary))


__all__ = [
    "IGNORE_INDEX",
    "SUMMARY_FILE",
    "WorldModelSFTConfig",
    "WorldModelData",
    "TimeBudgetCallback",
    "EXAMPLES",
    "load_trajectories",
    "is_terminal_transition",
    "judge_examples",
    "world_model_example",
    "tokenize_example",
    "build_world_model_dataset",
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
