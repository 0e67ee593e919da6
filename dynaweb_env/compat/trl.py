"""What DynaWeb overrides or sets inside TRL's ``GRPOTrainer``.

TRL has no public hooks for three things DynaWeb does: scoring the LM head on completion positions only (a
CPU shortcut of its per-token log-prob method), rolling out on a CPU engine through its vLLM weight-sync
hooks, and logging into its metrics. Each is here, behind :data:`TRL_TESTED`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import require_version

#: The TRL releases these reaches were tested with (pinned in the ``train`` extra).
TRL_TESTED = ">=1.16,<1.17"


def _require(purpose: str) -> None:
    require_version("trl", TRL_TESTED, purpose)


class PerTokenLogpsOverride:
    """Mixin for a ``GRPOTrainer`` subclass: route TRL's per-token log-prob computation through a hook.

    The subclass defines ``completion_logps_override(model, input_ids, attention_mask, logits_to_keep,
    batch_size, compute_entropy, compute_aux_loss, **multimodal)``, returning TRL's ``(logps, entropies,
    aux_loss)`` or ``None`` to let TRL's own implementation run. Put the mixin before ``GRPOTrainer`` in the
    bases; the TRL version is checked when the subclass is defined.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _require("scores the LM head on completion positions only (overrides _get_per_token_logps_and_entropies)")

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        # TRL's arguments pass through unchanged, so the hook's signature is defined once, by the subclass.
        result = self.completion_logps_override(*args, **kwargs)
        if result is not None:
            return result
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)


def install_weight_sync(trainer: Any, weight_sync: Any) -> None:
    """Make ``trainer`` call ``weight_sync.sync_weights()`` whenever its ``global_step`` moved, first at once.

    TRL calls its vLLM generator's ``sync_weights`` on that schedule; ``weight_sync`` takes the generator's
    place (no vLLM is built) and ``use_vllm`` also turns on TRL's importance-sampling correction.
    """
    _require("syncs a CPU engine through its vLLM weight-sync hooks")
    trainer.vllm_generation = weight_sync
    trainer.use_vllm = True
    trainer._last_loaded_step = -1  # so the first rollout syncs


def mark_weights_synced(trainer: Any) -> None:
    """Tell ``trainer`` its generator holds the current step's weights (TRL then skips its next sync)."""
    _require("syncs a CPU engine through its vLLM weight-sync hooks")
    trainer._last_loaded_step = trainer.state.global_step


def log_metric(trainer: Any, key: str, value: float, mode: str = "train") -> None:
    """Add ``value`` to ``trainer``'s ``key`` metric of ``mode`` (averaged into TRL's next log); no-op if it has none.

    Works for TRL's ``GRPOTrainer`` and ``SFTTrainer`` alike.
    """
    _require("logs into its trainer's metrics")
    metrics = getattr(trainer, "_metrics", None)
    if metrics is not None:
        metrics[mode][key].append(value)


def count_sft_tokens(trainer: Any, mode: str, tokens_in_batch: int) -> None:
    """What TRL's ``SFTTrainer.compute_loss`` logs as ``num_tokens``: the tokens trained on so far.

    Args:
        trainer: An ``SFTTrainer`` whose ``compute_loss`` is replaced.
        mode: ``"train"`` (``tokens_in_batch`` is added to the count) or ``"eval"``.
        tokens_in_batch: Tokens of this batch over every process (attention mask summed).
    """
    _require("logs the token count as its SFTTrainer does")
    if mode == "train":
        trainer._total_train_tokens += tokens_in_batch // trainer._tp_size
    trainer._metrics[mode]["num_tokens"] = [trainer._total_train_tokens]


def summon_full_params(trainer: Any) -> Any:
    """TRL's context manager factory gathering FSDP-sharded parameters for generation, or ``None`` without FSDP.

    Called as ``summon(trainer.model_wrapped, recurse=False)``, as TRL's own generation does.
    """
    _require("gathers sharded parameters for generation as TRL does")
    return getattr(getattr(trainer, "_dist", None), "summon_full_params", None)


def vllm_generate(trainer: Any, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> tuple[list, list]:
    """``(completion_ids, logprobs)`` of one completion per prompt from ``trainer``'s TRL vLLM generator.

    TRL's generator holds one completion budget (``max_completion_length``); it is set to ``max_new_tokens``
    for this call.
    """
    _require("generates with its trainer's vLLM generator at a per-call token budget")
    generation = trainer.vllm_generation
    saved = generation.max_completion_length
    generation.max_completion_length = max_new_tokens
    try:
        _, completion_ids, logprobs, _ = generation.generate(prompts=list(prompt_ids), images=None, num_generations=1)
    finally:
        generation.max_completion_length = saved
    return completion_ids, logprobs


__all__ = [
    "TRL_TESTED",
    "PerTokenLogpsOverride",
    "install_weight_sync",
    "count_sft_tokens",
    "log_metric",
    "mark_weights_synced",
    "summon_full_params",
    "vllm_generate",
]
