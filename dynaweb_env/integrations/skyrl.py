"""SkyRL-gym: DreamWeb-v0 / RealWeb-v0 as a registered ``BaseTextEnv`` (``env_class="dynaweb"``).

Importing this module registers ``"dynaweb"`` with ``skyrl_gym``. SkyRL builds one env per
trajectory with ``skyrl_gym.make("dynaweb", env_config=..., extras=row)``:

- ``env_config`` holds the ``gym.make`` arguments, plus ``env_id`` (default ``"DreamWeb-v0"``).
- ``extras`` is the dataset row: ``max_turns`` (default 10), and the start state to pin as
  ``task`` / ``task_seed`` / ``step_index`` / ``seed``, at its top level or in ``extra_info``.

Each model turn is one action (a whole ``REASON: ... ACTION: ...`` response is fine). When SkyRL's
turn cap (``max_turns``) comes before the dream's own end, the dream is ended and judged on that
turn, so its reward is a verdict. SkyRL runs its envs on a thread pool: their dream steps are
batched together (:mod:`dynaweb_env.llm.batching`).

Example::

    import skyrl_gym
    import dynaweb_env.integrations.skyrl  # noqa: F401  (registers "dynaweb")

    env = skyrl_gym.make("dynaweb", env_config={"world_model": "smollm2-135m-wm"},
                         extras={"max_turns": 5, "task": "miniwob.click-button", "task_seed": 3})
    messages, _ = env.init([])                 # system prompt + first page
    output = env.step("REASON: ...\\nACTION: click [13]")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("dynaweb_env.integrations.skyrl needs SkyRL-gym: pip install 'dynaweb[skyrl]'") from error

from ..agent import initial_conversation, observation_message
from ._common import RESET_OPTION_KEYS, WebEpisode, episode_summary, jsonable_info, render_step

#: The id this module registers with ``skyrl_gym``.
ENV_CLASS = "dynaweb"
DEFAULT_MAX_TURNS = 10


def _plain(config: Any) -> dict[str, Any]:
    """A plain dict of SkyRL's env config (an omegaconf ``DictConfig``, a mapping, or ``None``)."""
    if config is None:
        return {}
    from omegaconf import OmegaConf  # skyrl-gym depends on it

    if OmegaConf.is_config(config):
        config = OmegaConf.to_container(config, resolve=True)
    if not isinstance(config, Mapping):
        raise ValueError(f"env_config must be a mapping of gym.make arguments, got {type(config).__name__}")
    return dict(config)


class DynaWebTextEnv(BaseTextEnv):
    """A DynaWeb episode as a SkyRL text env: chat messages in, one action per model turn.

    Args:
        env_config: ``gym.make`` arguments, plus ``env_id``.
        extras: The dataset row (``max_turns``, reset options; see the module docstring).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        config = _plain(env_config)
        extras = dict(extras or {})
        env_id = config.pop("env_id", "DreamWeb-v0")
        row = {**dict(extras.get("extra_info") or {}), **extras}
        self.max_turns = int(row.get("max_turns", config.pop("max_turns", DEFAULT_MAX_TURNS)))
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        self._reset_values = {key: row[key] for key in (*RESET_OPTION_KEYS, "seed") if row.get(key) is not None}
        self._episode = WebEpisode(env_id, **config)
        self._rewarded = 0.0

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start the episode; the prompt (possibly empty) gets the first page as its user turn."""
        values = dict(self._reset_values)
        observation, info = self._episode.reset(seed=values.pop("seed", None), **values)
        self.turns, self._rewarded = 0, 0.0
        if not prompt:
            return initial_conversation(observation), jsonable_info(info)
        messages = [dict(message) for message in prompt]
        page = observation_message(observation)
        if messages[-1].get("role") == "user":
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{page}"
        else:
            messages.append({"role": "user", "content": page})
        return messages, jsonable_info(info)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Apply one model turn; at ``max_turns`` a running dream is ended and judged."""
        self.turns += 1
        episode = self._episode
        observation, _, _, _, info = episode.step(action)
        if not episode.done and self.turns >= self.max_turns:
            episode.finish()
            info = episode.info
        # Rewards are reported as they come, so a turn-capped dream's verdict lands on its last turn.
        reward, self._rewarded = episode.reward - self._rewarded, episode.reward
        messages = [] if episode.done else [{"role": "user", "content": render_step(observation, info, False, 0.0)}]
        metadata = {**jsonable_info(info), **episode_summary(episode)}
        return BaseTextEnvStepOutput(observations=messages, reward=reward, done=episode.done, metadata=metadata)

    def get_metrics(self) -> dict[str, Any]:
        """``steps``, ``reward``, ``judged`` (1.0: the reward is a dream's verdict) and ``judge_error`` (1.0: the
        dream ended and its judge gave no verdict, so its reward 0 is none)."""
        summary = episode_summary(self._episode)
        judge_error = float(bool(summary["judge_error"]))
        return {"steps": summary["steps"], "reward": summary["reward"], "judged": float(summary["judged"]),
                "judge_error": judge_error}  # fmt: skip

    def close(self) -> None:
        self._episode.close()


if ENV_CLASS not in skyrl_gym.registry:
    skyrl_gym.register(id=ENV_CLASS, entry_point="dynaweb_env.integrations.skyrl:DynaWebTextEnv")

__all__ = ["DEFAULT_MAX_TURNS", "ENV_CLASS", "DynaWebTextEnv"]
