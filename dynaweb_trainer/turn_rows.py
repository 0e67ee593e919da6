"""GSPO with a prompt of its own each turn (``page_history="actions"``): every turn is a training row.

With one growing conversation an episode is one row of TRL's batch. With a prompt a turn, a turn's answer must
be trained under the prompt it was sampled from, so each turn is a row of its own, and the rows of one episode
must share its advantage. TRL 1.16 allows this without touching its internals:

- its ``RepeatSampler`` repeats each task query ``num_generations`` times *consecutively*, and advantages are
  normalised over consecutive blocks of ``num_generations`` rows (``GRPOTrainer._compute_advantages``);
- so with ``T`` turn slots an episode (:func:`turn_slots`: the longest step limit of the run's tasks), TRL is
  given ``num_generations x T`` (:func:`per_turn_args`). :class:`~dynaweb_trainer.rollout_func.DynaWebRollout`
  runs one episode per ``T`` repeated queries (``prompts[::T]``), as it would run ``num_generations`` episodes,
  and :func:`turn_rows` writes turn ``t`` of episode ``g`` into row ``g x T + t``;
- a slot past the episode's last turn is an empty row: one EOS token of prompt and of completion, ``env_mask``
  0, so it adds no loss. Every row carries its episode's reward, so each block's mean and spread are those of
  its ``num_generations`` episodes (each counted ``T`` times) and every turn gets its episode's advantage, as
  in WebAgent-R1's multi-turn GRPO;
- the loss stays GSPO's (``loss_type="grpo"``, one importance ratio per sequence, here per turn, averaged over
  the rows): empty rows add zero, so it is the mean over the update's turns times their share of the rows.
  TRL's ``"dapo"`` would drop that factor but weight each turn by its length (TRL warns of it with sequence-level
  ratios); Adam's step barely depends on a constant factor of the loss, so the paper's loss is kept.

An update then makes ``num_generations x T`` rows where it made ``num_generations``, most of them one token
long when episodes are short: ``gradient_accumulation_steps`` is multiplied by ``T`` with it, so the episodes
an update learns from are those the configuration asks for.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from dynaweb_env.data.tasks import step_limit

from .rollout import EpisodeResult


def turn_slots(task_ids: Iterable[str], agent_max_steps: int) -> int:
    """``T``: the most turns an episode of any of ``task_ids`` can take (the step limit, raised for long tasks)."""
    return max((step_limit(task, agent_max_steps) for task in set(task_ids)), default=agent_max_steps)


def per_turn_args(args: Any, slots: int) -> Any:
    """A copy of the run's ``GSPOConfig`` with TRL's row counts for ``slots`` rows an episode.

    ``num_generations``, ``gradient_accumulation_steps``, ``steps_per_generation`` and ``generation_batch_size``
    are multiplied by ``slots`` (so a generation round draws the same task queries and an update learns from the
    same episodes), and ``turn_slots`` records ``slots``. The caller's object is left as it was.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    expanded = copy.deepcopy(args)
    for name in ("num_generations", "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size"):
        setattr(expanded, name, getattr(args, name) * slots)
    expanded.turn_slots = slots
    return expanded


def turn_rows(results: Sequence[EpisodeResult], slots: int, eos_token_id: int) -> dict[str, list[Any]]:
    """The token lists of ``slots`` rows per episode: turn ``t`` of episode ``g`` in row ``g x slots + t``, its own
    prompt and answer (``env_mask`` 1, its sampling log-probs), then empty rows (``env_mask`` 0) to ``slots``.

    Raises:
        ValueError: If an episode has no prompt of its own per turn, or more turns than ``slots``.
    """
    rows: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    empty = [eos_token_id]
    for result in results:
        encoded = result.encoded
        if not encoded.per_turn:
            raise ValueError("turn_rows needs episodes encoded with a prompt each turn (page_history='actions')")
        if encoded.num_turns > slots:
            raise ValueError(f"an episode of {result.task_id!r} took {encoded.num_turns} turns, more than {slots}")
        for index, (start, end) in enumerate(encoded.turn_spans):
            rows["prompt_ids"].append(list(encoded.turn_prompts[index]))
            rows["completion_ids"].append(encoded.completion_ids[start:end])
            rows["logprobs"].append(encoded.logprobs[start:end])
            rows["env_mask"].append([1] * (end - start))
        for _ in range(slots - encoded.num_turns):
            rows["prompt_ids"].append(list(empty))
            rows["completion_ids"].append(list(empty))
            rows["logprobs"].append([0.0])
            rows["env_mask"].append([0])
    return rows


__all__ = ["turn_slots", "per_turn_args", "turn_rows"]
