"""TRL's ``rollout_func``: the task queries of a batch become episodes, and episodes become tokens.

:class:`DynaWebRollout` runs each call's groups on the vector envs with
:func:`~dynaweb_trainer.rollout.run_episodes` (one batched policy call per turn, one env step per
turn), after replacing some slots by expert replays (:mod:`~dynaweb_trainer.expert_pool`), and
returns token ids, sampling log-probs and ``env_mask`` (:func:`rollout_output`): one row an episode, or with a
prompt of its own each turn one row a turn (:mod:`~dynaweb_trainer.turn_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dynaweb_env.data.tasks import step_limit
from dynaweb_env.llm.base import GenerationError, SamplingParams

from .config import GSPOConfig
from .encoding import EpisodeEncoder, encode_expert_trajectory
from .env_factory import make_vector_env
from .episode_log import EpisodeLog, episode_log_path
from .expert_pool import ExpertPool, expert_slots
from .metrics import count_env_steps
from .rollout import EpisodeResult, RolloutStats, expert_result, run_episodes
from .task_queries import ENV_KINDS, START_STATE_ID, StartStateIndex, load_start_state_index, parse_task_prompt
from .trainer_policy import trainer_policy
from .turn_rows import turn_rows


class DynaWebRollout:
    """TRL ``rollout_func``: runs the prompts' episodes (or expert replays) and returns their tokens.

    Args:
        args: The run configuration.
        encoder: Episode token encoder of the policy tokenizer.
        experts: Expert pool for interleaving (``None`` or empty disables it).
        vector_envs: ``{"dream": env_or_factory, "real": env_or_factory}``; missing kinds are built
            with :func:`~dynaweb_trainer.env_factory.make_vector_env` on first use.
        real_tasks: Real task ids (used to construct the real env).
        start_states: The dream start states the prompts' ``start_state_id`` options name (default:
            loaded from ``args`` when the first id is met).

    Returned keys besides ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` (lists
    with one entry per prompt, reaching :func:`environment_reward`): ``reward``, ``success``,
    ``source`` (``dream``/``real``/``expert``), ``is_expert``, ``num_steps``,
    ``world_model_errors``, ``judge_error`` (the dream's judge gave no verdict), ``end_reason``, ``task_id``, and
    ``rollout_stats`` (one dict).
    """

    def __init__(
        self,
        args: GSPOConfig,
        encoder: EpisodeEncoder,
        experts: ExpertPool | None = None,
        vector_envs: dict[str, Any] | None = None,
        real_tasks: Sequence[str] = (),
        start_states: StartStateIndex | None = None,
    ):
        self.args, self.encoder, self.experts = args, encoder, experts
        self.start_states = start_states
        self._envs: dict[str, Any] = dict(vector_envs or {})
        self.real_tasks = list(real_tasks)
        self.calls = 0
        self.last_results: list[EpisodeResult] = []
        self.total_stats = RolloutStats()
        self.episode_log: EpisodeLog | None = None
        #: Rows an episode with a prompt each turn (``turn_rows.per_turn_args``), else 0: one row an episode.
        self.turn_slots: int = getattr(args, "turn_slots", 0)

    def env(self, kind: str, batch_size: int) -> Any:
        """The vector env of ``kind`` (built on first use)."""
        env = self._envs.get(kind)
        if env is None or (callable(env) and not hasattr(env, "step")):
            # Default: the whole batch at once for dreams; at most 4 browsers for the real web.
            num_envs = self.args.num_envs or (batch_size if kind == "dream" else min(batch_size, 4))
            env = env() if callable(env) else make_vector_env(kind, self.args, num_envs, self.real_tasks)
            self._envs[kind] = env
        return env

    def close(self) -> None:
        for env in self._envs.values():
            if hasattr(env, "close"):
                env.close()
        self._envs.clear()

    def reset_options(self, query: dict[str, Any]) -> dict[str, Any]:
        """The reset options of a task query, its start-state id resolved."""
        options = query["options"]
        if START_STATE_ID in options and self.start_states is None:
            self.start_states = load_start_state_index(self.args)
        return self.start_states.resolve(options) if self.start_states is not None else options

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.args.max_turn_tokens, temperature=self.args.temperature, top_p=self.args.top_p
        )

    def run(
        self, kind: str, batch_size: int, policy: Any, options: list[dict[str, Any]], seed: int, stats: RolloutStats
    ) -> list[EpisodeResult]:
        """One episode per reset option on the vector env of ``kind``, with the run's sampling and limits."""
        return run_episodes(
            self.env(kind, batch_size),
            policy,
            self.encoder,
            options,
            self.sampling(),
            max_steps=self.args.agent_max_steps,
            max_completion_length=self.args.max_completion_length,
            seed=seed,
            stats=stats,
        )

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        if self.turn_slots:  # TRL repeated each query num_generations x T times: one episode per T rows
            prompts = self.episode_prompts(prompts)
        queries = [parse_task_prompt(prompt) for prompt in prompts]
        process = trainer.accelerator.process_index
        rng = np.random.default_rng([self.args.seed, trainer.state.global_step, self.calls, process])
        self.calls += 1
        results = self.expert_replays(prompts, queries, rng)
        stats = RolloutStats()
        seed = int(rng.integers(2**31 - 1))
        with trainer_policy(trainer) as policy:
            for kind in ENV_KINDS:
                slots = [i for i, query in enumerate(queries) if query["env"] == kind and results[i] is None]
                if not slots:
                    continue
                options = [self.reset_options(queries[i]) for i in slots]
                episodes = self.run(kind, len(prompts), policy, options, seed, stats)
                for slot, episode in zip(slots, episodes, strict=True):
                    episode.task_id = episode.task_id or queries[slot]["task_id"]
                    results[slot] = episode
            self.judge_groups(prompts, results, seed)
            self.resample_flat_dream_groups(prompts, results, policy, rng, stats)
        for key, value in stats.__dict__.items():
            setattr(self.total_stats, key, getattr(self.total_stats, key) + value)
        count_env_steps(trainer, results)
        self.last_results = list(results)
        self.log_episodes(trainer, results)
        return rollout_output(results, stats, self.turn_slots, self.encoder.eos_token_id)

    def episode_prompts(self, prompts: list[str]) -> list[str]:
        """Every ``turn_slots``-th prompt: TRL's rows a turn, back to one per episode (``ValueError`` if TRL's blocks
        are not ``turn_slots`` copies of one query)."""
        slots = self.turn_slots
        blocks = [prompts[start : start + slots] for start in range(0, len(prompts), slots)]
        if any(len(block) != slots or len(set(block)) != 1 for block in blocks):
            raise ValueError(f"TRL's prompts do not come in blocks of {slots} copies of one task query")
        return [block[0] for block in blocks]

    def judge_groups(self, prompts: list[str], results: list[EpisodeResult | None], seed: int) -> None:
        """Group-relative judging (``reward_guards.group_judging``): score the dreams of each group together.

        A group is the slots of one prompt (TRL repeats each task query ``num_generations`` times), so a
        group's dreams share their start state. Dreams the env left ``judge_pending`` get their group score as
        reward, in place; a judge failure leaves them at reward 0 with ``backend_error`` (as a dream's would).
        """
        groups: dict[str, list[int]] = {}
        for slot, result in enumerate(results):
            if result is not None and result.source == "dream" and result.final_info.get("judge_pending"):
                groups.setdefault(prompts[slot], []).append(slot)
        if not groups:
            return
        slots = list(groups.values())
        try:
            scored = self.env("dream", len(prompts)).judge_groups(
                [[results[slot].final_info for slot in group] for group in slots], seed=seed
            )
        except GenerationError as error:
            for slot in (slot for group in slots for slot in group):
                results[slot].final_info.update(judge_pending=False, backend_error=f"group judge: {error}")
            return
        for group, outcomes in zip(slots, scored, strict=True):
            for slot, (reward, update) in zip(group, outcomes, strict=True):
                result = results[slot]
                # The pending dream earned 0 in the env: its reward is the group score alone.
                result.reward, result.success = reward, reward >= 0.5
                result.final_info.update(update)

    def resample_flat_dream_groups(
        self,
        prompts: list[str],
        results: list[EpisodeResult | None],
        policy: Any,
        rng: np.random.Generator,
        stats: RolloutStats,
    ) -> None:
        """Dynamic sampling in imagination (``dream_resamples``): re-dream the groups whose rewards are all equal.

        GSPO's advantages are rewards relative to their group, so a group whose dreams all earned the same reward
        teaches nothing. In the dreams-only runs most groups were such (e.g. 7 of 8 updates of a seed on tasks its
        policy already solved). As in DAPO's dynamic sampling, each flat group of dreams is dreamed again from a
        new start state drawn at random from the run's start states (any task), up to ``dream_resamples`` times,
        and replaced by the first draw whose rewards differ; a group that stays flat keeps its first dreams.
        Dreams cost no real environment step, so this is the model-based counterpart of what real-browser GSPO
        could only buy with more real rollouts. Groups with an expert replay are left as they are.

        Replaced dreams carry ``final_info["resampled"]`` (the attempt, from 1); ``stats.dream_resamples``
        counts the groups dreamed again and ``stats.dream_groups_resampled`` those replaced.
        """
        if self.args.dream_resamples <= 0:
            return
        groups: dict[str, list[int]] = {}
        for slot, prompt in enumerate(prompts):
            groups.setdefault(prompt, []).append(slot)
        flat = [
            group
            for group in groups.values()
            if len(group) > 1
            and all(results[slot] is not None and results[slot].source == "dream" for slot in group)
            and len({results[slot].reward for slot in group}) == 1
        ]
        if flat and self.start_states is None:
            self.start_states = load_start_state_index(self.args)
        keys = list(self.start_states.by_id) if flat else []
        for attempt in range(1, self.args.dream_resamples + 1):
            if not flat:
                return
            picks = [keys[int(rng.integers(len(keys)))] for _ in flat]
            slot_keys = [key for group, key in zip(flat, picks, strict=True) for _ in group]
            seed = int(rng.integers(2**31 - 1))
            options = [self.start_states.resolve({START_STATE_ID: key}) for key in slot_keys]
            episodes = self.run("dream", len(prompts), policy, options, seed, stats)
            for episode, key in zip(episodes, slot_keys, strict=True):
                episode.task_id = episode.task_id or self.start_states.by_id[key].task_id
            # the group of a redraw is its position in `flat`: a start state drawn twice still makes two groups
            group_of = [str(index) for index, group in enumerate(flat) for _ in group]
            self.judge_groups(group_of, episodes, seed)
            stats.dream_resamples += len(flat)
            still_flat, offset = [], 0
            for group in flat:
                drawn = episodes[offset : offset + len(group)]
                offset += len(group)
                if len({episode.reward for episode in drawn}) == 1:
                    still_flat.append(group)
                    continue
                stats.dream_groups_resampled += 1
                for slot, episode in zip(group, drawn, strict=True):
                    episode.final_info["resampled"] = attempt
                    results[slot] = episode
            flat = still_flat

    def expert_replays(
        self, prompts: list[str], queries: list[dict[str, Any]], rng: np.random.Generator
    ) -> list[EpisodeResult | None]:
        """Per slot, an encoded expert trajectory of its task where one replaces the rollout, else ``None``."""
        results: list[EpisodeResult | None] = [None] * len(prompts)
        if self.experts is None or self.args.expert_frac <= 0:
            return results
        budget = self.args.max_completion_length
        for index in expert_slots(prompts, self.args.expert_frac, rng):
            query = queries[index]
            trajectory = self.experts.sample(query["task_id"], query["options"].get("task_seed"), rng)
            if trajectory is None:
                continue
            max_turns = step_limit(trajectory.task_id, self.args.agent_max_steps)
            encoded = encode_expert_trajectory(self.encoder, trajectory, max_turns=max_turns)
            if budget is None or len(encoded.completion_ids) <= budget:
                results[index] = expert_result(encoded, trajectory, self.reset_options(query))
        return results

    def log_episodes(self, trainer: Any, results: Sequence[EpisodeResult]) -> None:
        """Append the call's episodes to ``episodes.jsonl`` (``save_episodes``)."""
        if not (self.args.save_episodes and self.args.output_dir):
            return
        if self.episode_log is None:
            accelerator = trainer.accelerator
            path = episode_log_path(self.args.output_dir, accelerator.process_index, accelerator.num_processes)
            self.episode_log = EpisodeLog(path)
        self.episode_log.append(results, trainer.state.global_step, self.calls - 1)


def rollout_output(
    results: Sequence[EpisodeResult], stats: RolloutStats, turn_slots: int = 0, eos_token_id: int = 0
) -> dict[str, Any]:
    """The ``rollout_func`` dict of a list of episodes (see :class:`DynaWebRollout`): one row an episode, or with
    ``turn_slots`` rows an episode (:func:`~dynaweb_trainer.turn_rows.turn_rows`, ``eos_token_id`` filling empty
    rows), each episode's other fields repeated on its rows."""
    if turn_slots:
        tokens = turn_rows(results, turn_slots, eos_token_id)
        results = [result for result in results for _ in range(turn_slots)]
    else:
        tokens = {
            "prompt_ids": [result.encoded.prompt_ids for result in results],
            "completion_ids": [result.encoded.completion_ids for result in results],
            "logprobs": [result.encoded.logprobs for result in results],
            "env_mask": [result.encoded.env_mask for result in results],
        }
    return {
        **tokens,
        "reward": [float(result.reward) for result in results],
        "success": [bool(result.success) for result in results],
        "source": [result.source for result in results],
        "is_expert": [result.source == "expert" for result in results],
        "num_steps": [result.num_steps for result in results],
        "world_model_errors": [result.world_model_errors for result in results],
        "judge_error": [bool(result.final_info.get("judge_error")) for result in results],
        "end_reason": [result.end_reason for result in results],
        "task_id": [result.task_id for result in results],
        "rollout_stats": stats.to_dict(),
    }


__all__ = ["DynaWebRollout", "rollout_output"]
