"""Decoding through transformers' own ``model.generate``: the accelerator path of ``TransformersBackend``.

On a GPU the hand-made loop of :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` (built for a
2-core CPU) pays a Python step and two host syncs per token; transformers' ``generate`` with a static KV cache
and ``torch.compile`` (CUDA graphs) is the maintained way to keep the device busy. This module runs one batch
through ``generate`` and returns exactly what the backend's own loop returns:

- **Log-probabilities**: :class:`SamplingLogprobs`, the first logits processor, keeps
  ``log_softmax(logits / temperature)`` of each step in float32 (the raw logits, before top-p: the convention TRL
  recomputes) and gathers each sampled token's value at the next step, on the device (no sync).
  Temperature and top-p are then applied by transformers' own warpers, in that order.
- **Stop rules in bulk**: stop strings run on the device through transformers' ``StopStringCriteria``
  (``stop_strings`` with the tokenizer); the repeated-line rule (:class:`RepeatedLineStop`) decodes the batch once
  every :data:`REPEATED_LINE_CHECK_EVERY` tokens. Each row is then cut, once, at the token that completes its
  first stop rule (:func:`finished_row`), so ``completion_ids``, ``logprobs``, ``text`` and ``finish_reason``
  follow the loop's contract.
- **Why not continuous batching**: transformers' ``generate_batch`` (5.24) returns ``log(softmax(processed
  scores))``, i.e. after top-p renormalisation, not the log-probabilities TRL recomputes, and takes no stop strings.
- **Seeds**: ``generate`` samples with torch's generator, which is seeded with the chunk's seed inside a forked
  RNG state. The same call gives the same samples; unlike the loop, a row's sample depends on the other rows of
  its batch (as with vLLM).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import (
    CompileConfig,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from ..compat.torch import allow_compiled_graphs
from .base import Generation, SamplingParams, cut_at_repeated_line
from .call_plan import DEFAULT_COMPILE_SHAPES

#: The repeated-line rule decodes the batch every this many tokens (a row may run this many tokens past its
#: repeated line before it stops; it is cut back to the line exactly).
REPEATED_LINE_CHECK_EVERY = 16
#: The shortest static cache of a compiled call; longer ones are the next power of two (:func:`cache_length`).
MIN_COMPILED_CACHE = 1024


class SamplingLogprobs(LogitsProcessor):
    """A logits processor that records the log-probability of each sampled token, on the device.

    At each step it keeps ``log_softmax(scores / temperature)`` (float32) and, at the next step, gathers the
    value of the token just sampled (the last column of ``input_ids``); :meth:`finish` gathers the last one.
    It returns the scores unchanged, so it must come first in the processor list to see the raw logits.

    Args:
        temperature: The sampling temperature (1 when decoding greedily).
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self._last: torch.Tensor | None = None
        self._chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:
            self._chosen.append(self._last.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self._last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, steps: int) -> torch.Tensor:
        """The ``(rows, steps)`` log-probabilities of the last ``steps`` tokens of ``sequences``."""
        if self._last is None or steps == 0:
            return sequences.new_zeros((sequences.shape[0], 0), dtype=torch.float32)
        if len(self._chosen) < steps:
            self._chosen.append(self._last.gather(-1, sequences[:, -1:]).squeeze(-1))
        return torch.stack(self._chosen[:steps], dim=-1)


class RepeatedLineStop(StoppingCriteria):
    """Marks done the rows whose completion holds a complete line that repeats an earlier one.

    The completions (after ``prompt_width`` columns) are decoded in one batch every ``every`` calls, so the
    device is synchronised once per ``every`` tokens rather than at each.

    Args:
        tokenizer: The model's tokenizer.
        prompt_width: Columns of ``input_ids`` that are the (left-padded) prompts.
        every: Check every this many tokens.
    """

    def __init__(self, tokenizer: Any, prompt_width: int, every: int = REPEATED_LINE_CHECK_EVERY) -> None:
        self.tokenizer, self.prompt_width, self.every = tokenizer, prompt_width, every
        self._calls = 0

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        self._calls += 1
        if self._calls % self.every:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        done = [cut_at_repeated_line(text) is not None for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def bucket_rows(rows: int, cap: int) -> int:
    """Rows a compiled batch is padded to: the next power of two, at most ``cap`` (and never fewer than ``rows``).

    A compiled static-cache forward is specialised to its batch size; a few sizes keep recompilation rare.
    """
    return max(rows, min(cap, 1 << (rows - 1).bit_length()))


def cache_length(tokens: int, limit: int | None = None) -> int:
    """The static-cache length of a compiled call that needs ``tokens`` positions (prompt width + new tokens).

    A compiled decoding step is specialised to its cache length, and compiling one takes 20-60 s on an H100
    (``benchmarks/results/gpu/``). A multi-turn rollout's prompts grow every turn, and transformers grows its static
    cache to each new longest call, recompiling each time. Rounding up to a power of two (at least
    :data:`MIN_COMPILED_CACHE`, at most the model's ``limit`` of positions unless more are needed) leaves a handful
    of lengths per run; the extra positions are masked, and cost an H100 little on models of this size.
    """
    rounded = max(MIN_COMPILED_CACHE, 1 << (tokens - 1).bit_length())
    return min(rounded, max(tokens, limit)) if limit else rounded


def generation_config(
    params: SamplingParams,
    eos_ids: Sequence[int],
    pad_id: int,
    compile: bool,
    cache_tokens: int | None = None,
    shapes: str = DEFAULT_COMPILE_SHAPES,
) -> GenerationConfig:
    """The ``GenerationConfig`` of one call: no processor of ``generate``'s own (ours come in order), stop strings,
    and, when ``compile``, a static cache of ``cache_tokens`` positions (:func:`cache_length`) with
    ``torch.compile`` (transformers' ``reduce-overhead`` mode, CUDA graphs), its shapes traced as ``shapes``
    says (:data:`~dynaweb_env.llm.call_plan.COMPILE_SHAPES`)."""
    options: dict[str, Any] = {
        "max_new_tokens": params.max_new_tokens,
        "use_cache": True,  # whatever a gradient-checkpointed training model's config says
        "do_sample": not params.greedy,
        "eos_token_id": sorted(eos_ids),
        "pad_token_id": pad_id,
        "stop_strings": [stop for stop in params.stop if stop] or None,
        "disable_compile": not compile,
        "cache_implementation": "static" if compile else None,
    }
    if compile and cache_tokens:
        options["max_cache_len"] = cache_tokens
    if compile:
        options["compile_config"] = CompileConfig(dynamic=shapes == "dynamic")
    if not params.greedy:  # neutral warpers: ours run after SamplingLogprobs (generate would put its own first)
        options.update(temperature=1.0, top_k=0, top_p=1.0)
    return GenerationConfig(**options)


def generate_rows(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    seed: int,
    params: SamplingParams,
    *,
    eos_ids: frozenset[int],
    pad_id: int,
    compile: bool,
    max_rows: int,
    compile_shapes: str = DEFAULT_COMPILE_SHAPES,
) -> list[Generation]:
    """Generate one completion per prompt in one ``model.generate`` call (see the module docstring).

    Args:
        model: A causal LM (peft-wrapped works), in eval mode.
        tokenizer: Its tokenizer.
        prompts: Token ids, one prompt per row (at most ``max_rows``).
        seed: Seeds torch's generator for this call.
        params: How to sample.
        eos_ids: Tokens that end a sequence.
        pad_id: The padding token.
        compile: Use a static cache with ``torch.compile``; the batch is then padded to :func:`bucket_rows` rows and
            the cache to :func:`cache_length` positions.
        max_rows: The largest batch (the cap of :func:`bucket_rows`).
        compile_shapes: When ``compile``, ``"dynamic"`` (one graph for every shape) or ``"static"`` (one per shape).

    Returns:
        One :class:`~dynaweb_env.llm.base.Generation` per prompt, in order.
    """
    device = next(model.parameters()).device
    if compile:
        allow_compiled_graphs()
    rows = bucket_rows(len(prompts), max_rows) if compile else len(prompts)
    padded = prompts + [prompts[-1]] * (rows - len(prompts))  # filler rows for a compiled batch size
    width = max(len(ids) for ids in padded)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    for row, ids in enumerate(padded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention_mask[row, width - len(ids) :] = 1
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    cache_tokens = cache_length(width + params.max_new_tokens, limit) if compile else None
    temperature = 1.0 if params.greedy else params.temperature
    recorder = SamplingLogprobs(temperature)
    processors = LogitsProcessorList([recorder])
    if not params.greedy:
        if temperature != 1.0:
            processors.append(TemperatureLogitsWarper(temperature))
        if params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p))
    criteria = StoppingCriteriaList()
    if params.stop_at_repeated_line:
        criteria.append(RepeatedLineStop(tokenizer, width))
    extra = {"tokenizer": tokenizer} if any(params.stop) else {}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        torch.manual_seed(seed)
        sequences = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=generation_config(params, eos_ids, pad_id, compile, cache_tokens, compile_shapes),
            logits_processor=processors,
            stopping_criteria=criteria,
            **extra,
        )
    steps = sequences.shape[1] - width
    logprobs = recorder.finish(sequences, steps)[: len(prompts)].tolist()  # the one transfer of the call
    completions = sequences[: len(prompts), width:].tolist()
    return [
        finished_row(tokenizer, ids, completion, row_logprobs, eos_ids, params)
        for ids, completion, row_logprobs in zip(prompts, completions, logprobs, strict=True)
    ]


def finished_row(
    tokenizer: Any,
    prompt: list[int],
    completion: list[int],
    logprobs: list[float],
    eos_ids: frozenset[int],
    params: SamplingParams,
) -> Generation:
    """One row of a ``generate`` batch cut where the backend's loop would have stopped it.

    The row ends at its first end-of-sequence token (kept), or earlier at the token that completes its first stop
    rule (:func:`~dynaweb_env.llm.transformers_backend.stop_text`); padding after the end is dropped.
    """
    from .transformers_backend import stop_text

    end = next((i + 1 for i, token in enumerate(completion) if token in eos_ids), None)
    ids = completion[:end] if end is not None else completion
    finish = "length" if end is None else "stop"
    text = None
    if (params.stop or params.stop_at_repeated_line) and stop_text(tokenizer, ids, params) is not None:
        # A stop rule holds for every longer prefix once it holds, so the shortest prefix is found by bisection.
        low, high = 1, len(ids)
        while low < high:
            middle = (low + high) // 2
            if stop_text(tokenizer, ids[:middle], params) is None:
                low = middle + 1
            else:
                high = middle
        ids, finish = ids[:low], "stop"
        text = stop_text(tokenizer, ids, params)
    if text is None:
        text = tokenizer.decode(ids, skip_special_tokens=True)
    return Generation(text, list(prompt), list(ids), logprobs[: len(ids)], finish)


__all__ = [
    "MIN_COMPILED_CACHE",
    "REPEATED_LINE_CHECK_EVERY",
    "RepeatedLineStop",
    "SamplingLogprobs",
    "bucket_rows",
    "cache_length",
    "finished_row",
    "generate_rows",
    "generation_config",
]
