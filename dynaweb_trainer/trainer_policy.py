"""The policy being trained, as a generation backend for rollouts inside the trainer."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from dynaweb_env.compat import trl as compat_trl
from dynaweb_env.llm.base import Generation, SamplingParams

#: Static cache + ``torch.compile`` for the policy being trained, on the GPU path (``decoding_plan``). Off until
#: measured: its LoRA weights change after every optimizer step and the model flips between train and eval, which
#: the frozen world model and judge never do. ``benchmarks/gpu_throughput.py`` times the policy both ways.
POLICY_COMPILE = False
#: ``1`` or ``0`` here overrides :data:`POLICY_COMPILE` for a run (how the GPU benchmark times both).
POLICY_COMPILE_ENV = "DYNAWEB_POLICY_COMPILE"


def policy_compile() -> bool:
    """Whether the trained policy's rollouts compile: ``$DYNAWEB_POLICY_COMPILE`` if set, else
    :data:`POLICY_COMPILE`.

    Raises:
        ValueError: If the variable is set to anything but ``0`` or ``1``.
    """
    value = os.environ.get(POLICY_COMPILE_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"${POLICY_COMPILE_ENV} must be 0 or 1, got {value!r}")
    return POLICY_COMPILE if value == "" else value == "1"


def require_vllm() -> None:
    """``ImportError`` saying what ``--use-vllm`` needs when vLLM is not installed (checked before any model loads).

    TRL's vLLM generation (``use_vllm``, colocate or server mode) needs vLLM and a CUDA GPU; everything else
    in this module imports without it.
    """
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "--use-vllm generates rollouts with TRL's vLLM integration, which needs vLLM and a CUDA GPU: "
            "pip install 'dynaweb[vllm]'. Without one, leave --use-vllm off (the transformers policy), or use "
            "--use-engine (CTranslate2 on the CPU)."
        )


class VLLMPolicy:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over the trainer's vLLM engine (``use_vllm``).

    Sampling temperature and top-p are the trainer's (``GSPOConfig.temperature`` / ``top_p``); the
    per-turn token budget is set for each call.
    """

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.model_name = "vllm:" + str(trainer.args.policy)

    def generate(self, conversations, params):  # pragma: no cover - needs a GPU with vLLM
        encoder = self.trainer.rollout_func.encoder
        ids = [encoder._template_ids(conversation, add_generation_prompt=True) for conversation in conversations]
        return self.generate_from_ids(ids, params)

    def generate_from_ids(self, prompt_ids, params: SamplingParams) -> list[Generation]:  # pragma: no cover
        completion_ids, logprobs = compat_trl.vllm_generate(self.trainer, prompt_ids, params.max_new_tokens)
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
def trainer_policy(trainer: Any, max_batch_size: int = 64) -> Iterator[Any]:
    """The policy being trained as a generation backend: vLLM when ``use_vllm``, else transformers.

    The transformers path unwraps the model the way TRL does for its own generation (DeepSpeed
    ZeRO-3 parameters gathered, gradient checkpointing off) and wraps it, LoRA adapter included, in
    :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` (its own loop on a CPU, ``model.generate``
    on a GPU, compiled or not as :func:`policy_compile` says). That backend lives for one rollout call, in which the
    weights do not change, so it keeps its prompts' KV caches as an evaluated policy does (``frozen``,
    ``keep_prompts``): each turn of a multi-turn episode prefills only what follows the episode's last prompt.
    """
    from .engine_policy import engine_backend

    engine = engine_backend(trainer)  # --use-engine: the CTranslate2 copy synced after each optimizer step
    if engine is not None:
        yield engine
        return
    if trainer.use_vllm:
        yield VLLMPolicy(trainer)
        return
    from trl.models.utils import unwrap_model_for_generation

    from dynaweb_env.llm.transformers_backend import TransformersBackend

    summon = compat_trl.summon_full_params(trainer)
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
        # One backend per rollout call, and the optimizer steps only between calls: the weights stay as they are for
        # the backend's whole life, so it may keep prompts' KV caches (a turn then prefills only its new tail).
        yield TransformersBackend(
            model,
            tokenizer=trainer.processing_class,
            max_batch_size=max_batch_size,
            compile=policy_compile(),
            frozen=True,
            keep_prompts=True,
        )


__all__ = ["POLICY_COMPILE", "POLICY_COMPILE_ENV", "VLLMPolicy", "policy_compile", "require_vllm", "trainer_policy"]
