"""`DynaWebTrainer`: TRL's GRPOTrainer running GSPO on dreamed, real and expert web episodes.

The trainer adds no loss of its own: TRL 1.16 with ``importance_sampling_level="sequence"`` and
``loss_type="grpo"`` already computes the paper's eq. 8-10, and it applies the ``env_mask`` our
rollouts return so the sequence ratio runs over the policy's own tokens only
(``tests/test_gspo_loss.py`` checks this against a hand computation). What it adds is the data
flow around the loss, each piece in its own module:

- **Task queries** (:mod:`~dynaweb_trainer.task_queries`): each dataset row names an environment and
  a start (a dream start-state id, or a real task and seed); TRL repeats it ``num_generations`` times.
- **Rollouts** (:mod:`~dynaweb_trainer.rollout_func`): TRL's ``rollout_func`` runs the groups with
  :func:`~dynaweb_trainer.rollout.run_episodes` on the envs of :mod:`~dynaweb_trainer.env_factory`,
  the policy being :func:`~dynaweb_trainer.trainer_policy.trainer_policy`.
- **Expert interleaving** (:mod:`~dynaweb_trainer.expert_pool`): some slots are real expert
  trajectories of the same task, encoded exactly as rollouts.
- **Reward and metrics** (:mod:`~dynaweb_trainer.metrics`): the env's reward, plus success rate,
  expert share, episode lengths, world-model format errors and rollout throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import ProgressCallback, TrainerCallback
from trl import GRPOTrainer

from dynaweb_env.agent import policy_system_prompt
from dynaweb_env.compat.trl import PerTokenLogpsOverride
from dynaweb_env.data.schema import Trajectory

from .checkpoint_state import AtomicTrainerState
from .config import GSPOConfig
from .encoding import EpisodeEncoder
from .expert_pool import ExpertPool, load_expert_trajectories
from .labelled_head import completion_logps_and_entropies
from .metrics import DynaWebProgressCallback, EnvStepCounter, RunClock, environment_reward
from .model_loading import last_checkpoint, load_model_and_tokenizer
from .rollout_func import DynaWebRollout
from .task_queries import build_train_dataset, check_query_count, real_tasks_of, task_ids_of
from .trainer_policy import require_vllm
from .turn_rows import per_turn_args, turn_slots


class DynaWebTrainer(PerTokenLogpsOverride, GRPOTrainer):
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
        if args.use_vllm:
            require_vllm()
        start_states = None
        if train_dataset is None:
            train_dataset, real_tasks, start_states = build_train_dataset(args)
        else:
            real_tasks = real_tasks_of(train_dataset["prompt"])
        check_query_count(args, len(train_dataset))
        if args.page_history == "actions":  # a row a turn: TRL sees T rows an episode (see turn_rows)
            slots = turn_slots(task_ids_of(train_dataset["prompt"]), args.agent_max_steps)
            args = per_turn_args(args, slots)
        if model is None or isinstance(model, (str, Path)):
            model, processing_class, _ = load_model_and_tokenizer(
                model or args.policy, trainable=True, tokenizer=processing_class
            )
        if processing_class is None:
            raise ValueError("pass the tokenizer as processing_class together with a loaded model")
        if expert_trajectories is None and args.expert_frac > 0:
            expert_trajectories = load_expert_trajectories(args.expert_trajectories, args.start_states)
        experts = ExpertPool(expert_trajectories or [], args.agent_max_steps)
        if args.expert_frac > 0 and (lacking := experts.lacking(task_ids_of(train_dataset["prompt"]))):
            import warnings

            warnings.warn(
                f"expert_frac={args.expert_frac}, but the expert pool has no successful expert trajectory of "
                f"{len(lacking)} of the run's tasks ({', '.join(lacking)}): their groups get no expert replay. Pass "
                "--expert-trajectories with demonstrations of them (e.g. `dynaweb-collect --policy expert`).",
                stacklevel=2,
            )
        system_prompt = args.system_prompt or policy_system_prompt(args.response_style)
        encoder = EpisodeEncoder(processing_class, system_prompt, args.max_axtree_chars, args.page_history)
        shortest = experts.shortest_turn_tokens(encoder)
        if shortest is not None and args.max_turn_tokens < shortest:
            import warnings

            warnings.warn(
                f"max_turn_tokens={args.max_turn_tokens} is below the shortest expert turn ({shortest} tokens): a "
                f"response cut there never reaches its action, so every reward and loss would be 0. Raise "
                f"--max-turn-tokens to at least {shortest}.",
                stacklevel=2,
            )
        rollout = DynaWebRollout(args, encoder, experts, vector_envs, real_tasks, start_states)
        self.clock = RunClock()
        super().__init__(
            model=model,
            reward_funcs=[environment_reward],
            args=args,
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=[self.clock, EnvStepCounter(), AtomicTrainerState(), *(callbacks or [])],
            peft_config=None if hasattr(model, "peft_config") else args.peft_config(),
            rollout_func=rollout,
        )
        if not args.disable_tqdm:
            self.remove_callback(ProgressCallback)
            self.add_callback(DynaWebProgressCallback)
        if args.use_engine:
            from .engine_policy import attach_engine

            attach_engine(self, args.engine_quantization)

    def completion_logps_override(
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

        TRL's per-token log-prob method calls this first (:class:`~dynaweb_env.compat.trl.PerTokenLogpsOverride`)
        and runs its own implementation when it returns ``None``. TRL 1.16's fused LM head scores *every*
        position, prompt included, when Triton is unavailable (CPU): with multi-turn web prompts of ~1k tokens
        and turns of ~50, that is >90% wasted head compute and memory. On CPU this runs the backbone once and
        the head (softmax over the vocabulary at ``self.temperature``) on the completion positions only, in
        checkpointed chunks. Anywhere else (GPU, multimodal, MoE aux loss, soft-capped or scaled logits) it
        returns ``None``. ``tests/test_gspo_loss.py`` checks both agree. The shortcut bypasses a DDP wrapper's
        forward, where DDP hooks its gradient sync, so with several processes
        :meth:`training_step` averages the gradients itself.
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
            return None
        self._unsynced_gradients = torch.is_grad_enabled() and self.accelerator.num_processes > 1
        with self.accelerator.autocast():
            return completion_logps_and_entropies(
                causal_lm, input_ids, attention_mask, logits_to_keep, self.temperature, batch_size, compute_entropy
            )

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step, then, when the CPU shortcut computed the loss on several processes, the gradient
        all-reduce DDP would have done (mean over processes), so that every rank takes the same step."""
        self._unsynced_gradients = False
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._unsynced_gradients:
            trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
            for parameter in trainable:  # every rank must send the same layout, used by its batch or not
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
            gradients = [parameter.grad for parameter in trainable]
            flat = torch.cat([gradient.reshape(-1) for gradient in gradients])
            torch.distributed.all_reduce(flat)
            flat /= self.accelerator.num_processes
            for gradient, synced in zip(gradients, flat.split([g.numel() for g in gradients]), strict=True):
                gradient.copy_(synced.view_as(gradient))
        return loss

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
            "update_seconds": self.clock.update_seconds,  # this segment's updates, in order
            "environment": self.args.environment,
            "policy": self.args.policy,
            "reward_guards": self.args.reward_guards if self.args.environment != "real" else None,
            "success_rate_first": mean("env/success_rate", head),
            "success_rate_last": mean("env/success_rate", tail),
            "policy_success_rate_last": mean("env/policy_success_rate", tail),
            "expert_share": mean("env/expert_share", history),
            "dream_steps": mean("env/dream_steps", history),
            "wm_format_error_rate": mean("env/wm_format_error_rate", history),
            "policy_tokens_per_s": mean("rollout/policy_tokens_per_s", history),
            # each logged update's rollout: all of it, the policy's generation, and the envs' steps and resets
            # (in a dream: the world model and the judge)
            "rollout_seconds": {
                part: [round(entry[key], 3) for entry in history if key in entry]
                for part, key in (
                    ("all", "rollout/seconds"),
                    ("policy", "rollout/policy_seconds"),
                    ("env", "rollout/env_seconds"),
                )
            },
            # the policy's episodes in the training batches (dreams, real pages), not the expert replays beside them;
            # restored on resume, like the step counts
            "policy_episodes": counter.episodes,
            "real_env_steps": counter.real_env_steps,
            "expert_env_steps": counter.expert_env_steps,
            "last_checkpoint": last_checkpoint(self.args.output_dir),
            "num_processes": self.accelerator.num_processes,
            **({"rank_weight_digests": self.rank_weight_digests()} if self.accelerator.num_processes > 1 else {}),
        }

    def rank_weight_digests(self) -> list[str]:
        """Per process, a SHA-256 of the policy's parameters (collective: every process must call it).

        Data-parallel processes must end with the same weights; one digest that differs is a run whose
        ranks trained apart, which nothing else in the logs would show.
        """
        import hashlib

        from accelerate.utils import gather_object

        digest = hashlib.sha256()
        for name, tensor in sorted(self.accelerator.unwrap_model(self.model).state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return gather_object([digest.hexdigest()])


__all__ = ["DynaWebTrainer", "completion_logps_and_entropies"]
