"""What every adapter needs: one web episode driven by a host library, and its text for a model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from ..agent import observation_message

#: ``reset`` option keys both envs understand (see ``DreamWebEnv`` / ``RealWebEnv``); host libraries
#: pass them as dataset columns or keyword arguments.
RESET_OPTION_KEYS = ("task", "task_seed", "step_index", "start_state")


def library_import_error(module: str, library: str, package: str, extra: str, error: ImportError) -> ImportError:
    """The error an adapter raises when its host library fails to import, naming the real cause.

    A library that is absent and one that is installed but breaks on import (a dependency another
    package moved, e.g. verifiers 0.4 pinning ``mcp==2.0.0`` under OpenEnv's ``fastmcp``) need
    different fixes, so the message tells them apart and quotes the original error; raise it
    ``from error`` so the original traceback is chained.

    Args:
        module: The adapter module, e.g. ``"dynaweb_env.integrations.openenv"``.
        library: The library's name for people, e.g. ``"OpenEnv"``.
        package: Its top-level import name, e.g. ``"openenv"``.
        extra: The extra of this package that installs it, e.g. ``"openenv"``.
        error: The ``ImportError`` the library's import raised.

    Returns:
        An ``ImportError`` whose message says which of the two happened and quotes ``error``.
    """
    install = f"pip install 'dynaweb[{extra}]'"
    missing = getattr(error, "name", None)
    if isinstance(error, ModuleNotFoundError) and missing in (package, None):
        return ImportError(f"{module} needs {library}, which is not installed: {install}")
    return ImportError(
        f"{module} needs {library}: it is installed but importing it failed with "
        f"{type(error).__name__}: {error}. A dependency of {library} is probably missing or at a version it "
        f"cannot use (`pip check` lists conflicts); reinstalling with {install} restores the versions it needs"
    )


def reset_options(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The reset options among ``values`` (unset ones left out); ``None`` if there are none."""
    options = {key: values[key] for key in RESET_OPTION_KEYS if values.get(key) is not None}
    return options or None


def jsonable_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` without the values JSON cannot carry (numpy scalars become Python numbers)."""
    kept: dict[str, Any] = {}
    for key, value in info.items():
        value = value.item() if hasattr(value, "item") and callable(value.item) else value
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        kept[str(key)] = value
    return kept


class WebEpisode:
    """One DynaWeb env as a host library drives it: reset, step, and end on the host's say-so.

    Args:
        env_id: ``"DreamWeb-v0"`` or ``"RealWeb-v0"``.
        **env_kwargs: Passed to ``gym.make``.

    Attributes:
        observation: The latest observation (a dict of strings).
        info: The latest ``info``.
        reward: The episode's return so far (the verdict once a dream has ended).
        done: Whether the episode has ended.
        judged: Whether ``reward`` is a dream's verdict (``False`` while it runs, for a real episode, and for a
            dream whose judge gave no verdict: then ``info["judge_error"]`` says why).
    """

    def __init__(self, env_id: str = "DreamWeb-v0", **env_kwargs: Any):
        import dynaweb_env  # noqa: F401  (registers the envs)

        if env_id not in ("DreamWeb-v0", "RealWeb-v0"):
            raise ValueError(f"env_id must be 'DreamWeb-v0' or 'RealWeb-v0', got {env_id!r}")
        self.env_id = env_id
        self.env = gym.make(env_id, **env_kwargs)
        self.observation: dict[str, str] = {}
        self.info: dict[str, Any] = {}
        self.reward = 0.0
        self.done = False
        self.judged = False
        self.num_steps = 0

    def reset(self, seed: int | None = None, **options: Any) -> tuple[dict[str, str], dict[str, Any]]:
        """Start an episode; ``options`` holds :data:`RESET_OPTION_KEYS` values (others are ignored)."""
        self.observation, self.info = self.env.reset(seed=seed, options=reset_options(options))
        self.reward, self.done, self.judged, self.num_steps = 0.0, False, False, 0
        return self.observation, self.info

    def step(self, action: str) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        """One env step; raises ``gym.error.ResetNeeded`` on an episode that has ended."""
        if self.done:
            raise gym.error.ResetNeeded("the episode has ended; reset it first")
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.observation, self.info = observation, info
        self.reward += float(reward)
        self.num_steps += 1
        self.done = bool(terminated or truncated)
        self.judged = bool(info.get("judged", False))
        return observation, float(reward), bool(terminated), bool(truncated), info

    def finish(self) -> float:
        """End the episode now and return its return: a dream is judged (once); a real episode keeps its rewards."""
        finish = getattr(self.env.unwrapped, "finish", None)
        if finish is not None and not self.judged and self.observation:
            reward, info = finish()
            self.reward, self.info, self.judged = float(reward), info, bool(info.get("judged", True))
        self.done = True
        return self.reward

    def close(self) -> None:
        self.env.close()


def render_step(observation: Mapping[str, str], info: Mapping[str, Any], done: bool, reward: float) -> str:
    """The text a model reads after a step: the page, and how the episode ended if it did."""
    text = observation_message(dict(observation))
    if done:
        reason = info.get("end_reason") or ("truncated" if info.get("TimeLimit.truncated") else "ended")
        text += f"\n\nThe episode has ended ({reason}). Reward: {reward:g}"
    return text


def episode_summary(episode: WebEpisode) -> dict[str, Any]:
    """JSON-ready facts about an episode, for a host library's metadata or metrics."""
    return {
        "env_id": episode.env_id,
        "task_id": episode.info.get("task_id", ""),
        "steps": episode.num_steps,
        "reward": episode.reward,
        "done": episode.done,
        "judged": episode.judged,
        "judge_error": str(episode.info.get("judge_error", "")),
        "end_reason": episode.info.get("end_reason", ""),
    }
