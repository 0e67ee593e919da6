"""World-model SFT data: trajectories -> transitions (and judge verdicts) -> tokens with a loss mask.

Every real transition ``(o_t, a_t, o_{t+1})`` becomes one chat example in the world model's own
prompt format (see :mod:`dynaweb_trainer.world_model_sft` for the layout and the loss);
:func:`judge_examples` adds the trajectory judge's verdicts on real outcomes.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynaweb_env.axtree import structural_diff
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.shipped import WORLD_MODEL_TRAJECTORIES
from dynaweb_env.observation import truncate_axtree
from dynaweb_env.world_model.judge import (
    DEFAULT_JUDGE_MAX_AXTREE_CHARS,
    build_judge_messages,
    format_judge_target,
)
from dynaweb_env.world_model.judge_cases import judge_cases
from dynaweb_env.world_model.model import DEFAULT_MAX_AXTREE_CHARS, OUTPUT_MODE_PROMPTS
from dynaweb_env.world_model.patch import PATCH_HEADER, format_patch_target
from dynaweb_env.world_model.prompts import TREE_HEADER, build_world_model_messages, format_world_model_target
from dynaweb_env.world_model.state_changes import transition_reasoning

from .sft_base import IGNORE_INDEX, select_trajectories

if TYPE_CHECKING:
    from .world_model_sft import WorldModelSFTConfig


def load_trajectories(paths: Sequence[str | os.PathLike[str]] | None = None, split: str | None = "train") -> list:
    """Read trajectories for world-model SFT (default: the shipped data), keeping ``metadata["split"] == split``.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If nothing is left after selection (the message says which splits exist).
    """
    return select_trajectories(paths, WORLD_MODEL_TRAJECTORIES, split)


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
    prompt_style: str = "paper",
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
        system_prompt=OUTPUT_MODE_PROMPTS[output_mode](prompt_style),
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
    trajectories: Sequence[Trajectory],
    max_axtree_chars: int = DEFAULT_JUDGE_MAX_AXTREE_CHARS,
    prompt_style: str = "paper",
    every_prefix: bool = True,
    early_final: bool = False,
) -> list[tuple[list[dict[str, str]], str, bool]]:
    """The judge's ``(messages, target, success)`` examples: the cases of ``judge_cases(..., every_prefix,
    early_final)`` in the prompt :class:`~dynaweb_env.world_model.TrajectoryJudge` sends, with the verdict of
    its real outcome.

    ``every_prefix=False`` keeps each trajectory as recorded plus, for a success, the cut before its last action
    (the hardest failure to tell apart): about 35% fewer examples on the large data, for a CPU time budget.
    ``early_final`` adds each success's final action taken too early, as failures."""
    examples = []
    for request, reward, _ in judge_cases(trajectories, every_prefix=every_prefix, early_final=early_final):
        success = reward >= 0.5
        messages = build_judge_messages(request, max_axtree_chars, prompt_style)
        examples.append((messages, format_judge_target(success, prompt_style), success))
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
            if config.overlong == "drop":
                stats["dropped_overlong"] += 1
                return
            row = {key: value[: config.max_length] for key, value in row.items()}
            if all(label == IGNORE_INDEX for label in row["labels"]):
                stats["dropped_prompt_too_long"] += 1
                return
            stats["truncated"] += 1
        stats["loss_tokens"] += sum(label != IGNORE_INDEX for label in row["labels"])
        stats["tokens"] += len(row["input_ids"])
        rows.append(row)

    if config.examples in ("judge", "both"):
        for messages, target, success in judge_examples(
            trajectories,
            config.judge_max_axtree_chars,
            config.prompt_style,
            config.judge_prefixes == "all",
            config.judge_early_final,
        ):
            stats["judge_examples"] += 1
            stats["judge_successes"] += success
            add(tokenize_example(tokenizer, messages, target))
    # A dreamed page is the world model's own output, not a real transition: dreams teach the judge only.
    real = [t for t in trajectories if t.source != "dream"]
    stats["dreamed_trajectories_not_transitions"] = len(trajectories) - len(real)
    transitions = [] if config.examples == "judge" else [(t, i) for t in real for i in range(len(t.steps) - 1)]
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
            prompt_style=config.prompt_style,
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


__all__ = [
    "WorldModelData",
    "build_world_model_dataset",
    "is_terminal_transition",
    "judge_examples",
    "load_trajectories",
    "tokenize_example",
    "world_model_example",
]
