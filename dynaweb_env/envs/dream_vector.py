"""DreamWeb-v0, natively vectorized: ``gym.make_vec("DreamWeb-v0", num_envs=8)``.

Running 8 :class:`~dynaweb_env.envs.dream.DreamWebEnv` copies in an ``AsyncVectorEnv`` would make
8 single-prompt model calls per step; this env makes *one* batched world-model call for all live
sub-envs and one batched judge call for all dreams ending on that step, through the same
:class:`~dynaweb_env.envs.dream.DreamDynamics` the single env uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from ..compat.gymnasium import add_vector_info
from ..spaces import web_action_space, web_observation_space
from .dream_episode import DreamEpisode, render_dream
from .dream_setup import RENDER_MODES, DreamSettings, choose_start_state, takes_dream_settings


class DreamWebVectorEnv(VectorEnv):
    """``num_envs`` dreams stepped together with one world-model call and one judge call per step.

    Spaces are exactly what ``AsyncVectorEnv`` gives for the single env: ``observation_space`` is
    ``batch_space(web_observation_space(), num_envs)`` (a ``Dict`` of ``Tuple`` spaces) and an
    observation is a ``dict`` mapping each key to a ``tuple`` of ``num_envs`` strings;
    ``action_space`` is a ``Tuple`` of action strings (any sequence of ``num_envs`` strings is
    accepted). Rewards are ``float64``, terminations and truncations ``bool`` arrays, and ``info``
    uses gymnasium's vector layout (``info[key]`` arrays with ``info["_" + key]`` masks).

    Sub-env ``i`` behaves exactly like ``DreamWebEnv`` (see its docstring for rewards, episode end
    and ``info``). Sub-envs whose action is malformed or ``stop`` are left out of the world-model
    batch; a step with no live request makes no model call at all.

    Args:
        num_envs: Number of sub-envs.
        autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default: a sub-env that ended is reset by the
            next ``step``, whose action for it is ignored) or ``AutoresetMode.DISABLED`` (reset it
            yourself with ``reset(options={"reset_mask": mask, ...})``). Also accepted as the
            strings ``"NextStep"`` / ``"Disabled"``.
        **settings: The keyword arguments of :class:`~dynaweb_env.envs.dream_setup.DreamSettings`, as for
            :class:`~dynaweb_env.envs.dream.DreamWebEnv`.

    Resetting: ``reset(seed=s)`` seeds sub-env ``i``'s start-state sampling with ``s + i`` and the
    model-sampling generator with ``s``. ``reset(options={"reset_mask": mask, "start_state": ...})``
    resets only the masked sub-envs, with the remaining options (``start_state``, or ``task`` /
    ``task_seed`` / ``step_index``) applied to each of them: that is how a group of rollouts is
    given one start state. The observations of the other sub-envs are returned unchanged.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": list(RENDER_MODES), "render_fps": 1}

    @takes_dream_settings
    def __init__(
        self, num_envs: int = 1, *, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, **settings: Any
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        #: The arguments it was made with, checked.
        self.settings = DreamSettings.of(type(self).__name__, settings)
        try:
            autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode must be NextStep or Disabled, got {autoreset_mode!r}") from None
        if autoreset_mode == AutoresetMode.SAME_STEP:
            raise ValueError("DreamWebVectorEnv supports AutoresetMode.NEXT_STEP and DISABLED, not SAME_STEP")

        self.num_envs = num_envs
        self.render_mode = self.settings.render_mode
        self.autoreset_mode = autoreset_mode
        self.metadata = {**self.metadata, "autoreset_mode": autoreset_mode}
        self.single_observation_space = web_observation_space()
        self.single_action_space = web_action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.dream_length = self.settings.dream_length
        #: The world model and judge, loaded on the first step that needs one (``make_vec`` stays cheap).
        self.dynamics, self.start_states = self.settings.build()
        self._episodes: list[DreamEpisode | None] = [None] * num_envs
        self._env_rngs: list[np.random.Generator | None] = [None] * num_envs
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self._observations = create_empty_array(self.single_observation_space, num_envs)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, tuple[str, ...]], dict[str, Any]]:
        seeds = self._per_env_seeds(seed)
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.ones(self.num_envs, dtype=np.bool_)
            if isinstance(seed, int) or self._np_random is None:
                self._np_random, self._np_random_seed = seeding.np_random(seed if isinstance(seed, int) else None)
        else:
            mask = self._check_mask(mask)
        infos: dict[str, Any] = {}
        for index in np.flatnonzero(mask):
            if seeds[index] is not None or self._env_rngs[index] is None:
                self._env_rngs[index], _ = seeding.np_random(seeds[index])
            start = choose_start_state(self.start_states, self._env_rngs[index], options)
            episode = DreamEpisode.begin(start)
            self._episodes[index] = episode
            self._autoreset[index] = False
            infos = add_vector_info(self, infos, episode.start_info(), int(index))
        return self._gather_observations(), infos

    def step(
        self, actions: Sequence[str]
    ) -> tuple[dict[str, tuple[str, ...]], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = list(actions) if not isinstance(actions, str) else [actions]
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        if any(episode is None for episode in self._episodes):
            raise ValueError("call reset() before step()")
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}

        stepping: list[int] = []
        restarts: dict[int, DreamEpisode] = {}  # installed only once the step succeeded, so a raise changes nothing
        for index, episode in enumerate(self._episodes):
            if not episode.done:
                stepping.append(index)
            elif self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset[index]:
                restarts[index] = DreamEpisode.begin(choose_start_state(self.start_states, self._env_rngs[index], None))
                infos = add_vector_info(self, infos, restarts[index].start_info(), index)
            else:
                raise ValueError(
                    f"sub-env {index} has ended; with autoreset_mode=DISABLED reset it with "
                    "reset(options={'reset_mask': mask}) before stepping it again"
                )
        # Drawn on every step so the generator advances the same way whether or not a model is called.
        seed = int(self._np_random.integers(2**31 - 1))
        if stepping:
            results = self.dynamics.step([self._episodes[i] for i in stepping], [actions[i] for i in stepping], seed)
            for index, (_, reward, terminated, truncated, info) in zip(stepping, results, strict=True):
                rewards[index], terminations[index], truncations[index] = reward, terminated, truncated
                infos = add_vector_info(self, infos, info, index)
        for index, restarted in restarts.items():
            self._episodes[index] = restarted
        self._autoreset = terminations | truncations
        return self._gather_observations(), rewards, terminations, truncations, infos

    def judge_groups(
        self, groups: Sequence[Sequence[dict[str, Any]]], seed: int | None = None
    ) -> list[list[tuple[float, dict[str, Any]]]]:
        """Group-relative rewards (``reward_guards.group_judging``) of finished dreams given by their final
        ``info``, grouped by the host (e.g. the G rollouts of one GSPO query): ``(reward, info update)`` per
        dream, with one batched judge call (:meth:`~dynaweb_env.envs.dream.DreamDynamics.judge_groups`)."""
        return self.dynamics.judge_groups(groups, seed)

    def render(self) -> tuple[str, ...] | None:
        if self.render_mode is None:
            return None
        return tuple("" if episode is None else render_dream(episode) for episode in self._episodes)

    def _gather_observations(self) -> dict[str, tuple[str, ...]]:
        observations = [episode.observation() for episode in self._episodes]
        self._observations = concatenate(self.single_observation_space, observations, self._observations)
        return self._observations

    def _per_env_seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            return [int(seed) + index for index in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"a list of seeds must have num_envs={self.num_envs} entries, got {len(seeds)}")
        return seeds

    def _check_mask(self, mask: Any) -> np.ndarray:
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise ValueError(f"options['reset_mask'] must be a numpy bool array of shape ({self.num_envs},)")
        if not mask.any():
            raise ValueError("options['reset_mask'] must select at least one sub-env")
        if any(self._episodes[i] is None for i in np.flatnonzero(~mask)):
            raise ValueError("the first reset() must reset every sub-env (no reset_mask)")
        return mask


__all__ = ["DreamWebVectorEnv"]
