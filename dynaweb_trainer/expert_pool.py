"""Expert interleaving: real expert trajectories that replace rollout slots in a GSPO batch.

Each slot is replaced with probability ``expert_frac`` (stratified within each group, see
:func:`expert_slots`) by a real expert trajectory of the same task, encoded exactly as a rollout
(:mod:`~dynaweb_trainer.encoding`) and rewarded with its real reward. Its sampling log-probs are NaN:
the policy did not sample those tokens. TRL uses sampling log-probs only to correct vLLM/trainer
mismatch (and in the optional off-policy mask) and treats NaN as "no correction" there; GSPO's own
ratio s_i compares the current policy with π_old recomputed by the trainer, so expert slots enter
eq. 8 like any other group member.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from dynaweb_env.data.schema import Trajectory
from dynaweb_env.data.tasks import step_limit


class ExpertPool:
    """Successful expert trajectories by task (and task seed) for expert interleaving.

    Args:
        trajectories: Demonstrations; only successful ones (``success`` or ``reward > 0``) with at
            least one action and at most ``max_turns`` actions (a long task's own limit,
            :func:`~dynaweb_env.data.tasks.step_limit`) are kept.
        max_turns: The agent's step limit.
    """

    def __init__(self, trajectories: Sequence[Trajectory], max_turns: int):
        self.by_task: dict[str, list[Trajectory]] = defaultdict(list)
        self.by_seed: dict[tuple[str, Any], list[Trajectory]] = defaultdict(list)
        for trajectory in trajectories:
            limit = step_limit(trajectory.task_id, max_turns)
            if not (trajectory.success or trajectory.reward > 0) or not 1 <= len(trajectory.actions) <= limit:
                continue
            self.by_task[trajectory.task_id].append(trajectory)
            self.by_seed[(trajectory.task_id, trajectory.metadata.get("seed"))].append(trajectory)

    def __len__(self) -> int:
        return sum(len(items) for items in self.by_task.values())

    def lacking(self, task_ids: Sequence[str]) -> list[str]:
        """The tasks of ``task_ids`` the pool holds no trajectory of, sorted."""
        return sorted(set(task_ids) - set(self.by_task))

    def shortest_turn_tokens(self, encoder: Any) -> int | None:
        """Tokens of the shortest expert turn (reasoning and action, in the policy's response format), or ``None``.

        A ``max_turn_tokens`` below it cuts every response of that length before its action: no rollout can act.
        """
        from dynaweb_env.agent import format_policy_response

        lengths = [
            len(encoder.response_ids(format_policy_response(step.reasoning, step.action)))
            for trajectories in self.by_task.values()
            for trajectory in trajectories
            for step in trajectory.steps
            if step.action
        ]
        return min(lengths) if lengths else None

    def sample(self, task_id: str, task_seed: Any, rng: np.random.Generator) -> Trajectory | None:
        """An expert trajectory of the task, of the same seed when one exists; ``None`` if none."""
        candidates = self.by_seed.get((task_id, task_seed)) or self.by_task.get(task_id)
        return candidates[int(rng.integers(len(candidates)))] if candidates else None


def expert_slots(prompts: Sequence[str], expert_frac: float, rng: np.random.Generator) -> list[int]:
    """Which slots an expert trajectory replaces: each with marginal probability ``expert_frac``.

    The draw is stratified by group (a run of identical prompts): a group of G gets
    ``floor(expert_frac * G)`` experts, plus one with probability equal to the fractional part, at
    random positions. Independent per-slot draws have the same marginals but often give a group no
    expert or only experts, which leaves it without the contrast GSPO's group advantage needs.
    """
    slots: list[int] = []
    start = 0
    while start < len(prompts):
        end = start
        while end < len(prompts) and prompts[end] == prompts[start]:
            end += 1
        expected = expert_frac * (end - start)
        count = int(expected) + int(rng.random() < expected - int(expected))
        slots.extend(sorted(start + int(i) for i in rng.choice(end - start, size=count, replace=False)))
        start = end
    return slots


def load_expert_trajectories(path: str | None, start_states: str | None = None) -> list[Trajectory]:
    """Expert demonstrations for interleaving: those of ``path``, else of the run's start states.

    Args:
        path: A trajectory JSONL file (or ``.jsonl.xz``) or a directory of them.
        start_states: The run's start-state file or directory, read when ``path`` is ``None``; ``None``: the
            shipped start states (:func:`~dynaweb_env.data.start_states.builtin_start_states_path`, the large
            dataset's train-split experts). Defaulting to the start states gives every task a run draws its
            experts; a separate default file would leave groups of the tasks it lacks without one.

    Returns:
        The trajectories recorded by an expert or on a real page (``source`` ``"expert"`` or ``"real"``).
    """
    from dynaweb_env.data.io import read_trajectories
    from dynaweb_env.data.start_states import builtin_start_states_path

    source = path or start_states or builtin_start_states_path()
    return [trajectory for trajectory in read_trajectories(source) if trajectory.source in ("expert", "real")]


__all__ = ["ExpertPool", "expert_slots", "load_expert_trajectories"]
