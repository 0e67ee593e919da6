"""GEM: DreamWeb-v0 / RealWeb-v0 as registered GEM envs (``"dynaweb:DreamWeb-v0"``, ``"dynaweb:RealWeb-v0"``).

Importing this module registers both ids with ``gem``. Observations are strings: the first one is
the agent's instructions (:data:`~dynaweb_env.agent.POLICY_SYSTEM_PROMPT`) and the first page, the
next ones the page after each action; an action is one model response (``REASON: ... ACTION:
click [13]`` or a bare ``click [13]``).

Example::

    import gem
    import dynaweb_env.integrations.gem  # noqa: F401  (registers the ids)

    env = gem.make("dynaweb:DreamWeb-v0", max_turns=5, task="miniwob.click-button")
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("click [13]")

    envs = gem.make_vec(["dynaweb:DreamWeb-v0"] * 4, async_mode=True)   # 4 threads, batched dreams

``max_turns`` (optional) caps the model turns: a dream still running then is ended and judged, so
its reward is a verdict. ``reset(seed)`` seeds this env only (GEM's own envs seed the process-wide
generators; DynaWeb's draw from their own). A vector env passes each env its ``seed``; it is used on
the first reset that names none.
"""

from __future__ import annotations

from typing import Any

try:
    import gem
    from gem.core import Env
    from gem.envs.registration import ENV_REGISTRY
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("dynaweb_env.integrations.gem needs GEM: pip install 'dynaweb[gem]'") from error

from ..agent import POLICY_SYSTEM_PROMPT
from ..observation import axtree_element_ids
from ._common import RESET_OPTION_KEYS, WebEpisode, episode_summary, jsonable_info, render_step

#: The ids this module registers with ``gem``.
GEM_ENV_IDS = {"dynaweb:DreamWeb-v0": "DreamWeb-v0", "dynaweb:RealWeb-v0": "RealWeb-v0"}


class DynaWebGemEnv(Env):
    """A DynaWeb episode as a GEM text env.

    Args:
        gym_id: ``"DreamWeb-v0"`` or ``"RealWeb-v0"`` (``gem.make`` sets ``env_id`` to the GEM id).
        max_turns: Most model turns per episode (``None``: the env's own limit only).
        seed: Seed of the first reset that names none (GEM's ``make_vec`` passes one per env).
        task, task_seed, step_index: Reset options pinning the start state (see the gym envs).
        **env_kwargs: Passed to ``gym.make``.
    """

    def __init__(
        self,
        gym_id: str = "DreamWeb-v0",
        max_turns: int | None = None,
        seed: int | None = None,
        **env_kwargs: Any,
    ):
        super().__init__()
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"max_turns must be a positive integer or None, got {max_turns!r}")
        self._options = {key: env_kwargs.pop(key) for key in RESET_OPTION_KEYS if key in env_kwargs}
        self._episode = WebEpisode(gym_id, **env_kwargs)
        self._first_seed = seed
        self.max_turns = max_turns
        self.turns = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed, self._first_seed = self._first_seed, None
        else:
            self._first_seed = None
        observation, info = self._episode.reset(seed=seed, **self._options)
        self.turns = 0
        return f"{POLICY_SYSTEM_PROMPT}\n\n{render_step(observation, info, False, 0.0)}", jsonable_info(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        episode = self._episode
        before = episode.reward
        observation, _, terminated, truncated, info = episode.step(action)
        self.turns += 1
        if not episode.done and self.max_turns is not None and self.turns >= self.max_turns:
            episode.finish()
            info, truncated = episode.info, True
        text = render_step(observation, info, episode.done, episode.reward)
        reward = episode.reward - before
        return text, reward, terminated, truncated, {**jsonable_info(info), **episode_summary(episode)}

    def sample_random_action(self) -> str:
        """A click on a random element of the current page (``stop [N/A]`` on a page without one)."""
        ids = axtree_element_ids(self._episode.observation.get("axtree", ""))
        if not ids:
            return "stop [N/A]"
        return f"click [{ids[int(self._episode.env.unwrapped.np_random.integers(len(ids)))]}]"

    def close(self) -> None:
        self._episode.close()


for _gem_id, _gym_id in GEM_ENV_IDS.items():
    if _gem_id not in ENV_REGISTRY:
        gem.register(_gem_id, entry_point="dynaweb_env.integrations.gem:DynaWebGemEnv", gym_id=_gym_id)

__all__ = ["GEM_ENV_IDS", "DynaWebGemEnv"]
