"""In-process generation with vLLM (GPU; ``pip install dynaweb[vllm]``).

vLLM is imported only when a :class:`VLLMBackend` is built, so the rest of the project runs without it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .base import Conversation, Generation, SamplingParams, chat_template_ids, cut_at_repeated_line, request_seeds


class VLLMBackend:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over an in-process ``vllm.LLM``.

    Conversations are rendered with the model's own chat template here and sent as token prompts,
    so ``prompt_ids`` are exactly what the engine saw, as with
    :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`. Each sequence gets its own
    ``vllm.SamplingParams`` (``n=1``, its own seed, ``logprobs=1``). ``logprobs`` are vLLM's: the
    model's raw log-probabilities of the sampled tokens unless the engine was built with
    ``logprobs_mode="processed_logprobs"``. ``completion_ids`` include a final end-of-sequence token
    when one ended the sequence; stop strings are kept in ``text``.

    Args:
        model: A local checkpoint directory, an embedded model name (see :mod:`dynaweb_env.models`)
            or a hub id.
        model_name: Name for logs (default: ``model``).
        **engine_kwargs: Passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``dtype``, ``enable_prefix_caching``).

    Raises:
        ImportError: If vLLM is not installed.
    """

    def __init__(self, model: str | os.PathLike[str], *, model_name: str | None = None, **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as error:
            raise ImportError(
                "VLLMBackend needs vLLM, which is CUDA-only on PyPI: `pip install 'dynaweb[vllm]'` on a GPU machine, "
                "or use a transformers spec (e.g. 'smollm2-135m') or 'openai:<model>@<url>' for a vLLM server"
            ) from error
        from ..models import resolve_model

        self._vllm = vllm
        self.model_name = model_name or os.fspath(model)
        self.llm = vllm.LLM(model=os.fspath(resolve_model(model)), **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def chat_prompt_ids(self, conversation: Conversation) -> list[int]:
        """Token ids of the chat template applied to ``conversation``, with the generation prompt."""
        return chat_template_ids(self.tokenizer, conversation)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per chat conversation in one engine call."""
        return self.generate_from_ids([self.chat_prompt_ids(conversation) for conversation in conversations], params)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate one completion per tokenized prompt in one engine call.

        Raises:
            ValueError: If a prompt is empty.
        """
        from vllm.inputs import TokensPrompt

        prompts = [list(map(int, ids)) for ids in prompt_ids]
        if any(not ids for ids in prompts):
            raise ValueError("every prompt must hold at least one token id")
        if not prompts:
            return []
        sampling = [
            self._vllm.SamplingParams(
                n=1,
                max_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=1.0 if params.greedy else params.top_p,
                seed=seed,
                stop=list(params.stop) or None,
                include_stop_str_in_output=True,
                logprobs=1,
            )
            for seed in request_seeds(params.seed, len(prompts))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], sampling, use_tqdm=False)
        generations = []
        for ids, request in zip(prompts, outputs, strict=True):
            completion = request.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = []
            if completion.logprobs is not None:
                logprobs = [
                    float(entry[token].logprob) for entry, token in zip(completion.logprobs, token_ids, strict=True)
                ]
            finish = "length" if completion.finish_reason == "length" else "stop"
            text = completion.text
            if params.stop_at_repeated_line and (cut := cut_at_repeated_line(text)) is not None:
                text, finish = cut, "stop"  # vLLM cannot stop there, so the repetition is cut afterwards
            generations.append(Generation(text, ids, token_ids, logprobs, finish))
        return generations


__all__ = ["VLLMBackend"]
