"""Building the vector envs rollouts run on: the one place DreamWeb-v0 and RealWeb-v0 are made.

Both are made with ``autoreset_mode=DISABLED``, the mode :func:`~dynaweb_trainer.rollout.run_episodes`
needs (it resets sub-envs itself, grouping equal starts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import GSPOConfig


def make_real_vector_env(
    tasks: Sequence[str], num_envs: int, max_steps: int = 10, headless: bool = True, **env_kwargs: Any
) -> Any:
    """``RealWeb-v0`` with ``num_envs`` browsers.

    One browser per sub-env (~640 MB each): async when there are several, so that resets and clicks
    overlap; text observations then need ``shared_memory=False`` (DESIGN.md).

    Args:
        tasks: The tasks the env may be reset to (the first is its default).
        num_envs: Browsers.
        max_steps: The env's own step limit.
        headless: Run the browsers without windows.
        env_kwargs: Other ``RealWeb-v0`` arguments.
    """
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import dynaweb_env  # noqa: F401  (registers the envs)

    task_list = list(tasks)
    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.DISABLED}
    if num_envs > 1:
        vector_kwargs["shared_memory"] = False
    return gym.make_vec(
        "RealWeb-v0",
        num_envs=num_envs,
        vectorization_mode="async" if num_envs > 1 else "sync",
        vector_kwargs=vector_kwargs,
        max_steps=max_steps,
        headless=headless,
        **({"task": task_list[0], "tasks": task_list} if task_list else {}),
        **env_kwargs,
    )


def make_dream_vector_env(num_envs: int, **settings: Any) -> Any:
    """``DreamWeb-v0`` with ``num_envs`` dreams stepped together (one batched world-model call per step).

    Args:
        num_envs: Dreams.
        settings: ``DreamWeb-v0`` arguments (:meth:`~dynaweb_trainer.config.DreamEnvSettings.env_kwargs`).
    """
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import dynaweb_env  # noqa: F401  (registers the envs)

    return gym.make_vec("DreamWeb-v0", num_envs=num_envs, autoreset_mode=AutoresetMode.DISABLED, **settings)


def make_vector_env(kind: str, args: GSPOConfig, num_envs: int, tasks: Sequence[str] | None = None) -> Any:
    """The vector env of one kind (``"dream"`` or ``"real"``) for a training run's configuration."""
    if kind == "dream":
        return make_dream_vector_env(num_envs, **args.env_kwargs())
    if kind == "real":
        return make_real_vector_env(list(tasks or args.tasks or []), num_envs, max_steps=args.agent_max_steps)
    raise ValueError(f"unknown environment kind {kind!r}")


__all__ = ["make_dream_vector_env", "make_real_vector_env", "make_vector_env"]
