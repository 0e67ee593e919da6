"""Batched generation with a local transformers model (CPU or GPU).

On a CPU, :class:`TransformersBackend` runs its own decoding loop instead of ``model.generate`` so that it can
return exactly what the trainer needs: the prompt ids the model saw, the sampled ids, and the
log-probability of each sampled token, with per-sequence seeding that does not depend on how a
batch is split or ordered. On an accelerator it decodes through ``model.generate`` (static cache and
``torch.compile`` on CUDA; :mod:`~dynaweb_env.llm.hf_generate`), returning the same fields; :func:`decoding_plan`
is the rule.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .base import (
    Conversation,
    Generation,
    GenerationError,
    SamplingParams,
    chat_template_ids,
    checked_prompt_ids,
    cut_at_repeated_line,
    sequence_seeds,
    validate_conversation,
)
from .call_plan import DECODINGS, decoding_plan, shared_prefix_length
from .call_plan import compile_shapes as compile_shapes_choice
from .prefill import PrefillMixin

DEFAULT_MAX_BATCH_SIZE = 16


def load_merged_adapter(adapter_dir: Path, base: Path | str, dtype: torch.dtype) -> Any:
    """The base model with a LoRA adapter merged into its weights (generation then costs what the base costs)."""
    from transformers import AutoModelForCausalLM

    try:
        from peft import PeftModel
    except ImportError:
        raise GenerationError(f"{adapter_dir} is a LoRA adapter; loading it needs peft (pip install peft)") from None
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype, trust_remote_code=False)
    return PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()


def _row_seeds(seed: int | None, count: int) -> list[int]:
    # Without a seed the row seeds come from torch's global generator, so torch.manual_seed still
    # makes a run reproducible.
    if seed is None:
        return torch.randint(0, 2**62, (count,)).tolist()
    return sequence_seeds(seed, count)


def stop_text(tokenizer: Any, completion: Sequence[int], params: SamplingParams) -> str | None:
    """The text of ``completion`` cut at the stop rule it completes (a stop string, kept; or a repeated line,
    left out); ``None`` while it completes none. Every local backend checks its stop rules with this."""
    # Decoding the whole completion each step is simpler than tracking token boundaries and
    # costs microseconds next to a forward pass.
    text = tokenizer.decode(list(completion), skip_special_tokens=True)
    ends = [text.find(stop) + len(stop) for stop in params.stop if stop and stop in text]
    if params.stop_at_repeated_line and (cut := cut_at_repeated_line(text)) is not None:
        ends.append(len(cut))
    return text[: min(ends)] if ends else None


def _sample(probs: torch.Tensor, top_p: float, generators: list[torch.Generator]) -> torch.Tensor:
    """Draw one token per row from ``probs`` restricted to its top-p nucleus, row ``i`` with ``generators[i]``.

    The nucleus is the smallest set of most likely tokens whose mass reaches ``top_p`` (the most
    likely token always stays). It is found with a growing ``topk`` rather than a full sort: a
    trained model's nucleus is usually a few dozen tokens out of tens of thousands.
    """
    vocab = probs.shape[-1]
    if top_p >= 1.0:
        values, indices = probs, None
    else:
        k = min(64, vocab)
        while True:
            values, indices = probs.topk(k, dim=-1)
            if k == vocab or bool((values.sum(dim=-1) >= top_p).all()):
                break
            k = min(vocab, k * 8)
        mass_before = values.cumsum(dim=-1) - values
        values = values.masked_fill(mass_before >= top_p, 0.0)
    # multinomial normalises each row itself, so the filtered mass need not sum to one.
    picks = torch.cat([torch.multinomial(values[row], 1, generator=gen) for row, gen in enumerate(generators)])
    return picks if indices is None else indices.gather(-1, picks[:, None]).squeeze(-1)


class TransformersBackend(PrefillMixin):
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over a transformers causal LM.

    Prompts are left-padded and decoded together with a KV cache; sequences that finish leave the
    batch so the rest decode faster. Batches larger than ``max_batch_size`` are split, after sorting
    by prompt length to reduce padding; results always come back in input order.

    Shared prompt prefixes are computed once: when the prompts of a batch start with the same tokens
    (at least :data:`MIN_SHARED_PREFIX`; e.g. the world model's system prompt, ~850 tokens of every
    prompt, or the ``G`` identical prompts of a GRPO group), that prefix is prefilled for one row, its
    KV cache is repeated over the batch, and only the rest of each prompt is prefilled per row. On a
    CPU each rest is prefilled alone (prefill is compute-bound there, so padding would cost as much as
    real tokens) and the rows are then stacked into one left-padded cache, a rest identical to an earlier
    row's computed once (a planner's samples of one page); the KV cache grows in place
    (:mod:`~dynaweb_env.llm.kv_cache`). The outputs are those of one padded full prefill up to
    floating-point rounding. For a frozen model (one the backend loaded itself, or ``frozen=True``) the KV cache
    of its prompts' common first chat turn (the system prompt) is also kept between calls
    (:attr:`prefix_states`), as CTranslate2 keeps its static prompt: a call then prefills only what follows it,
    one prompt or many.

    What each :class:`~dynaweb_env.llm.base.Generation` holds:

    - ``prompt_ids``: the prompt exactly as the model saw it, without padding (for chat input, the
      tokenized chat template with the generation prompt; see :meth:`chat_prompt_ids`).
    - ``completion_ids``: the sampled tokens, without padding. An end-of-sequence token that ended
      the sequence is *included* (the policy must learn to emit it) and ``finish_reason`` is
      ``"stop"``; ``text`` never contains it (special tokens are skipped when decoding).
    - ``logprobs``: for each completion token, ``log_softmax(logits / temperature)`` in float32,
      taken *before* top-p filtering (the convention TRL uses to recompute log-probabilities), with
      temperature 1 when decoding greedily.
    - Stop strings: the sequence ends at the token that completes a stop string; ``text`` is cut
      right after the stop string (which is kept), while ``completion_ids`` end with that whole
      token, which may carry a few characters more. ``stop_at_repeated_line`` ends it at the token
      that completes a repeated line; ``text`` ends before that line, ``completion_ids`` hold it.

    Sampling: ``seed`` gives every sequence its own generator derived from ``(seed, index)``, so the
    same call returns the same texts, and a sequence's sample does not depend on ``max_batch_size``
    or on the other prompts in the batch. Identical prompts at different positions get different
    samples (as a GRPO group needs).

    Args:
        model: An embedded model name (see :mod:`dynaweb_env.models`), a local checkpoint
            directory, a hub id, or an already-loaded ``PreTrainedModel`` (a peft-wrapped model
            works too: the trainer passes its live policy this way).
        tokenizer: The tokenizer; required with a loaded model, loaded from the checkpoint otherwise.
        device: Device to load onto (default: CUDA if available, else CPU). With a loaded model the
            model's own device is used and this must be ``None`` or match.
        dtype: Weights dtype when loading (default float32 on CPU, bfloat16 on CUDA).
        max_batch_size: Most sequences decoded together.
        model_name: Name for logs; defaults to the reference or the model's ``name_or_path``.
        share_prefix: Prefill a prefix shared by all prompts of a batch once (and identical prompts once), and
            keep the first chat turn's between calls for a frozen model (see above; own loop only).
        frozen: Whether the model's weights stay as they are between calls, so that the first chat turn's KV cache
            may be kept; ``None``: for a model loaded here only. Pass ``True`` for a loaded model whose weights do
            not change while this backend is used: an evaluated policy, or the trainer's policy wrapped anew for each
            rollout call (:func:`~dynaweb_trainer.trainer_policy.trainer_policy`), never one backend kept across
            optimizer steps.
        keep_prompts: With ``frozen``, on a CPU, also keep whole prompts' KV caches (up to 1 GiB,
            :class:`~dynaweb_env.llm.kv_cache.PromptStates`), so that a multi-turn agent's next prompt, which extends
            its last one, prefills only its new tail. For a policy; a world model's or judge's prompts extend none.
        decoding: ``"loop"`` (the loop above), ``"generate"`` (transformers' ``model.generate``, see
            :mod:`~dynaweb_env.llm.hf_generate`: same log-probabilities and stop rules, but a row's sample then
            depends on the other rows of its batch) or ``"auto"`` (the loop on a CPU, ``generate`` elsewhere:
            :func:`decoding_plan`).
        compile: On the ``generate`` path, a static KV cache with ``torch.compile``; ``None``: on CUDA only.
        compile_shapes: How a compiled call traces shapes, ``"dynamic"`` or ``"static"``; ``None``:
            :func:`~dynaweb_env.llm.call_plan.compile_shapes` (``$DYNAWEB_COMPILE_SHAPES``, else its default).

    Example:
        >>> backend = TransformersBackend("tiny-random")
        >>> [gen] = backend.generate([[{"role": "user", "content": "Hi"}]], SamplingParams(max_new_tokens=4))
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Any = "smollm2-135m",
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        model_name: str | None = None,
        share_prefix: bool = True,
        decoding: str = "auto",
        compile: bool | None = None,
        compile_shapes: str | None = None,
        frozen: bool | None = None,
        keep_prompts: bool = False,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        decoding_plan(torch.device("cpu"), decoding)  # a bad choice fails before a model loads
        self.compile_shapes = compile_shapes_choice(compile_shapes)
        self.max_batch_size = max_batch_size
        self.share_prefix = share_prefix
        if isinstance(model, (str, os.PathLike)):
            self.model, self.tokenizer, self.model_name = self._load(model, tokenizer, device, dtype)
        elif isinstance(model, torch.nn.Module):
            if tokenizer is None:
                raise ValueError("a loaded model needs its tokenizer: TransformersBackend(model, tokenizer)")
            model_device = next(model.parameters()).device
            if device is not None and torch.device(device) != model_device:
                raise ValueError(f"model is on {model_device}, not on the requested device {device}")
            self.model, self.tokenizer = model, tokenizer
            config = getattr(model, "config", None)
            self.model_name = str(getattr(config, "name_or_path", "") or type(model).__name__)
        else:
            raise ValueError(f"model must be a name, a path or a loaded model, got {type(model).__name__}")
        if model_name is not None:
            self.model_name = model_name
        self.eos_token_ids = self._eos_ids()
        self.pad_token_id = self._pad_id()
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        forward_parameters = inspect.signature(base.forward).parameters
        self._logits_to_keep = "logits_to_keep" in forward_parameters
        # Later transformers 5 releases (5.24 here) name the KV cache `cache` and warn on `past_key_values`, which
        # goes in 5.40; earlier ones know only `past_key_values`.
        self._cache_keyword = "cache" if "cache" in forward_parameters else "past_key_values"
        self._lock = threading.Lock()
        #: The first chat turn's KV cache, kept between calls: only for a frozen model (by default one this backend
        #: loaded; a model passed in, such as the trainer's live policy, may change between calls).
        self.prefix_states: Any = None
        if frozen is None:
            frozen = isinstance(model, (str, os.PathLike))
        #: Prefill each prompt's rest alone (no padding computed) rather than in one padded batch: see :meth:`prefill`.
        self.prefill_rows_alone = self.device.type == "cpu"
        #: Whole prompts' KV caches, for a next turn that extends one: ``keep_prompts``, frozen, on the row path only.
        self.prompt_states: Any = None
        if share_prefix and frozen:
            from .kv_cache import PrefixStates, PromptStates

            self.prefix_states = PrefixStates()
            self.prompt_states = PromptStates() if keep_prompts and self.prefill_rows_alone else None
        #: Prompt rests prefilled one at a time so far (identical rests of one call count once).
        self.prefilled_rows = 0
        self.decoding, self.compile = decoding_plan(self.device, decoding, compile)

    @staticmethod
    def _load(reference, tokenizer, device, dtype):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..models import adapter_base, resolve_model

        path = resolve_model(reference)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        elif isinstance(dtype, str):
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise ValueError(f"unknown dtype {dtype!r}")
            dtype = getattr(torch, dtype)
        try:
            base = adapter_base(path) if isinstance(path, Path) else None
            if base is None:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False).to(device)
            else:
                model = load_merged_adapter(path, resolve_model(base), dtype).to(device)
            if tokenizer is None:
                has_tokenizer = base is None or (path / "tokenizer_config.json").is_file()
                source = path if has_tokenizer else resolve_model(base)
                tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        except OSError as error:
            raise GenerationError(
                f"cannot load model {str(reference)!r} (resolved to {str(path)!r}): {error}. No model hub is "
                "assumed reachable: use an embedded name (`python -m dynaweb_env.models list`) or a local directory."
            ) from error
        model.eval()
        return model, tokenizer, str(reference)

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        config = getattr(self.model, "generation_config", None)
        value = getattr(config, "eos_token_id", None)
        ids.update([value] if isinstance(value, int) else list(value or []))
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return frozenset(ids)

    def _pad_id(self) -> int:
        if self.tokenizer.pad_token_id is not None:
            return int(self.tokenizer.pad_token_id)
        return min(self.eos_token_ids) if self.eos_token_ids else 0

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

    def chat_prompt_ids(self, conversation: Conversation) -> list[int]:
        """Token ids of the chat template applied to ``conversation``, with the generation prompt.

        These are exactly the ``prompt_ids`` :meth:`generate` feeds the model for that conversation.
        """
        return chat_template_ids(self.tokenizer, conversation)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per chat conversation (chat template applied), in input order."""
        prompts = [self.chat_prompt_ids(conversation) for conversation in conversations]
        return self.generate_from_ids(prompts, params)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate one completion per tokenized prompt, in input order.

        Raises:
            ValueError: If a prompt is empty or holds ids outside the vocabulary.
        """
        prompts = checked_prompt_ids(prompt_ids, self.model.get_input_embeddings().num_embeddings)
        if not prompts:
            return []
        seeds = _row_seeds(params.seed, len(prompts))
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
        results: list[Generation | None] = [None] * len(prompts)
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                with torch.inference_mode():
                    for start in range(0, len(order), self.max_batch_size):
                        chunk = order[start : start + self.max_batch_size]
                        outputs = self._decode_chunk([prompts[i] for i in chunk], [seeds[i] for i in chunk], params)
                        for index, generation in zip(chunk, outputs, strict=True):
                            results[index] = generation
            finally:
                if was_training:
                    self.model.train()
        return results  # type: ignore[return-value]

    def _decode_chunk(self, prompts: list[list[int]], seeds: list[int], params: SamplingParams) -> list[Generation]:
        """One batch of at most ``max_batch_size`` prompts, through the path :func:`decoding_plan` chose."""
        if self.decoding == "loop":
            return self._decode(prompts, seeds, params)
        from .hf_generate import generate_rows

        return generate_rows(
            self.model,
            self.tokenizer,
            prompts,
            seeds[0],
            params,
            eos_ids=self.eos_token_ids,
            pad_id=self.pad_token_id,
            compile=self.compile,
            max_rows=self.max_batch_size,
            compile_shapes=self.compile_shapes,
        )

    def _decode(self, prompts: list[list[int]], seeds: list[int], params: SamplingParams) -> list[Generation]:
        device = self.device
        logits, cache, attention_mask = self.prefill(prompts)
        position_ids = attention_mask.sum(-1, keepdim=True) - 1  # of each row's last prompt token
        generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        temperature = params.temperature if params.temperature > 0 else 1.0
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finish = ["length"] * len(prompts)
        texts: list[str | None] = [None] * len(prompts)
        active = list(range(len(prompts)))  # original rows still decoding, in cache order
        for _ in range(params.max_new_tokens):
            log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
            if params.greedy:
                tokens = log_probs.argmax(dim=-1)
            else:
                tokens = _sample(log_probs.exp(), params.top_p, [generators[row] for row in active])
            chosen = log_probs.gather(-1, tokens[:, None]).squeeze(-1).tolist()
            keep: list[int] = []
            for i, (row, token) in enumerate(zip(active, tokens.tolist(), strict=True)):
                completions[row].append(token)
                logprobs[row].append(chosen[i])
                if token in self.eos_token_ids:
                    finish[row] = "stop"
                    continue
                if params.stop or params.stop_at_repeated_line:
                    text = self._cut_at_stop(completions[row], params)
                    if text is not None:
                        finish[row], texts[row] = "stop", text
                        continue
                keep.append(i)
            if not keep:
                break
            next_tokens = tokens[:, None]
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention_mask, position_ids = attention_mask[index], position_ids[index]
                next_tokens = next_tokens[index]
                active = [active[i] for i in keep]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=-1)
            position_ids = position_ids + 1
            logits = self.last_logits(next_tokens, cache, attention_mask=attention_mask, position_ids=position_ids)
        generations = []
        for row, ids in enumerate(prompts):
            text = texts[row]
            if text is None:
                text = self.tokenizer.decode(completions[row], skip_special_tokens=True)
            generations.append(Generation(text, list(ids), completions[row], logprobs[row], finish[row]))
        return generations

    def _cut_at_stop(self, completion: list[int], params: SamplingParams) -> str | None:
        return stop_text(self.tokenizer, completion, params)


__all__ = [
    "DECODINGS",
    "TransformersBackend",
    "decoding_plan",
    "sequence_seeds",
    "shared_prefix_length",
    "stop_text",
    "validate_conversation",
]
