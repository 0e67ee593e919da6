"""Multi-turn, vectorized policy rollouts over any Gymnasium vector env of the DynaWeb suite.

:func:`run_episodes` is the one policy-environment loop, used by training (through
:class:`~dynaweb_trainer.trainer.DynaWebRollout`, TRL's ``rollout_func``), by evaluation
(``dynaweb-eval``) and by the throughput benchmark. Each turn it

1. generates the next response of *every* live episode in one batched call (token-in, token-out:
   the prompt of an episode is its whole encoded history, see :mod:`dynaweb_trainer.encoding`),
2. steps the vector env once with all responses,
3. appends each new observation as an env-masked observation turn.

Episodes are queued: a slot whose episode ends takes the next queued start, so a call may run more
episodes than the vector env has sub-envs. Starts that share reset options (a GRPO group of G
rollouts of one task) are reset together with one ``reset(options={..., "reset_mask": mask})``
call. The vector env should use ``autoreset_mode=DISABLED`` (then a finished slot with nothing
left to run is *parked*: reset and fed :data:`PARK_ACTION`, a malformed action that costs no model
call, until the batch ends); ``NEXT_STEP`` and ``SAME_STEP`` also work, their automatic resets
being ignored.
"""

from __future__ import annotations

import json
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dynaweb_env.actions import extract_action, extract_reasoning
from dynaweb_env.agent import format_policy_response
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.envs import END_REASONS
from dynaweb_env.llm.base import GenerationBackend, SamplingParams
from dynaweb_env.observation import make_observation

from .encoding import EncodedEpisode, EpisodeEncoder

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
class _Live:
    index: int
    result: EpisodeResult
    observation: dict[str, str]


#: Vector envs this module has reset at least once (weakly held).
_RESET_ENVS: weakref.WeakSet = weakref.WeakSet()


def _was_reset(vector_env: Any) -> bool:
    try:
        return vector_env in _RESET_ENVS
    except TypeError:  # not weak-referenceable: always reset everything first
        return False


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


def run_episodes(
    vector_env: Any,
    policy: GenerationBackend,
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
            (DreamWeb-v0, RealWeb-v0, or any env following it).
        policy: Batched generator; :meth:`~dynaweb_env.llm.base.GenerationBackend.generate_from_ids`
            must return prompt ids, completion ids and log-probabilities (``TransformersBackend``
            around the policy being trained, or the trainer's vLLM).
        encoder: Builds the episode tokens (:class:`~dynaweb_trainer.encoding.EpisodeEncoder`).
        start_options: Reset options of each episode, e.g. ``{"start_state": {...}}`` (dreams) or
            ``{"task": "miniwob.click-button", "task_seed": 3}`` (real). Equal options share reset calls.
        sampling: Sampling of every policy turn (``max_new_tokens`` is the per-turn budget; its
            ``seed`` is ignored, turn seeds are drawn from ``seed``).
        max_steps: Most policy turns per episode (the agent's step limit).
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
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    stats = stats if stats is not None else RolloutStats()
    started = time.perf_counter()
    num_envs = int(vector_env.num_envs)
    rng = np.random.default_rng(seed)
    queue = deque(enumerate(start_options))
    results: list[EpisodeResult | None] = [None] * len(start_options)
    live: list[_Live | None] = [None] * num_envs
    env_done = [True] * num_envs  # a sub-env that must be reset before it may be stepped
    last_options: list[dict[str, Any] | None] = [None] * num_envs
    mode = getattr(vector_env, "autoreset_mode", None) or vector_env.metadata.get("autoreset_mode")
    must_park = str(getattr(mode, "value", mode)).lower() not in ("nextstep", "next_step", "samestep", "same_step")

    def reset(assignments: list[tuple[int, dict[str, Any], int | None]]) -> dict[int, tuple[dict, dict]]:
        """Reset slots, one call per distinct options; returns ``{slot: (observation, info)}``."""
        groups: dict[str, list[tuple[int, dict[str, Any], int | None]]] = {}
        for assignment in assignments:
            groups.setdefault(_options_key(assignment[1]), []).append(assignment)
        out = {}
        for group in groups.values():
            if not _was_reset(vector_env):
                # A vector env's first reset must cover every sub-env (masked resets batch the
                # others' last observations, which do not exist yet): start them all on this group.
                group = group + [
                    (slot, group[0][1], None if seed is None else seed + len(start_options) + slot)
                    for slot in range(num_envs)
                    if all(slot != g[0] for g in group)
                ]
            mask = np.zeros(num_envs, dtype=np.bool_)
            seeds: list[int | None] = [None] * num_envs
            for slot, _, episode_seed in group:
                mask[slot] = True
                seeds[slot] = episode_seed
            tick = time.perf_counter()
            options = {**group[0][1], "reset_mask": mask} if _was_reset(vector_env) else dict(group[0][1])
            observations, infos = vector_env.reset(seed=seeds if seed is not None else None, options=options)
            _RESET_ENVS.add(vector_env)
            stats.reset_calls += 1
            stats.reset_seconds += time.perf_counter() - tick
            for slot, options, _ in group:
                out[slot] = (_slot_observation(observations, slot), _slot_info(infos, slot))
                env_done[slot] = False
                last_options[slot] = options
        return out

    def launch(free_slots: list[int]) -> None:
        assignments = []
        for slot in free_slots:
            if not queue:
                break
            index, options = queue.popleft()
            assignments.append((slot, options, None if seed is None else seed + index))
            live[slot] = _Live(index, EpisodeResult(options=dict(options), encoded=EncodedEpisode([])), {})
        for slot, (observation, info) in reset(assignments).items():
            entry = live[slot]
            if entry is None:  # an idle sub-env reset along with the first group
                continue
            entry.observation = observation
            entry.result.encoded = encoder.start(observation)
            entry.result.observations.append(observation)
            entry.result.task_id = str(info.get("task_id", entry.result.options.get("task", "")))
            entry.result.source = str(info.get("source", ""))

    def park() -> None:
        # With autoreset DISABLED a finished sub-env may not be stepped: while other episodes still
        # run, reset idle ones (one call) and feed them PARK_ACTION. Other modes reset by themselves.
        if not must_park:
            return
        waiting = [slot for slot in range(num_envs) if env_done[slot] and live[slot] is None]
        if waiting and any(entry is not None for entry in live):
            options = next((o for o in last_options if o is not None), start_options[0] if start_options else {})
            reset([(slot, options, None if seed is None else seed + len(start_options) + slot) for slot in waiting])

    def finish(slot: int, reason: str) -> None:
        entry = live[slot]
        entry.result.end_reason = reason
        results[entry.index] = entry.result
        live[slot] = None
        stats.episodes += 1
        if on_episode is not None:
            on_episode(entry.index, entry.result)
        if progress is not None:
            progress.update(1)

    launch(list(range(num_envs)))
    park()
    while any(entry is not None for entry in live):
        slots = [slot for slot, entry in enumerate(live) if entry is not None]
        params = replace(sampling, seed=None if seed is None else int(rng.integers(2**31 - 1)))
        tick = time.perf_counter()
        generations = policy.generate_from_ids([live[slot].result.encoded.input_ids for slot in slots], params)
        stats.generate_seconds += time.perf_counter() - tick
        stats.generate_calls += 1
        actions = [PARK_ACTION] * num_envs
        for slot, generation in zip(slots, generations, strict=True):
            result = live[slot].result
            logprobs = generation.logprobs if len(generation.logprobs) == len(generation.completion_ids) else None
            result.encoded.add_policy_turn(generation.completion_ids, logprobs)
            text = generation.text if generation.text else encoder.decode_turn(generation.completion_ids)
            result.responses.append(text)
            result.actions.append(extract_action(text))
            actions[slot] = text if send_response else result.actions[-1]
            stats.policy_tokens += len(generation.completion_ids)
        tick = time.perf_counter()
        observations, rewards, terminations, truncations, infos = vector_env.step(tuple(actions))
        stats.step_seconds += time.perf_counter() - tick
        stats.step_calls += 1
        stats.env_steps += len(slots)
        freed = []
        for slot in range(num_envs):
            env_done[slot] = bool(terminations[slot] or truncations[slot])
            entry = live[slot]
            if entry is None:
                continue
            result = entry.result
            info = _slot_info(infos, slot)
            # SAME_STEP autoreset returns the next episode's first observation; the last one is in info.
            observation = info.pop("final_obs", None) or _slot_observation(observations, slot)
            info = info.pop("final_info", None) or info
            result.num_steps += 1
            result.reward += float(rewards[slot])
            result.final_info = info
            result.world_model_errors += bool(info.get("world_model_error"))
            result.success = bool(info["success"]) if "success" in info else result.reward >= 1.0
            result.observations.append(observation)
            if env_done[slot]:
                finish(slot, "terminated" if terminations[slot] else "truncated")
            elif result.num_steps >= max_steps:
                finish(slot, "max_steps")
            else:
                turn = encoder.observation_turn_ids(observation)
                closing = 0 if result.encoded.completion_ids[-1] == encoder.eos_token_id else 1
                needed = len(result.encoded.completion_ids) + closing + len(turn) + sampling.max_new_tokens
                if max_completion_length is not None and needed > max_completion_length:
                    finish(slot, "max_tokens")
                else:
                    if closing:
                        result.encoded.add_env_tokens([encoder.eos_token_id])
                    result.encoded.add_env_tokens(turn)
                    continue
            freed.append(slot)
        launch(freed)
        park()
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
    observations = [
        make_observation(trajectory.goal, step.url, step.axtree) for step in trajectory.steps[: encoded.num_turns]
    ]
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
