"""Multi-turn, vectorized policy rollouts over any Gymnasium vector env of the DynaWeb suite.

:func:`run_episodes` is the one policy-environment loop, used by training (through
:class:`~dynaweb_trainer.rollout_func.DynaWebRollout`, TRL's ``rollout_func``), by evaluation
(``dynaweb-eval``), by data collection (``dynaweb-collect``), by ``dynaweb-dream`` and by the
throughput benchmark. It reads like CleanRL's loop; each turn it

1. **generates** the next response of *every* live episode in one batched call to the
   :class:`~dynaweb_trainer.policy.Policy` (an LLM reads the episode's token ids, a scripted policy
   its observation; see :mod:`dynaweb_trainer.encoding` for the tokens),
2. **steps** the vector env once with all responses,
3. **records** each new observation as an env-masked observation turn, or **finishes** the episode,
4. **refills** the freed sub-envs with queued episodes.

Episodes are queued, so a call may run more episodes than the vector env has sub-envs. Starts that
share reset options (a GRPO group of G rollouts of one task) are reset together with one
``reset(options={..., "reset_mask": mask})`` call. The vector env must use
``autoreset_mode=DISABLED``: a finished sub-env with nothing left to run is *parked* (reset and fed
:data:`PARK_ACTION`, a malformed action that costs no model call) until the batch ends. As in
CleanRL, a call starts with one reset of every sub-env, so no state is kept between calls.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dynaweb_env.actions import extract_action, extract_reasoning
from dynaweb_env.agent import format_policy_response
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.data.tasks import step_limit
from dynaweb_env.envs import END_REASONS
from dynaweb_env.llm.base import Generation, GenerationBackend, SamplingParams

from .encoding import EncodedEpisode, EpisodeEncoder, trajectory_observations
from .policy import Policy, PolicyTurn, as_policy

#: Action fed to parked slots (finished sub-envs that must still be stepped with the others): an
#: empty action is malformed, so it costs a step but no world-model or browser call.
PARK_ACTION = ""


@dataclass
class EpisodeResult:
    """One finished episode: its token encoding, what happened, and its reward.

    Attributes:
        options: The reset options that started it.
        encoded: The episode's tokens (:class:`~dynaweb_trainer.encoding.EncodedEpisode`).
        reward: Sum of the env's rewards (the terminal reward in both DynaWeb envs).
        success: ``info["success"]`` at the end when the env reports it, else ``reward >= 1``.
        num_steps: Policy turns taken.
        source: ``info["source"]`` (``"dream"`` / ``"real"``), or ``"expert"`` for a demonstration.
        task_id: ``info["task_id"]`` (or the ``task`` reset option).
        end_reason: One of :data:`END_REASONS` (``"expert"`` for demonstrations).
        world_model_errors: Steps whose ``info["world_model_error"]`` was non-empty (dreams).
        responses: The policy's decoded response of each turn.
        actions: The action extracted from each response.
        observations: The observation before each turn, plus the final one.
        infos: The env's ``info`` after each step (the world model's predicted changes, errors, ...).
        final_info: The env's ``info`` after the last step.
    """

    options: dict[str, Any]
    encoded: EncodedEpisode
    reward: float = 0.0
    success: bool = False
    num_steps: int = 0
    source: str = ""
    task_id: str = ""
    end_reason: str = ""
    world_model_errors: int = 0
    responses: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    observations: list[dict[str, str]] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    final_info: dict[str, Any] = field(default_factory=dict)

    def to_trajectory(self, trajectory_id: str, metadata: dict[str, Any] | None = None) -> Trajectory:
        """The episode as a trajectory record (source ``real``/``dream``/``expert``)."""
        steps = []
        for index, observation in enumerate(self.observations):
            acted = index < len(self.actions)
            steps.append(
                Step(
                    url=observation["url"],
                    axtree=observation["axtree"],
                    action=self.actions[index] if acted else "",
                    reasoning=extract_reasoning(self.responses[index]) if acted else "",
                    last_action_error=observation.get("last_action_error", ""),
                )
            )
        source = self.source if self.source in ("real", "expert", "dream") else "real"
        goal = self.observations[0]["goal"] if self.observations else ""
        meta = {"end_reason": self.end_reason, "options": _jsonable(self.options), **(metadata or {})}
        return Trajectory(
            trajectory_id, self.task_id, goal, source, steps, bool(self.success), float(self.reward), meta
        )


@dataclass
class RolloutStats:
    """Counters of one or more :func:`run_episodes` calls (for throughput metrics)."""

    episodes: int = 0
    policy_tokens: int = 0
    generate_calls: int = 0
    generate_seconds: float = 0.0
    env_steps: int = 0
    step_calls: int = 0
    step_seconds: float = 0.0
    reset_calls: int = 0
    reset_seconds: float = 0.0
    wall_seconds: float = 0.0
    dream_resamples: int = 0
    dream_groups_resampled: int = 0

    @property
    def policy_tokens_per_second(self) -> float:
        """Generated policy tokens per second of generation time."""
        return self.policy_tokens / self.generate_seconds if self.generate_seconds > 0 else 0.0

    @property
    def env_steps_per_second(self) -> float:
        """Episode steps (live slots only) per second of wall time."""
        return self.env_steps / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, float]:
        values = dict(self.__dict__)
        values.update(
            policy_tokens_per_second=self.policy_tokens_per_second, env_steps_per_second=self.env_steps_per_second
        )
        return values


@dataclass
class _LiveEpisode:
    """An episode running on one sub-env: its result so far, and what the policy sees next."""

    index: int
    result: EpisodeResult
    observation: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def policy_turn(self) -> PolicyTurn:
        return PolicyTurn(self.observation, self.info, self.result.encoded, self.result.options)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda obj: obj.to_dict() if hasattr(obj, "to_dict") else str(obj)))


def _options_key(options: dict[str, Any]) -> str:
    return json.dumps(_jsonable(options), sort_keys=True)


def _slot_observation(observations: Any, slot: int) -> dict[str, str]:
    return {key: str(values[slot]) for key, values in observations.items()}


def _slot_info(infos: dict[str, Any], slot: int) -> dict[str, Any]:
    info = {}
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        present = infos.get(f"_{key}")
        if present is not None and not present[slot]:
            continue
        value = values[slot] if isinstance(values, (np.ndarray, list, tuple)) else values
        if isinstance(value, dict):
            value = _slot_info(value, slot) if any(k.startswith("_") for k in value) else value
        info[key] = value.item() if isinstance(value, np.generic) else value
    return info


def _autoreset_mode(vector_env: Any) -> str:
    mode = getattr(vector_env, "autoreset_mode", None) or vector_env.metadata.get("autoreset_mode")
    return str(getattr(mode, "value", mode)).lower()


class _SubEnvs:
    """The sub-envs of one :func:`run_episodes` call: which episode runs where, the queue, and resets.

    Args:
        vector_env: The vector env (autoreset disabled).
        encoder: Starts each episode's tokens from its first observation.
        start_options: Reset options of every episode, in queue order.
        seed: Base of the reset seeds (``seed + episode index``; idle sub-envs ``seed + #episodes + slot``).
        stats: Counts reset calls and seconds.
    """

    def __init__(
        self,
        vector_env: Any,
        encoder: EpisodeEncoder,
        start_options: Sequence[dict[str, Any]],
        seed: int | None,
        stats: RolloutStats,
    ):
        self.vector_env, self.encoder, self.seed, self.stats = vector_env, encoder, seed, stats
        self.num_envs = int(vector_env.num_envs)
        self.num_episodes = len(start_options)
        self.queue = deque(enumerate(start_options))
        self.live: list[_LiveEpisode | None] = [None] * self.num_envs
        self.ended = [True] * self.num_envs  # a sub-env that must be reset before it may be stepped
        self.last_options: dict[str, Any] = dict(start_options[0]) if start_options else {}
        self.reset_once = False

    def live_slots(self) -> list[int]:
        return [slot for slot, episode in enumerate(self.live) if episode is not None]

    def _idle_seed(self, slot: int) -> int | None:
        return None if self.seed is None else self.seed + self.num_episodes + slot

    def _reset(self, options: dict[str, Any], seeds: dict[int, int | None]) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs in ``seeds`` with ``options``; the first reset of a call resets them all."""
        whole = not self.reset_once
        if whole:  # a masked reset batches the other sub-envs' last observations, which may not exist yet
            seeds = {slot: seeds.get(slot, self._idle_seed(slot)) for slot in range(self.num_envs)}
        mask = np.array([slot in seeds for slot in range(self.num_envs)], dtype=np.bool_)
        seed_list = [seeds.get(slot) for slot in range(self.num_envs)] if self.seed is not None else None
        tick = time.perf_counter()
        reset_options = dict(options) if whole else {**options, "reset_mask": mask}
        observations, infos = self.vector_env.reset(seed=seed_list, options=reset_options)
        self.stats.reset_calls += 1
        self.stats.reset_seconds += time.perf_counter() - tick
        self.reset_once = True
        for slot in seeds:
            self.ended[slot] = False
        self.last_options = dict(options)
        return observations, infos

    def refill(self) -> None:
        """Start queued episodes on free sub-envs (one reset per distinct options), then park idle ended ones."""
        groups: dict[str, list[int]] = {}
        for slot in range(self.num_envs):
            if self.live[slot] is None and self.queue:
                index, options = self.queue.popleft()
                self.live[slot] = _LiveEpisode(index, EpisodeResult(options=dict(options), encoded=EncodedEpisode([])))
                groups.setdefault(_options_key(options), []).append(slot)
        for slots in groups.values():
            options = self.live[slots[0]].result.options
            seeds = {slot: None if self.seed is None else self.seed + self.live[slot].index for slot in slots}
            observations, infos = self._reset(options, seeds)
            for slot in slots:
                self._start(slot, _slot_observation(observations, slot), _slot_info(infos, slot))
        parked = [slot for slot in range(self.num_envs) if self.ended[slot] and self.live[slot] is None]
        if parked and self.live_slots():
            self._reset(self.last_options, {slot: self._idle_seed(slot) for slot in parked})

    def _start(self, slot: int, observation: dict[str, str], info: dict[str, Any]) -> None:
        episode = self.live[slot]
        episode.observation, episode.info = observation, info
        result = episode.result
        result.encoded = self.encoder.start(observation, info.get("start_history", ()))
        result.observations.append(observation)
        result.task_id = str(info.get("task_id", result.options.get("task", "")))
        result.source = str(info.get("source", ""))

    def release(self, slot: int, reason: str) -> _LiveEpisode:
        """End the episode of ``slot``; the sub-env is free for the next one."""
        episode = self.live[slot]
        episode.result.end_reason = reason
        self.live[slot] = None
        return episode


def _record_response(
    result: EpisodeResult, generation: Generation, encoder: EpisodeEncoder, send_response: bool
) -> str:
    """Append a policy turn to the episode; returns what the env is stepped with."""
    logprobs = generation.logprobs if len(generation.logprobs) == len(generation.completion_ids) else None
    result.encoded.add_policy_turn(generation.completion_ids, logprobs)
    text = generation.text if generation.text else encoder.decode_turn(generation.completion_ids)
    result.responses.append(text)
    result.actions.append(extract_action(text))
    return text if send_response else result.actions[-1]


def _record_step(episode: _LiveEpisode, observation: dict[str, str], reward: float, info: dict[str, Any]) -> None:
    result = episode.result
    episode.observation, episode.info = observation, info
    result.num_steps += 1
    result.reward += reward
    result.final_info = info
    result.infos.append(info)
    result.world_model_errors += bool(info.get("world_model_error"))
    result.success = bool(info["success"]) if "success" in info else result.reward >= 1.0
    result.observations.append(observation)


def run_episodes(
    vector_env: Any,
    policy: Policy | GenerationBackend,
    encoder: EpisodeEncoder,
    start_options: Sequence[dict[str, Any]],
    sampling: SamplingParams,
    max_steps: int = 10,
    max_completion_length: int | None = None,
    seed: int | None = None,
    send_response: bool = True,
    stats: RolloutStats | None = None,
    progress: Any = None,
    on_episode: Callable[[int, EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Run one episode per start option with a policy on a vector env; return them in input order.

    Args:
        vector_env: A ``gymnasium.vector.VectorEnv`` with the DynaWeb observation/action contract
            (DreamWeb-v0, RealWeb-v0, or any env following it) and ``autoreset_mode=DISABLED``.
        policy: A :class:`~dynaweb_trainer.policy.Policy`, or a batched
            :class:`~dynaweb_env.llm.base.GenerationBackend` whose ``generate_from_ids`` returns
            completion ids and log-probabilities (``TransformersBackend`` around the policy being
            trained, or the trainer's vLLM); a backend is wrapped in :class:`~dynaweb_trainer.policy.GenerationPolicy`.
        encoder: Builds the episode tokens (:class:`~dynaweb_trainer.encoding.EpisodeEncoder`).
        start_options: Reset options of each episode, e.g. ``{"start_state": {...}}`` (dreams) or
            ``{"task": "miniwob.click-button", "task_seed": 3}`` (real). Equal options share reset calls.
        sampling: Sampling of every policy turn (``max_new_tokens`` is the per-turn budget; its
            ``seed`` is ignored, turn seeds are drawn from ``seed``).
        max_steps: Most policy turns per episode (the agent's step limit), raised for a long task to its
            own limit (:func:`~dynaweb_env.data.tasks.step_limit`).
        max_completion_length: End an episode before a turn that might not fit in this many
            completion tokens (observation turns included); ``None`` for no limit.
        seed: Seeds the sub-env resets (``seed + episode index``) and the sampling of every turn;
            ``None`` leaves both to their generators.
        send_response: Step the env with the whole response (the envs extract the action and the
            dream judge also reads the reasoning); ``False`` sends only the extracted action.
        stats: Accumulates counters (tokens, steps, seconds) when given.
        progress: A ``tqdm``-like bar; ``update(1)`` is called per finished episode.
        on_episode: Called with ``(index in start_options, result)`` as each episode finishes (to save
            results as they come).

    Returns:
        One :class:`EpisodeResult` per start option, in input order.

    Raises:
        ValueError: If ``max_steps < 1`` or the vector env resets sub-envs by itself.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    if _autoreset_mode(vector_env) != "disabled":
        raise ValueError(
            f"run_episodes needs a vector env with autoreset_mode=AutoresetMode.DISABLED (it resets sub-envs "
            f"itself, grouping equal starts), got {_autoreset_mode(vector_env)!r}"
        )
    policy = as_policy(policy)
    stats = stats if stats is not None else RolloutStats()
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    results: list[EpisodeResult | None] = [None] * len(start_options)
    envs = _SubEnvs(vector_env, encoder, start_options, seed, stats)

    def finish(slot: int, reason: str) -> None:
        episode = envs.release(slot, reason)
        results[episode.index] = episode.result
        stats.episodes += 1
        if on_episode is not None:
            on_episode(episode.index, episode.result)
        if progress is not None:
            progress.update(1)

    envs.refill()
    while live := envs.live_slots():
        # 1. generate: one batched policy call answers every live episode.
        params = replace(sampling, seed=None if seed is None else int(rng.integers(2**31 - 1)))
        tick = time.perf_counter()
        generations = policy.act([envs.live[slot].policy_turn() for slot in live], params)
        stats.generate_seconds += time.perf_counter() - tick
        stats.generate_calls += 1
        # 2. step: every sub-env at once; parked ones get PARK_ACTION.
        actions = [PARK_ACTION] * envs.num_envs
        for slot, generation in zip(live, generations, strict=True):
            actions[slot] = _record_response(envs.live[slot].result, generation, encoder, send_response)
            stats.policy_tokens += len(generation.completion_ids)
        tick = time.perf_counter()
        observations, rewards, terminations, truncations, infos = vector_env.step(tuple(actions))
        stats.step_seconds += time.perf_counter() - tick
        stats.step_calls += 1
        stats.env_steps += len(live)
        envs.ended = [bool(done) for done in np.logical_or(terminations, truncations)]
        # 3. record the new observation, or finish the episode.
        for slot in live:
            episode = envs.live[slot]
            _record_step(episode, _slot_observation(observations, slot), float(rewards[slot]), _slot_info(infos, slot))
            if terminations[slot] or truncations[slot]:
                finish(slot, "terminated" if terminations[slot] else "truncated")
            elif episode.result.num_steps >= step_limit(episode.result.task_id, max_steps):
                finish(slot, "max_steps")
            else:
                encoded = episode.result.encoded
                turn = encoder.observation_tokens(encoded, episode.observation)
                # One growing conversation holds every turn; a prompt of its own each turn, only itself.
                needed = (0 if encoded.per_turn else len(encoded.completion_ids)) + len(turn) + sampling.max_new_tokens
                if max_completion_length is not None and needed > max_completion_length:
                    finish(slot, "max_tokens")
                else:
                    encoder.add_observation(encoded, episode.observation, turn)
        # 4. refill: queued episodes take the freed sub-envs.
        envs.refill()
    stats.wall_seconds += time.perf_counter() - started
    return results  # type: ignore[return-value]


def summarize_episodes(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Success rate, mean reward, mean steps and world-model error rate of a list of episodes."""
    if not results:
        return {"episodes": 0}
    steps = sum(result.num_steps for result in results)
    return {
        "episodes": len(results),
        "success_rate": sum(result.success for result in results) / len(results),
        "mean_reward": sum(result.reward for result in results) / len(results),
        "mean_steps": steps / len(results),
        "world_model_error_rate": sum(result.world_model_errors for result in results) / steps if steps else 0.0,
    }


def expert_result(encoded: EncodedEpisode, trajectory: Trajectory, options: dict[str, Any]) -> EpisodeResult:
    """An :class:`EpisodeResult` for an encoded expert demonstration (rewarded with its real reward)."""
    actions = [step.action for step in trajectory.steps[: encoded.num_turns]]
    # The pages exactly as encoded (with their last_action and its error), so the log matches the tokens.
    observations = trajectory_observations(trajectory)[: encoded.num_turns]
    return EpisodeResult(
        options=dict(options),
        encoded=encoded,
        reward=float(trajectory.reward),
        success=bool(trajectory.success),
        num_steps=encoded.num_turns,
        source="expert",
        task_id=trajectory.task_id,
        end_reason="expert",
        responses=[
            format_policy_response(step.reasoning, step.action) for step in trajectory.steps[: encoded.num_turns]
        ],
        actions=actions,
        observations=observations,
        final_info={"trajectory_id": trajectory.id},
    )


__all__ = [
    "PARK_ACTION",
    "END_REASONS",
    "EpisodeResult",
    "RolloutStats",
    "run_episodes",
    "summarize_episodes",
    "expert_result",
]
