"""DynaWeb environments: web tasks as Gymnasium environments, dreamed or real.

Importing this package registers:

- ``DreamWeb-v0``: transitions predicted by an LLM web world model, rewards from an LLM judge,
  start states sampled from real trajectories (:class:`~dynaweb_env.envs.dream.DreamWebEnv`,
  natively vectorized by :class:`~dynaweb_env.envs.dream_vector.DreamWebVectorEnv`).
- ``RealWeb-v0``: the same observation and action format on a real Chromium browser through
  BrowserGym (:class:`~dynaweb_env.envs.real.RealWebEnv`).

Example:
    >>> import gymnasium as gym
    >>> import dynaweb_env  # noqa: F401  (registers the envs)
    >>> env = gym.make("DreamWeb-v0")
    >>> observation, info = env.reset(seed=0)
"""

from gymnasium.envs.registration import register, registry

from .actions import Action, ActionParseError, extract_action, format_action, parse_action, read_action
from .spaces import OBSERVATION_KEYS, WebText, web_action_space, web_observation_space

__version__ = "0.1.0"

if "DreamWeb-v0" not in registry:
    register(
        id="DreamWeb-v0",
        entry_point="dynaweb_env.envs.dream:DreamWebEnv",
        vector_entry_point="dynaweb_env.envs.dream_vector:DreamWebVectorEnv",
        disable_env_checker=False,
    )
if "RealWeb-v0" not in registry:
    # RealWebEnv, inside a LookaheadGuard when made with lookahead_guard=... (dynaweb_env.envs.lookahead_guard).
    register(id="RealWeb-v0", entry_point="dynaweb_env.envs.lookahead_guard:make_real_web")

__all__ = [
    "Action",
    "ActionParseError",
    "OBSERVATION_KEYS",
    "WebText",
    "extract_action",
    "format_action",
    "parse_action",
    "read_action",
    "web_action_space",
    "web_observation_space",
]
