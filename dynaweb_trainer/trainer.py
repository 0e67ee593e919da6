"""`DynaWebTrainer`: TRL's GRPOTrainer running GSPO on dreamed, real and expert web episodes.

The trainer adds no loss of its own: TRL 1.16 with ``importance_sampling_level="sequence"`` and
``loss_type="grpo"`` already computes the paper's eq. 8-10, and it applies the ``env_mask`` our
rollouts return so the sequence ratio runs over the policy's own tokens only
(``tests/test_gspo_loss.py`` checks this against a hand computation). What it adds is the data
flow around the loss:

- **Task queries.** Each dataset row is one JSON prompt naming an environment and reset options
  (:func:`make_task_prompt`): a dream start state (initial or intermediate page of a recorded
  trajectory) or a real task and seed. TRL repeats each prompt ``num_generations`` times, so a group
  of G rollouts shares one start.
- **Rollouts.** :class:`DynaWebRollout` is TRL's ``rollout_func``: it runs the groups on the vector
  envs with :func:`~dynaweb_trainer.rollout.run_episodes` (one batched policy call per turn, one env
  step per turn), and returns token ids, sampling log-probs and ``env_mask``.
- **Expert interleaving.** Each slot is replaced with probability ``expert_frac`` (stratified
  within each group, see :func:`expert_slots`) by a real expert trajectory of the same task,
  encoded exactly as a rollout (:mod:`~dynaweb_trainer.encoding`) and rewarded with its real
  reward. Its sampling log-probs are NaN: the policy did not sample those tokens. TRL uses
  sampling log-probs only to correct vLLM/trainer mismatch (and in the optional off-policy mask)
  and treats NaN as "no correction" there; GSPO's own ratio s_i compares the current policy with
  π_old recomputed by the trainer, so expert slots enter eq. 8 like any other group member.
- **Reward and metrics.** :func:`environment_reward` returns the env's reward and logs success
  rate, expert share, episode lengths, world-model format errors and rollout throughput.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import ProgressCallback, TrainerCallback
from transformers.trainer_callback import ExportableState
from trl import GRPOTrainer

from dynaweb_env.agent import policy_system_prompt
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.llm.base import Generation, SamplingParams

from .config import GSPOConfig
from .encoding import EpisodeEncoder, encode_expert_trajectory
from .episode_log import EpisodeLog, episode_log_path
from .rollout import EpisodeResult, RolloutStats, expert_result, run_episodes

ENV_KINDS = ("dream", "real")


# -- task queries ------------------------------------------------------------------------------
def make_task_prompt(env: str, task_id: str, options: dict[str, Any]) -> str:
    """The dataset prompt of one task query: ``{"env", "task_id", "options"}`` as JSON."""
    if env not in ENV_KINDS:
        raise ValueError(f"env must be one of {ENV_KINDS}, got {env!r}")
    return json.dumps({"env": env, "task_id": task_id, "options": options}, sort_keys=True, ensure_ascii=False)


def parse_task_prompt(prompt: str) -> dict[str, Any]:
    """Inverse of :func:`make_task_prompt` (``ValueError`` for anything else)."""
    try:
        query = json.loads(prompt)
    except (TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"a DynaWeb task prompt must be JSON from make_task_prompt, got {prompt!r:.80}") from error
    if not isinstance(query, dict) or query.get("env") not in ENV_KINDS or not isinstance(query.get("options"), dict):
        raise ValueError(f"malformed DynaWeb task prompt: {prompt!r:.80}")
    return query


def build_task_prompts(args: GSPOConfig, start_states: Sequence[Any] = (), real_tasks: Sequence[str] = ()) -> list[str]:
    """The task-query prompts of a run.

    ``dream``: one per start state. ``real``: one per (task, seed) with seeds
    ``0 .. real_task_seeds - 1``. ``mix``: ``max(#dream + #real, 64)`` prompts drawn (seeded with
    ``args.seed``) so that a fraction ``real_frac`` of them is real.
    """
    dream = [make_task_prompt("dream", state.task_id, {"start_state": state.to_dict()}) for state in start_states]
    real = [
        make_task_prompt("real", task, {"task": task, "task_seed": seed})
        for task in real_tasks
        for seed in range(args.real_task_seeds)
    ]
    if args.environment == "dream":
        prompts = dream
    elif args.environment == "real":
        prompts = real
    else:
        if not dream or not real:
            raise ValueError("--env mix needs both dream start states and real tasks")
        rng = np.random.default_rng(args.seed)
        total = max(len(dream) + len(real), 64)
        num_real = int(round(args.real_frac * total))
        prompts = [real[i] for i in rng.integers(len(real), size=num_real)]
        prompts += [dream[i] for i in rng.integers(len(dream), size=total - num_real)]
    if not prompts:
        raise ValueError(f"no task queries for --env {args.environment}: check --tasks and the start states")
    return prompts


# -- expert trajectories -------------------------------------------------------------------------
class ExpertPool:
    """Successful expert trajectories by task (and task seed) for expert interleaving.

    Args:
        trajectories: Demonstrations; only successful ones (``success`` or ``reward > 0``) with at
            least one action and at most ``max_turns`` actions are kept.
        max_turns: The agent's step limit.
    """

    def __init__(self, trajectories: Sequence[Trajectory], max_turns: int):
        self.by_task: dict[str, list[Trajectory]] = defaultdict(list)
        self.by_seed: dict[tuple[str, Any], list[Trajectory]] = defaultdict(list)
        for trajectory in trajectories:
            if not (trajectory.success or trajectory.reward > 0) or not 1 <= len(trajectory.actions) <= max_turns:
                continue
            self.by_task[trajectory.task_id].append(trajectory)
            self.by_seed[(trajectory.task_id, trajectory.metadata.get("seed"))].append(trajectory)

    def __len__(self) -> int:
        return sum(len(items) for items in self.by_task.values())

    def sample(self, task_id: str, task_seed: Any, rng: np.random.Generator) -> Trajectory | None:
        """An expert trajectory of the task, of the same seed when one exists; ``None`` if none."""
        candidates = self.by_seed.get((task_id, task_seed)) or self.by_task.get(task_id)
        return candidates[int(rng.integers(len(candidates)))] if candidates else None


# -- policy generation inside the trainer -------------------------------------------------------
class VLLMPolicy:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over the trainer's vLLM engine (``use_vllm``).

    Sampling temperature and top-p are the trainer's (``GSPOConfig.temperature`` / ``top_p``); the
    per-turn token budget is set for each call.
    """

    def __init__(self, trainer: GRPOTrainer):
        self.trainer = trainer
        self.model_name = "vllm:" + str(trainer.args.policy)

    def generate(self, conversations, params):  # pragma: no cover - needs a GPU with vLLM
        encoder = self.trainer.rollout_func.encoder
        ids = [encoder._template_ids(conversation, add_generation_prompt=True) for conversation in conversations]
        return self.generate_from_ids(ids, params)

    def generate_from_ids(self, prompt_ids, params: SamplingParams) -> list[Generation]:  # pragma: no cover
        generation = self.trainer.vllm_generation
        saved = generation.max_completion_length
        generation.max_completion_length = params.max_new_tokens
        try:
            _, completion_ids, logprobs, _ = generation.generate(
                prompts=list(prompt_ids), images=None, num_generations=1
            )
        finally:
            generation.max_completion_length = saved
        tokenizer = self.trainer.processing_class
        eos = set(self.trainer.eos_token_ids)
        return [
            Generation(
                text=tokenizer.decode(ids, skip_special_tokens=True),
                prompt_ids=list(prompt),
                completion_ids=list(ids),
                logprobs=[float("nan") if lp[0] is None else lp[0] for lp in token_logprobs],
                finish_reason="stop" if ids and ids[-1] in eos else "length",
            )
            for prompt, ids, token_logprobs in zip(prompt_ids, completion_ids, logprobs, strict=True)
        ]


@contextlib.contextmanager
def trainer_policy(trainer: GRPOTrainer, max_batch_size: int = 64) -> Iterator[Any]:
    """The policy being trained as a generation backend: vLLM when ``use_vllm``, else transformers.

    The transformers path unwraps the model the way TRL does for its own generation (DeepSpeed
    ZeRO-3 parameters gathered, gradient checkpointing off) and wraps it, LoRA adapter included, in
    :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`.
    """
    if trainer.use_vllm:
        yield VLLMPolicy(trainer)
        return
    from trl.models.utils import unwrap_model_for_generation

    from dynaweb_env.llm.transformers_backend import TransformersBackend

    summon = getattr(getattr(trainer, "_dist", None), "summon_full_params", None)
    with contextlib.ExitStack() as stack:
        model = stack.enter_context(
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            )
        )
        stack.enter_context(torch.no_grad())
        if summon is not None:
            stack.enter_context(summon(trainer.model_wrapped, recurse=False))
        yield TransformersBackend(model, tokenizer=trainer.processing_class, max_batch_size=max_batch_size)


# -- environments ---------------------------------------------------------------------------------
def make_vector_env(kind: str, args: GSPOConfig, num_envs: int, tasks: Sequence[str] | None = None) -> Any:
    """Build the vector env of one kind from the config (autoreset disabled, see rollout.py)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import dynaweb_env  # noqa: F401  (registers the envs)

    if kind == "dream":
        return gym.make_vec(
            "DreamWeb-v0",
            num_envs=num_envs,
            world_model=args.world_model,
            judge=args.judge,
            start_states=args.start_states,
            tasks=list(args.tasks) if args.tasks else None,
            dream_length=args.dream_length,
            include_intermediate=args.include_intermediate,
            world_model_temperature=args.world_model_temperature,
            max_new_tokens=args.world_model_max_new_tokens,
            judge_max_new_tokens=args.judge_max_new_tokens,
            output_mode=args.world_model_output_mode,
            autoreset_mode=AutoresetMode.DISABLED,
        )
    if kind == "real":
        # One browser per sub-env (~640 MB each): async so that resets and clicks overlap; text
        # observations need shared_memory=False (DESIGN.md).
        task_list = list(tasks or args.tasks or [])
        vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.DISABLED}
        if num_envs > 1:
            vector_kwargs["shared_memory"] = False
        return gym.make_vec(
            "RealWeb-v0",
            num_envs=num_envs,
            vectorization_mode="async" if num_envs > 1 else "sync",
            vector_kwargs=vector_kwargs,
            max_steps=args.agent_max_steps,
            **({"task": task_list[0], "tasks": task_list} if task_list else {}),
        )
    raise ValueError(f"unknown environment kind {kind!r}")


# -- rollout_func -------------------------------------------------------------------------------
class DynaWebRollout:
    """TRL ``rollout_func``: runs the prompts' episodes (or expert replays) and returns their tokens.

    Args:
        args: The run configuration.
        encoder: Episode token encoder of the policy tokenizer.
        experts: Expert pool for interleaving (``None`` or empty disables it).
        vector_envs: ``{"dream": env_or_factory, "real": env_or_factory}``; missing kinds are built
            with :func:`make_vector_env` on first use.
        real_tasks: Real task ids (used to construct the real env).

    Returned keys besides ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` (lists
    with one entry per prompt, reaching :func:`environment_reward`): ``reward``, ``success``,
    ``source`` (``dream``/``real``/``expert``), ``is_expert``, ``num_steps``,
    ``world_model_errors``, ``end_reason``, ``task_id``, and ``rollout_stats`` (one dict).
    """

    def __init__(
        self,
        args: GSPOConfig,
        encoder: EpisodeEncoder,
        experts: ExpertPool | None = None,
        vector_envs: dict[str, Any] | None = None,
        real_tasks: Sequence[str] = (),
    ):
        self.args, self.encoder, self.experts = args, encoder, experts
        self._envs: dict[str, Any] = dict(vector_envs or {})
        self.real_tasks = list(real_tasks)
        self.calls = 0
        self.last_results: list[EpisodeResult] = []
        self.total_stats = RolloutStats()
        self.episode_log: EpisodeLog | None = None

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

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.args.max_turn_tokens, temperature=self.args.temperature, top_p=self.args.top_p
        )

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, Any]:
        args = self.args
        queries = [parse_task_prompt(prompt) for prompt in prompts]
        process = trainer.accelerator.process_index
        rng = np.random.default_rng([args.seed, trainer.state.global_step, self.calls, process])
        self.calls += 1
        results: list[EpisodeResult | None] = [None] * len(prompts)
        if self.experts is not None and args.expert_frac > 0:
            for index in expert_slots(prompts, args.expert_frac, rng):
                query = queries[index]
                trajectory = self.experts.sample(query["task_id"], query["options"].get("task_seed"), rng)
                if trajectory is None:
                    continue
                encoded = encode_expert_trajectory(self.encoder, trajectory, max_turns=args.agent_max_steps)
                if args.max_completion_length is None or len(encoded.completion_ids) <= args.max_completion_length:
                    results[index] = expert_result(encoded, trajectory, query["options"])
        stats = RolloutStats()
        seed = int(rng.integers(2**31 - 1))
        with trainer_policy(trainer) as policy:
            for kind in ENV_KINDS:
                slots = [i for i, query in enumerate(queries) if query["env"] == kind and results[i] is None]
                if not slots:
                    continue
                episodes = run_episodes(
                    self.env(kind, len(prompts)),
                    policy,
                    self.encoder,
                    [queries[i]["options"] for i in slots],
                    self.sampling(),
                    max_steps=args.agent_max_steps,
                    max_completion_length=args.max_completion_length,
                    seed=seed,
                    stats=stats,
                )
                for slot, episode in zip(slots, episodes, strict=True):
                    if not episode.task_id:
                        episode.task_id = queries[slot]["task_id"]
                    results[slot] = episode
        for key, value in stats.__dict__.items():
            setattr(self.total_stats, key, getattr(self.total_stats, key) + value)
        count_env_steps(trainer, results)
        self.last_results = list(results)
        if args.save_episodes and args.output_dir:
            if self.episode_log is None:
                path = episode_log_path(args.output_dir, process, trainer.accelerator.num_processes)
                self.episode_log = EpisodeLog(path)
            self.episode_log.append(results, trainer.state.global_step, self.calls - 1)
        return rollout_output(results, stats)


def expert_slots(prompts: Sequence[str], expert_frac: float, rng: np.random.Generator) -> list[int]:
    """Which slots an expert trajectory replaces: each with marginal probability ``expert_frac``.

    The draw is stratified by group (a run of identical prompts): a group of G gets
    ``floor(expert_frac * G)`` experts, plus one with probability equal to the fractional part, at
    random positions. Independent per-slot draws have the same marginals but often give a group no
    expert or only experts, which leaves it without the contrast GSPO's group advantage needs.
    """
    slots: list[int] = []
    start = 0
    while start < len(prompts):
        end = start
        while end < len(prompts) and prompts[end] == prompts[start]:
            end += 1
        expected = expert_frac * (end - start)
        count = int(expected) + int(rng.random() < expected - int(expected))
        slots.extend(sorted(start + int(i) for i in rng.choice(end - start, size=count, replace=False)))
        start = end
    return slots


def rollout_output(results: Sequence[EpisodeResult], stats: RolloutStats) -> dict[str, Any]:
    """The ``rollout_func`` dict of a list of episodes (see :class:`DynaWebRollout`)."""
    return {
        "prompt_ids": [result.encoded.prompt_ids for result in results],
        "completion_ids": [result.encoded.completion_ids for result in results],
        "logprobs": [result.encoded.logprobs for result in results],
        "env_mask": [result.encoded.env_mask for result in results],
        "reward": [float(result.reward) for result in results],
        "success": [bool(result.success) for result in results],
        "source": [result.source for result in results],
        "is_expert": [result.source == "expert" for result in results],
        "num_steps": [result.num_steps for result in results],
        "world_model_errors": [result.world_model_errors for result in results],
        "end_reason": [result.end_reason for result in results],
        "task_id": [result.task_id for result in results],
        "rollout_stats": stats.to_dict(),
    }


# -- reward -------------------------------------------------------------------------------------
def environment_reward(
    prompts: list[str],
    completions: list[Any],
    reward: list[float],
    success: list[bool] | None = None,
    source: list[str] | None = None,
    num_steps: list[int] | None = None,
    world_model_errors: list[int] | None = None,
    rollout_stats: list[dict[str, float]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """Reward = the environment's terminal reward (judge verdict in dreams, task reward for real and
    expert episodes). Also logs, through TRL's ``log_metric``:

    ``env/success_rate`` (all slots), ``env/policy_success_rate`` (rollouts only),
    ``env/expert_share``, ``env/dream_steps`` and ``env/real_steps`` (mean policy turns),
    ``env/wm_format_error_rate`` (malformed world-model outputs per dream step),
    ``rollout/policy_tokens_per_s``, ``rollout/env_steps_per_s`` and ``rollout/seconds``.
    """
    if log_metric is not None:
        count = len(reward)
        success = success or [value >= 1.0 for value in reward]
        source = source or [""] * count
        num_steps = num_steps or [0] * count
        world_model_errors = world_model_errors or [0] * count
        policy = [i for i in range(count) if source[i] != "expert"]
        log_metric("env/success_rate", sum(map(bool, success)) / count)
        log_metric("env/expert_share", 1 - len(policy) / count)
        if policy:
            log_metric("env/policy_success_rate", sum(bool(success[i]) for i in policy) / len(policy))
        for kind in ENV_KINDS:
            slots = [i for i in range(count) if source[i] == kind]
            if slots:
                log_metric(f"env/{kind}_steps", sum(num_steps[i] for i in slots) / len(slots))
        dream_steps = sum(num_steps[i] for i in range(count) if source[i] == "dream")
        if dream_steps:
            errors = sum(world_model_errors[i] for i in range(count) if source[i] == "dream")
            log_metric("env/wm_format_error_rate", errors / dream_steps)
        if rollout_stats:
            stats = rollout_stats[0]
            if stats.get("generate_seconds"):
                log_metric("rollout/policy_tokens_per_s", stats["policy_tokens_per_second"])
            if stats.get("wall_seconds"):
                log_metric("rollout/env_steps_per_s", stats["env_steps_per_second"])
                log_metric("rollout/seconds", stats["wall_seconds"])
    return [float(value) for value in reward]


# -- progress ------------------------------------------------------------------------------------
_PROGRESS_KEYS = (
    ("reward", "reward"),
    ("env/success_rate", "success"),
    ("env/expert_share", "expert"),
    ("env/dream_steps", "dream_len"),
    ("env/wm_format_error_rate", "wm_err"),
    ("rollout/policy_tokens_per_s", "tok/s"),
    ("loss", "loss"),
)


class DynaWebProgressCallback(ProgressCallback):
    """TRL's progress bar, with one compact line per log instead of the full metrics dict."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        for key, label in _PROGRESS_KEYS:
            if isinstance(logs.get(key), (int, float)):
                parts.append(f"{label} {logs[key]:.3g}")
        if len(parts) > 1:
            self.training_bar.write(" | ".join(parts))


class SaveAtEndCallback(TrainerCallback):
    """Save a checkpoint at the last step too, not only every ``save_steps``."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps and args.save_strategy != "no":
            control.should_save = True
        return control


class _RunClock(TrainerCallback):
    """Records wall time of the run for the summary."""

    def __init__(self):
        self.started = time.perf_counter()
        self.seconds = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = time.perf_counter() - self.started


class EnvStepCounter(TrainerCallback, ExportableState):
    """Real-environment steps a run consumed, for comparing the data cost of methods.

    ``real_env_steps`` counts the policy's steps in the real browser (``--env real`` / ``mix``);
    ``expert_env_steps`` the steps of the expert trajectories interleaved into batches (replays of
    recorded demonstrations, so not new browser interactions). Totals over all processes. The counts
    are saved in each checkpoint's ``trainer_state.json`` and restored on resume, so they describe the
    rollouts behind the final model: rollouts of an interrupted run after its last checkpoint are
    redone and counted once.
    """

    def __init__(self, real_env_steps: int = 0, expert_env_steps: int = 0):
        self.real_env_steps = real_env_steps
        self.expert_env_steps = expert_env_steps

    def state(self) -> dict:
        counts = {"real_env_steps": self.real_env_steps, "expert_env_steps": self.expert_env_steps}
        return {"args": {}, "attributes": counts}

    def on_train_begin(self, args, state, control, **kwargs):
        # transformers restores callback states only with `restore_callback_states_from_checkpoint`;
        # the counts must survive every resume, so restore them from the loaded state here.
        saved = state.stateful_callbacks.get(type(self).__name__)
        if isinstance(saved, dict):
            for name, value in saved.get("attributes", {}).items():
                setattr(self, name, int(value))
        # A checkpoint written before this counter existed has no entry, which saving would trip on.
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())


def count_env_steps(trainer: Any, results: Sequence[EpisodeResult]) -> None:
    """Add the real and expert steps of one rollout batch to the trainer's :class:`EnvStepCounter`."""
    handler = getattr(trainer, "callback_handler", None)
    counter = next((cb for cb in getattr(handler, "callbacks", ()) if isinstance(cb, EnvStepCounter)), None)
    if counter is None:
        return
    counts = [sum(r.num_steps for r in results if r.source == source) for source in ("real", "expert")]
    accelerator = trainer.accelerator
    if accelerator.num_processes > 1:
        # Every process runs its share of the rollouts in lockstep: sum so each holds the run's total.
        counts = accelerator.reduce(torch.tensor(counts, device=accelerator.device), reduction="sum").tolist()
    counter.real_env_steps += int(counts[0])
    counter.expert_env_steps += int(counts[1])


# -- the trainer --------------------------------------------------------------------------------
class DynaWebTrainer(GRPOTrainer):
    """GSPO on DynaWeb environments with expert interleaving (see the module docstring).

    Args:
        args: The run configuration (:class:`~dynaweb_trainer.config.GSPOConfig`).
        model: A loaded causal LM (optionally already peft-wrapped); default: ``args.policy``.
        processing_class: Its tokenizer; default: loaded with the model.
        train_dataset: A dataset with a ``prompt`` column of :func:`make_task_prompt` strings;
            default: built from the start states / tasks with :func:`build_task_prompts`.
        vector_envs: ``{"dream": ..., "real": ...}`` vector envs (or zero-argument factories) to use
            instead of building DreamWeb-v0 / RealWeb-v0 from the config.
        expert_trajectories: Demonstrations for interleaving; default: ``args.expert_trajectories``
            (or the shipped file) when ``expert_frac > 0``.
        callbacks: Extra trainer callbacks.

    Example:
        >>> args = GSPOConfig(output_dir="outputs/demo", policy="tiny-random", max_steps=2)
        >>> trainer = DynaWebTrainer(args)
        >>> trainer.train()
    """

    def __init__(
        self,
        args: GSPOConfig,
        model: Any = None,
        processing_class: Any = None,
        train_dataset: Any = None,
        vector_envs: dict[str, Any] | None = None,
        expert_trajectories: Sequence[Trajectory] | None = None,
        callbacks: list[TrainerCallback] | None = None,
    ):
        if not isinstance(args, GSPOConfig):
            raise TypeError(f"args must be a GSPOConfig, got {type(args).__name__}")
        if model is None or isinstance(model, (str, Path)):
            model, processing_class = load_policy(model or args.policy, processing_class)
        if processing_class is None:
            raise ValueError("pass the tokenizer as processing_class together with a loaded model")
        real_tasks: list[str] = []
        if train_dataset is None:
            train_dataset, real_tasks = build_train_dataset(args)
        else:
            real_tasks = sorted(
                {
                    parse_task_prompt(p)["task_id"]
                    for p in train_dataset["prompt"]
                    if parse_task_prompt(p)["env"] == "real"
                }
            )
        if expert_trajectories is None and args.expert_frac > 0:
            expert_trajectories = load_expert_trajectories(args.expert_trajectories)
        experts = ExpertPool(expert_trajectories or [], args.agent_max_steps)
        system_prompt = args.system_prompt or policy_system_prompt(args.response_style)
        encoder = EpisodeEncoder(processing_class, system_prompt, args.max_axtree_chars)
        rollout = DynaWebRollout(args, encoder, experts, vector_envs, real_tasks)
        self.clock = _RunClock()
        super().__init__(
            model=model,
            reward_funcs=[environment_reward],
            args=args,
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=[self.clock, EnvStepCounter(), *(callbacks or [])],
            peft_config=lora_config(args) if args.use_lora and not _is_peft(model) else None,
            rollout_func=rollout,
        )
        if not args.disable_tqdm:
            self.remove_callback(ProgressCallback)
            self.add_callback(DynaWebProgressCallback)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """Log-probs (and entropies) of the completion tokens, computing the LM head on those positions only.

        TRL 1.16's fused LM head scores *every* position, prompt included, when Triton is unavailable
        (CPU): with multi-turn web prompts of ~1k tokens and turns of ~50, that is >90% wasted head
        compute and memory. On CPU this override runs the backbone once and the head (softmax over
        the vocabulary at ``self.temperature``) on the completion positions only, in
        checkpointed chunks. Anywhere else (GPU, multimodal, MoE aux loss, soft-capped or scaled
        logits) TRL's own implementation runs. ``tests/test_gspo_loss.py`` checks both agree.
        """
        causal_lm = self.accelerator.unwrap_model(model)
        causal_lm = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
        config = causal_lm.config.get_text_config()
        if (
            input_ids.device.type != "cpu"
            or compute_aux_loss
            or any(value is not None for value in multimodal.values())
            or getattr(config, "final_logit_softcapping", None)
            or getattr(config, "logit_scale", None)
            or getattr(causal_lm, "base_model", causal_lm) is causal_lm
        ):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal,
            )  # fmt: skip
        with self.accelerator.autocast():
            return completion_logps_and_entropies(
                causal_lm, input_ids, attention_mask, logits_to_keep, self.temperature, batch_size, compute_entropy
            )

    def summary(self) -> dict[str, Any]:
        """What the run did: steps, time, success and expert share (first vs last log), checkpoint."""
        history = [entry for entry in self.state.log_history if "env/success_rate" in entry]

        def mean(key: str, entries: list[dict]) -> float | None:
            values = [entry[key] for entry in entries if key in entry]
            return sum(values) / len(values) if values else None

        head, tail = history[: max(1, len(history) // 4)], history[-max(1, len(history) // 4) :]
        counter = next(cb for cb in self.callback_handler.callbacks if isinstance(cb, EnvStepCounter))
        return {
            "global_step": self.state.global_step,
            "max_steps": self.state.max_steps,
            "train_seconds": self.clock.seconds,
            "environment": self.args.environment,
            "policy": self.args.policy,
            "success_rate_first": mean("env/success_rate", head),
            "success_rate_last": mean("env/success_rate", tail),
            "policy_success_rate_last": mean("env/policy_success_rate", tail),
            "expert_share": mean("env/expert_share", history),
            "dream_steps": mean("env/dream_steps", history),
            "wm_format_error_rate": mean("env/wm_format_error_rate", history),
            "policy_tokens_per_s": mean("rollout/policy_tokens_per_s", history),
            "episodes": self.rollout_func.total_stats.episodes,
            "real_env_steps": counter.real_env_steps,
            "expert_env_steps": counter.expert_env_steps,
            "last_checkpoint": last_checkpoint(self.args.output_dir),
        }


def completion_logps_and_entropies(
    causal_lm: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float,
    batch_size: int | None = None,
    compute_entropy: bool = False,
    chunk_tokens: int = 128,
) -> tuple[torch.Tensor, torch.Tensor | None, None]:
    """``log softmax(head(h) / T)`` at the last ``logits_to_keep`` tokens (0 where ``attention_mask`` is 0).

    The backbone (``causal_lm.base_model``) runs over the whole sequence; the LM head only over the
    completion positions, ``chunk_tokens`` positions at a time under activation checkpointing, so
    the ``(batch, tokens, vocab)`` logits never exist at once.
    """
    backbone, head = causal_lm.base_model, causal_lm.get_output_embeddings()

    def score(hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logps = torch.log_softmax(head(hidden).float() / temperature, dim=-1)
        entropy = -(logps.exp() * logps).sum(-1) if compute_entropy else logps.new_zeros(targets.shape)
        return logps.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy

    batch_size = batch_size or input_ids.size(0)
    all_logps, all_entropies = [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        hidden = hidden[:, -logits_to_keep - 1 : -1]
        targets = ids[:, -logits_to_keep:]
        pieces = []
        for offset in range(0, logits_to_keep, chunk_tokens):
            window = slice(offset, offset + chunk_tokens)
            if torch.is_grad_enabled():
                pieces.append(
                    torch.utils.checkpoint.checkpoint(score, hidden[:, window], targets[:, window], use_reentrant=False)
                )
            else:
                pieces.append(score(hidden[:, window], targets[:, window]))
        keep = mask[:, -logits_to_keep:].to(torch.float32)
        all_logps.append(torch.cat([piece[0] for piece in pieces], dim=1) * keep)
        all_entropies.append(torch.cat([piece[1] for piece in pieces], dim=1) * keep)
    entropies = torch.cat(all_entropies) if compute_entropy else None
    return torch.cat(all_logps), entropies, None


def load_policy(name_or_path: str | Path, tokenizer: Any = None) -> tuple[Any, Any]:
    """Load the policy model and tokenizer from an embedded name, a local path or a hub id.

    A LoRA adapter directory (e.g. a ``dynaweb-sft`` output) loads on its base model
    (``base_model_name_or_path``, an embedded name or a local directory) with the adapter trainable,
    so RL continues the SFT start's own adapter and saves an adapter loadable on that base.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dynaweb_env.models import adapter_base, resolve_model

    path = resolve_model(str(name_or_path))
    dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    base = adapter_base(path) if isinstance(path, Path) else None
    if base is None:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return model, tokenizer or AutoTokenizer.from_pretrained(path)
    from peft import PeftModel

    # transformers would look the base up on the hub by name; embedded names resolve locally.
    base_path = resolve_model(base)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype), str(path), is_trainable=True
    )
    has_tokenizer = (path / "tokenizer_config.json").is_file()
    return model, tokenizer or AutoTokenizer.from_pretrained(path if has_tokenizer else base_path)


def lora_config(args: GSPOConfig) -> Any:
    """The peft ``LoraConfig`` of a run."""
    from peft import LoraConfig

    targets = args.lora_target_modules
    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules="all-linear" if targets == ["all-linear"] else list(targets),
        task_type="CAUSAL_LM",
    )


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def load_expert_trajectories(path: str | None) -> list[Trajectory]:
    """Expert demonstrations from ``path`` (JSONL file or directory) or the shipped MiniWoB++ file."""
    from dynaweb_env.data.start_states import builtin_start_states_path

    source = Path(path) if path else builtin_start_states_path()
    return [trajectory for trajectory in read_trajectories(source) if trajectory.source in ("expert", "real")]


def build_train_dataset(args: GSPOConfig) -> tuple[Any, list[str]]:
    """The task-query dataset of a run and the real task ids it uses."""
    from datasets import Dataset

    from dynaweb_env.data.start_states import load_start_states

    start_states, real_tasks = [], []
    if args.environment in ("dream", "mix"):
        start_states = load_start_states(args.start_states, include_intermediate=args.include_intermediate)
        if args.tasks:
            start_states = [state for state in start_states if state.task_id in set(args.tasks)]
    if args.environment in ("real", "mix"):
        if args.tasks:
            real_tasks = list(args.tasks)
        else:
            real_tasks = sorted({state.task_id for state in load_start_states(args.start_states, False)})
    return Dataset.from_dict({"prompt": build_task_prompts(args, start_states, real_tasks)}), real_tasks


def last_checkpoint(output_dir: str | None) -> str | None:
    """The newest ``checkpoint-*`` directory of ``output_dir`` (``None`` if there is none)."""
    from transformers.trainer_utils import get_last_checkpoint

    if not output_dir or not Path(output_dir).is_dir():
        return None
    return get_last_checkpoint(output_dir)


__all__ = [
    "DynaWebTrainer",
    "DynaWebRollout",
    "EnvStepCounter",
    "DynaWebProgressCallback",
    "SaveAtEndCallback",
    "ExpertPool",
    "VLLMPolicy",
    "build_task_prompts",
    "completion_logps_and_entropies",
    "count_env_steps",
    "build_train_dataset",
    "environment_reward",
    "expert_slots",
    "last_checkpoint",
    "load_expert_trajectories",
    "load_policy",
    "lora_config",
    "make_task_prompt",
    "make_vector_env",
    "parse_task_prompt",
    "rollout_output",
    "trainer_policy",
]
