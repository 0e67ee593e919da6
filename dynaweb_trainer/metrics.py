"""What a training run reports: the reward function's metrics, the progress line, and run counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import ProgressCallback, TrainerCallback
from transformers.trainer_callback import ExportableState

from .task_queries import ENV_KINDS

if TYPE_CHECKING:
    from .rollout import EpisodeResult


def environment_reward(
    prompts: list[str],
    completions: list[Any],
    reward: list[float],
    success: list[bool] | None = None,
    source: list[str] | None = None,
    num_steps: list[int] | None = None,
    world_model_errors: list[int] | None = None,
    judge_error: list[bool] | None = None,
    rollout_stats: list[dict[str, float]] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """Reward = the environment's terminal reward (judge verdict in dreams, task reward for real and
    expert episodes). Also logs, through TRL's ``log_metric``:

    ``env/success_rate`` (all slots), ``env/policy_success_rate`` (rollouts only),
    ``env/expert_share``, ``env/dream_steps`` and ``env/real_steps`` (mean policy turns),
    ``env/wm_format_error_rate`` (malformed world-model outputs per dream step), ``env/judge_error_rate`` (dreams
    whose judge gave no verdict: no ``VERDICT`` line, the token limit, a backend failure; their reward 0 is no
    verdict),
    ``rollout/policy_tokens_per_s``, ``rollout/env_steps_per_s``, ``rollout/seconds`` and its parts
    ``rollout/policy_seconds`` (generation) and ``rollout/env_seconds`` (steps and resets); with ``dream_resamples``,
    ``env/dream_groups_redreamed`` (flat dream groups dreamed again, all attempts) and ``env/dream_groups_resampled``
    (those replaced by a draw whose rewards differ).
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
        dreams = [i for i in range(count) if source[i] == "dream"]
        if dreams and judge_error is not None:
            log_metric("env/judge_error_rate", sum(bool(judge_error[i]) for i in dreams) / len(dreams))
        if rollout_stats:
            stats = rollout_stats[0]
            if stats.get("generate_seconds"):
                log_metric("rollout/policy_tokens_per_s", stats["policy_tokens_per_second"])
            if stats.get("wall_seconds"):
                log_metric("rollout/env_steps_per_s", stats["env_steps_per_second"])
                log_metric("rollout/seconds", stats["wall_seconds"])
                log_metric("rollout/policy_seconds", stats.get("generate_seconds", 0.0))
                log_metric("rollout/env_seconds", stats.get("step_seconds", 0.0) + stats.get("reset_seconds", 0.0))
            if stats.get("dream_resamples"):
                log_metric("env/dream_groups_redreamed", stats["dream_resamples"])
                log_metric("env/dream_groups_resampled", stats["dream_groups_resampled"])
    return [float(value) for value in reward]


_PROGRESS_KEYS = (
    ("reward", "reward"),
    ("env/success_rate", "success"),
    ("env/expert_share", "expert"),
    ("env/dream_steps", "dream_len"),
    ("env/wm_format_error_rate", "wm_err"),
    ("env/judge_error_rate", "judge_err"),
    ("rollout/policy_tokens_per_s", "tok/s"),
    ("loss", "loss"),
)


class DynaWebProgressCallback(ProgressCallback):
    """TRL's progress bar, with one compact line per log instead of the full metrics dict.

    With ``dream_resamples``, the line also says how many flat dream groups (every dream of the group earned the
    same reward) were dreamed again in the update, and how many of them found a reward spread and replaced the
    flat group; averaged over the logging step, as TRL averages every logged metric.
    """

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        for key, label in _PROGRESS_KEYS:
            if isinstance(logs.get(key), (int, float)):
                parts.append(f"{label} {logs[key]:.3g}")
        redreamed = logs.get("env/dream_groups_redreamed")
        if isinstance(redreamed, (int, float)) and redreamed:
            # dream_resamples: flat groups dreamed again from new start states; "found a spread" replaced the group
            found = logs.get("env/dream_groups_resampled", 0)
            parts.append(f"flat groups re-dreamed {redreamed:.3g} times ({found:.3g} found a spread)")
        if logs.get("frac_reward_zero_std") == 1.0:
            # GSPO's advantage is the reward's deviation within a group: with no spread anywhere, the loss is 0.
            parts.append("no group had a reward spread: this update changed nothing (loss 0)")
        if len(parts) > 1:
            self.training_bar.write(" | ".join(parts))


class SaveAtEndCallback(TrainerCallback):
    """Save a checkpoint at the last step too, not only every ``save_steps``."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps and args.save_strategy != "no":
            control.should_save = True
        return control


class StopAfterStepCallback(TrainerCallback):
    """Save ``checkpoint-<step>`` and stop training there (``GSPOConfig.stop_after_step``).

    The learning-rate schedule and ``max_steps`` are untouched, so a resumed run goes on exactly as one that
    never stopped would.
    """

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_save = True  # the stop point need not fall on a save_steps multiple
            control.should_training_stop = True
        return control


def restore_saved_attributes(callback: ExportableState, state: Any) -> dict[str, Any]:
    """The attributes ``callback`` saved in the checkpoint a run resumed from (at train begin).

    transformers restores callback states only with ``restore_callback_states_from_checkpoint``; the clock and
    the step counts must survive every resume, so they are read from the loaded state here. A fresh run's state
    holds the callback's state when training began. A checkpoint written before the callback existed has no
    entry, which saving would trip on, so one is added.
    """
    name = type(callback).__name__
    saved = state.stateful_callbacks.get(name)
    state.stateful_callbacks.setdefault(name, callback.state())
    return dict(saved.get("attributes", {})) if isinstance(saved, dict) else {}


class RunClock(TrainerCallback, ExportableState):
    """Wall time of the training behind the final model, for the summary.

    Saved in each checkpoint's ``trainer_state.json`` and restored on resume, as :class:`EnvStepCounter`'s
    counts are, so a resumed run reports the seconds of its earlier segments up to the checkpoint it resumed
    from plus its own (time an interrupted segment spent after its last checkpoint is redone, and counted once).
    """

    def __init__(self):
        self.started: float | None = None  # not before training begins: a fresh run starts from 0 seconds
        self.before = 0.0  # seconds of earlier segments, up to the checkpoint resumed from
        self.seconds = 0.0
        self.update_seconds: list[float] = []  # wall seconds of each update of this segment (the first compiles)
        self._update_started: float | None = None

    def elapsed(self) -> float:
        """Seconds of training behind the model now: earlier segments plus this one so far."""
        return self.before + (time.perf_counter() - self.started if self.started is not None else 0.0)

    def state(self) -> dict:
        return {"args": {}, "attributes": {"seconds": self.elapsed()}}

    def on_train_begin(self, args, state, control, **kwargs):
        self.before = float(restore_saved_attributes(self, state).get("seconds", 0.0))
        self.started = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self._update_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._update_started is not None:
            self.update_seconds.append(round(time.perf_counter() - self._update_started, 3))

    def on_train_end(self, args, state, control, **kwargs):
        self.seconds = self.elapsed()


class EnvStepCounter(TrainerCallback, ExportableState):
    """Real-environment steps and episodes a run consumed, for comparing the data cost of methods.

    ``real_env_steps`` counts the policy's steps in the real browser (``--env real`` / ``mix``);
    ``expert_env_steps`` the steps of the expert trajectories interleaved into batches (replays of
    recorded demonstrations, so not new browser interactions); ``episodes`` the policy's episodes in the
    training batches (dreams and real, not expert replays, nor re-dreamed groups that were dropped), which the run's
    summary reports as ``policy_episodes``. Totals over all processes. The counts
    are saved in each checkpoint's ``trainer_state.json`` and restored on resume, so they describe the
    rollouts behind the final model: rollouts of an interrupted run after its last checkpoint are
    redone and counted once.
    """

    def __init__(self, real_env_steps: int = 0, expert_env_steps: int = 0, episodes: int = 0):
        self.real_env_steps = real_env_steps
        self.expert_env_steps = expert_env_steps
        self.episodes = episodes

    def state(self) -> dict:
        counts = {"real_env_steps": self.real_env_steps, "expert_env_steps": self.expert_env_steps}
        return {"args": {}, "attributes": {**counts, "episodes": self.episodes}}

    def on_train_begin(self, args, state, control, **kwargs):
        for name, value in restore_saved_attributes(self, state).items():
            setattr(self, name, int(value))


def count_env_steps(trainer: Any, results: Sequence[EpisodeResult]) -> None:
    """Add the real and expert steps and the episodes of one rollout batch to the trainer's :class:`EnvStepCounter`."""
    handler = getattr(trainer, "callback_handler", None)
    counter = next((cb for cb in getattr(handler, "callbacks", ()) if isinstance(cb, EnvStepCounter)), None)
    if counter is None:
        return
    counts = [sum(r.num_steps for r in results if r.source == source) for source in ("real", "expert")]
    counts.append(sum(r.source != "expert" for r in results))
    accelerator = trainer.accelerator
    if accelerator.num_processes > 1:
        # Every process runs its share of the rollouts in lockstep: sum so each holds the run's total.
        counts = accelerator.reduce(torch.tensor(counts, device=accelerator.device), reduction="sum").tolist()
    counter.real_env_steps += int(counts[0])
    counter.expert_env_steps += int(counts[1])
    counter.episodes += int(counts[2])


__all__ = [
    "DynaWebProgressCallback",
    "EnvStepCounter",
    "RunClock",
    "SaveAtEndCallback",
    "count_env_steps",
    "environment_reward",
]
