"""Task queries: the rows of a GSPO training dataset, one environment start each.

Each dataset row is one JSON prompt (:func:`make_task_prompt`) naming an environment and its reset
options. TRL repeats each prompt ``num_generations`` times, so a group of G rollouts shares one start:

- ``real``: ``{"task": id, "task_seed": n}``, the MiniWoB++ page of that seed;
- ``dream``: ``{"start_state_id": "<trajectory id>@<step index>"}``, a real page (initial or
  intermediate) of a recorded trajectory. The row carries only the id; :class:`StartStateIndex`
  turns it into the start state itself when the episode runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dynaweb_env.data.start_states import StartState

    from .config import GSPOConfig

#: Environments a task query can name.
ENV_KINDS = ("dream", "real")
#: The reset option of a dream query that names its start state.
START_STATE_ID = "start_state_id"


def make_task_prompt(env: str, task_id: str, options: dict[str, Any]) -> str:
    """The dataset prompt of one task query: ``{"env", "task_id", "options"}`` as JSON."""
    if env not in ENV_KINDS:
        raise ValueError(f"env must be one of {ENV_KINDS}, got {env!r}")
    return json.dumps({"env": env, "task_id": task_id, "options": options}, sort_keys=True, ensure_ascii=False)


def parse_task_prompt(prompt: str) -> dict[str, Any]:
    """Inverse of :func:`make_task_prompt` (``ValueError`` for anything else)."""
    try:
        query = json.loads(prompt)
    except (TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"a DynaWeb task prompt must be JSON from make_task_prompt, got {prompt!r:.80}") from error
    if not isinstance(query, dict) or query.get("env") not in ENV_KINDS or not isinstance(query.get("options"), dict):
        raise ValueError(f"malformed DynaWeb task prompt: {prompt!r:.80}")
    return query


class StartStateIndex:
    """Start states by id: ``"<trajectory id>@<step index>"`` (``#2``, ``#3``, ... added to repeats).

    Args:
        states: The start states, in load order (ids of repeated trajectory ids depend on it).
    """

    def __init__(self, states: Iterable[StartState]):
        self.by_id: dict[str, StartState] = {}
        for state in states:
            key = base = f"{state.trajectory_id}@{state.step_index}"
            copy = 1
            while key in self.by_id:
                copy += 1
                key = f"{base}#{copy}"
            self.by_id[key] = state
        self.ids = {id(state): key for key, state in self.by_id.items()}

    def __len__(self) -> int:
        return len(self.by_id)

    def id_of(self, state: StartState) -> str:
        """The id of a start state of this index."""
        return self.ids[id(state)]

    def resolve(self, options: dict[str, Any]) -> dict[str, Any]:
        """Reset options with a ``start_state_id`` replaced by the start state (other options unchanged).

        Raises:
            ValueError: If the id is not in the index.
        """
        if START_STATE_ID not in options:
            return options
        key = options[START_STATE_ID]
        state = self.by_id.get(key)
        if state is None:
            raise ValueError(f"unknown start state id {key!r}: not among the {len(self)} loaded start states")
        resolved = {name: value for name, value in options.items() if name != START_STATE_ID}
        return {**resolved, "start_state": state.to_dict()}


def load_start_state_index(args: GSPOConfig) -> StartStateIndex:
    """The run's dream start states (``args.start_states``, ``include_intermediate``, ``tasks``)."""
    from dynaweb_env.data.start_states import load_start_states

    states = load_start_states(args.start_states, include_intermediate=args.include_intermediate)
    if args.tasks:
        states = [state for state in states if state.task_id in set(args.tasks)]
    return StartStateIndex(states)


def build_task_prompts(
    args: GSPOConfig, start_states: StartStateIndex | None = None, real_tasks: Sequence[str] = ()
) -> list[str]:
    """The task-query prompts of a run.

    ``dream``: one per start state. ``real``: one per (task, seed) with seeds
    ``0 .. real_task_seeds - 1``. ``mix``: ``max(#dream + #real, 64)`` prompts drawn (seeded with
    ``args.seed``) so that a fraction ``real_frac`` of them is real. With ``task_order="balanced"`` they come
    in :func:`balanced_order` (and the trainer does not shuffle them).
    """
    dream = [
        make_task_prompt("dream", state.task_id, {START_STATE_ID: key})
        for key, state in (start_states.by_id.items() if start_states is not None else ())
    ]
    real = [
        make_task_prompt("real", task, {"task": task, "task_seed": seed})
        for task in real_tasks
        for seed in range(args.real_task_seeds)
    ]
    if args.environment == "dream":
        prompts = dream
    elif args.environment == "real":
        prompts = real
    else:
        if not dream or not real:
            raise ValueError("--env mix needs both dream start states and real tasks")
        rng = np.random.default_rng(args.seed)
        total = max(len(dream) + len(real), 64)
        num_real = int(round(args.real_frac * total))
        prompts = [real[i] for i in rng.integers(len(real), size=num_real)]
        prompts += [dream[i] for i in rng.integers(len(dream), size=total - num_real)]
    if not prompts:
        raise ValueError(f"no task queries for --env {args.environment}: check --tasks and the start states")
    return balanced_order(prompts, args.seed) if args.task_order == "balanced" else prompts


def balanced_order(prompts: Sequence[str], seed: int) -> list[str]:
    """``prompts`` reordered so that every task comes once before any task comes again.

    Round after round, one prompt of each task that has prompts left, the tasks in a new seeded order each
    round, each task's prompts in a seeded order. With one task query per update, ``n`` updates then train
    ``min(n, #tasks)`` different tasks; in a shuffled dataset the tasks with more start states (multi-step
    tasks give one per page) crowd out the others, and which tasks a short run trains differs from seed to
    seed.
    """
    rng = np.random.default_rng(seed)
    by_task: dict[str, list[str]] = {}
    for prompt in prompts:
        by_task.setdefault(parse_task_prompt(prompt)["task_id"], []).append(prompt)
    queues = {task: [items[i] for i in rng.permutation(len(items))] for task, items in sorted(by_task.items())}
    ordered: list[str] = []
    while queues:
        for task in rng.permutation(sorted(queues)):
            ordered.append(queues[task].pop())
            if not queues[task]:
                del queues[task]
    return ordered


def build_train_dataset(args: GSPOConfig) -> tuple[Any, list[str], StartStateIndex | None]:
    """The task-query dataset of a run, the real task ids it uses and its dream start states."""
    from datasets import Dataset

    from dynaweb_env.data.start_states import load_start_states

    start_states, real_tasks = None, []
    if args.environment in ("dream", "mix"):
        start_states = load_start_state_index(args)
    if args.environment in ("real", "mix"):
        if args.tasks:
            real_tasks = list(args.tasks)
        else:
            real_tasks = sorted({state.task_id for state in load_start_states(args.start_states, False)})
    prompts = build_task_prompts(args, start_states, real_tasks)
    return Dataset.from_dict({"prompt": prompts}), real_tasks, start_states


class TooFewQueriesError(ValueError):
    """A run's dataset cannot fill one generation round (:func:`check_query_count`)."""


def check_query_count(args: GSPOConfig, count: int) -> None:
    """Refuse a run whose dataset holds fewer task queries than one generation round draws.

    TRL draws ``generation_batch_size / num_generations`` different queries a round (``per_device_train_batch_size
    x steps_per_generation x processes`` episodes, in groups of ``num_generations``) and drops a round it cannot
    fill: with fewer queries than that, training ends at once with no update and no error.

    Raises:
        TooFewQueriesError: Naming the flags that fix it.
    """
    needed = args.generation_batch_size // args.num_generations
    if count < needed:
        raise TooFewQueriesError(
            f"{count} task queries, but one generation round of {args.generation_batch_size} episodes in groups of "
            f"{args.num_generations} draws {needed} different ones, so no update would run. Add queries "
            "(--real-task-seeds, --tasks, more start states) or draw fewer a round: lower "
            "--per-device-train-batch-size or --gradient-accumulation-steps, or raise --num-generations."
        )


def task_ids_of(prompts: Iterable[str], env: str | None = None) -> list[str]:
    """The task ids a list of task-query prompts names (of ``env`` only, if given), sorted."""
    queries = [parse_task_prompt(prompt) for prompt in prompts]
    return sorted({query["task_id"] for query in queries if env is None or query["env"] == env})


def real_tasks_of(prompts: Iterable[str]) -> list[str]:
    """The real task ids a list of task-query prompts names, sorted."""
    return task_ids_of(prompts, "real")


__all__ = [
    "ENV_KINDS",
    "START_STATE_ID",
    "StartStateIndex",
    "TooFewQueriesError",
    "balanced_order",
    "build_task_prompts",
    "build_train_dataset",
    "check_query_count",
    "load_start_state_index",
    "make_task_prompt",
    "parse_task_prompt",
    "real_tasks_of",
]
