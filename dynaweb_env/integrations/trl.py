"""TRL: DreamWeb-v0 as a tool-calling environment for ``GRPOTrainer(environment_factory=...)``.

Each action the policy is offered (:data:`~dynaweb_env.action_spec.OFFERED_ACTIONS`: ``click``, ``type``,
``scroll``, ..., ``stop``, ``select``) is a tool, made from its spec, that acts on the page and returns the
next one as text. ``reset(**row)`` starts a dream from the
row's ``task`` / ``task_seed`` / ``step_index`` columns (so the ``G`` rollouts of a prompt share
one start state) and returns the first page, which TRL appends to the prompt. ``get_reward``
returns the dream's verdict: a dream still running when the model stops calling tools is ended
and judged then, so its reward is not a silent 0.

Example::

    from trl import GRPOConfig, GRPOTrainer
    from dynaweb_env.integrations.trl import dreamweb_environment_factory, dreamweb_prompts
    from dynaweb_env.models import prepare_model

    trainer = GRPOTrainer(
        model=str(prepare_model("smollm2-135m")),      # its template supports tool calling
        args=GRPOConfig(num_generations=4, max_completion_length=4096, max_steps=10),
        train_dataset=dreamweb_prompts(64),
        environment_factory=dreamweb_environment_factory(dream_length=5),
    )
    trainer.train()

TRL calls the tools of its rollouts one after another on one thread, so these dream steps are not
batched across rollouts; ``max_completion_length`` counts the whole conversation, pages included.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..action_spec import ACTION_SPECS, OFFERED_ACTIONS, tool_method
from ..agent import observation_message
from ._common import WebEpisode, render_step

#: The user turn of every prompt of :func:`dreamweb_prompts`; the first page is appended to it.
TASK_PROMPT = (
    "You are a web agent. Act on the web page below with the tools, one action at a time, until the "
    "objective is done; then call stop with your answer (or N/A). Each tool returns the page after the "
    "action.\n\n"
)


class DreamWebTools:
    """A dream (or real) web page whose actions are tools, for TRL's ``environment_factory``.

    Args:
        env_id: ``"DreamWeb-v0"`` (default) or ``"RealWeb-v0"``.
        **env_kwargs: Passed to ``gym.make`` (e.g. ``world_model="tiny-random"``, ``dream_length``).

    TRL needs a no-argument factory: use :func:`dreamweb_environment_factory`.
    """

    def __init__(self, env_id: str = "DreamWeb-v0", **env_kwargs: Any):
        self._episode = WebEpisode(env_id, **env_kwargs)

    def reset(self, **row: Any) -> str:
        """Start an episode from a dataset row (``seed``, ``task``, ``task_seed``, ``step_index`` used) and show it."""
        options = {key: value for key, value in row.items() if key != "seed"}
        observation, _ = self._episode.reset(seed=row.get("seed"), **options)
        return observation_message(observation)

    def get_reward(self) -> float:
        """The episode's reward: a dream still running is ended and judged now."""
        return self._episode.finish()


def _act(tools: DreamWebTools, action: str) -> str:
    """Perform one action of a tool call; the page after it, as text."""
    episode = tools._episode
    if episode.done:
        raise ValueError("the episode has ended; no more actions are possible")
    observation, _, _, _, info = episode.step(action)
    return render_step(observation, info, episode.done, episode.reward)


# The tools: one method per offered action, made from its spec (signature, type hints and docstring, which
# TRL reads with transformers' get_json_schema), each performing the action with _act.
for _name in OFFERED_ACTIONS:
    setattr(DreamWebTools, _name, tool_method(ACTION_SPECS[_name], _act))
del _name


def dreamweb_environment_factory(env_id: str = "DreamWeb-v0", **env_kwargs: Any) -> Callable[[], DreamWebTools]:
    """The no-argument factory TRL's ``environment_factory`` takes; arguments as for :class:`DreamWebTools`.

    The env arguments are checked now (one env is built and dropped; models load on first use).
    """
    DreamWebTools(env_id, **env_kwargs)._episode.close()
    return functools.partial(DreamWebTools, env_id, **env_kwargs)


def dreamweb_prompts(
    num_prompts: int,
    seed: int = 0,
    tasks: Sequence[str] | None = None,
    start_states: str | None = None,
    include_intermediate: bool = True,
    system_prompt: str | None = None,
):
    """A ``datasets.Dataset`` of ``num_prompts`` rows, each pinning one start state for :class:`DreamWebTools`.

    Columns: ``prompt`` (conversational: optional system turn, then :data:`TASK_PROMPT`), ``task``,
    ``task_seed`` and ``step_index``. Start states are drawn with replacement, seeded by ``seed``,
    from the same set ``DreamWeb-v0`` loads (``start_states`` / ``tasks`` / ``include_intermediate``
    as there).
    """
    import numpy as np
    from datasets import Dataset

    from ..envs.dream import load_task_start_states

    if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < 1:
        raise ValueError(f"num_prompts must be a positive integer, got {num_prompts!r}")
    states = [s for s in load_task_start_states(start_states, tasks, include_intermediate) if s.task_seed is not None]
    if not states:
        raise ValueError("no start state with a task seed to pin: record start states with task seeds")
    picks = np.random.default_rng(seed).integers(len(states), size=num_prompts)
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    rows = [states[int(i)] for i in picks]
    return Dataset.from_dict(
        {
            "prompt": [[*head, {"role": "user", "content": TASK_PROMPT}] for _ in rows],
            "task": [state.task_id for state in rows],
            "task_seed": [state.task_seed for state in rows],
            "step_index": [state.step_index for state in rows],
        }
    )


__all__ = ["DreamWebTools", "TASK_PROMPT", "dreamweb_environment_factory", "dreamweb_prompts"]
