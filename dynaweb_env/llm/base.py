"""The generation contract shared by the world model, the judge and the policy.

Every backend (:mod:`~dynaweb_env.llm.transformers_backend`, :mod:`~dynaweb_env.llm.openai_backend`,
:mod:`~dynaweb_env.llm.vllm_backend`) implements :class:`GenerationBackend`: a *batched* call that
takes many chat conversations at once and returns one :class:`Generation` per conversation, with
token ids and per-token log-probabilities where the backend can provide them. Callers never loop
over prompts one at a time.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: A chat conversation: ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``.
Conversation = list[dict[str, str]]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one batch.

    Args:
        max_new_tokens: Most tokens generated per sequence.
        temperature: Sampling temperature; ``0`` means greedy decoding.
        top_p: Nucleus sampling mass (ignored when greedy).
        seed: Seeds the batch's sampling so that the same call gives the same texts. ``None``
            draws from the backend's running generator.
        stop: Strings that end a sequence early (the stop string is kept in the text).
        stop_at_repeated_line: End a sequence when it completes a line it already wrote (blank lines and
            surrounding whitespace aside) or writes a line that loops on itself; that line is left out of the
            text. For outputs where a repeated line is never meaningful, such as patch-mode edits, this stops a
            greedy decoding loop at its first repetition instead of at ``max_new_tokens``. A backend that cannot
            stop mid-sequence cuts the text afterwards (see :func:`cut_at_repeated_line`).
    """

    max_new_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.9
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_at_repeated_line: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


#: A line that loops on itself: a 3-40-character piece written six times in a row (kept only when the piece holds at
#: least two letters or digits, so that a password field's bullets or a rule of dashes never match). Across the
#: shipped data's 490,748 lines of real and dreamed pages it matches one line, of a degenerate dreamed page.
_LOOPING_PIECE = re.compile(r"(.{3,40}?)\1{5,}")


@functools.lru_cache(maxsize=4096)
def _loops_in_line(line: str) -> bool:
    # Cached: a decoding loop checks its whole text at every token, so each finished line is matched once.
    return any(sum(char.isalnum() for char in match.group(1)) >= 2 for match in _LOOPING_PIECE.finditer(line))


def cut_at_repeated_line(text: str) -> str | None:
    """``text`` up to the first complete line that repeats an earlier non-blank line, or up to the first line that
    loops on itself (the same piece six times in a row, e.g. ``"naledi, naledi, ..."``); ``None`` if none does.

    Example:
        >>> cut_at_repeated_line("a\nb\na\nc")
        'a\nb\n'
        >>> cut_at_repeated_line("a\nText 'ab, ab, ab, ab, ab, ab, ab")
        'a\n'
    """
    seen: set[str] = set()
    position = 0
    for line in text.splitlines(keepends=True):
        if _loops_in_line(line):
            return text[:position]
        if not line.endswith(("\n", "\r")):
            break  # the last line is not complete yet
        key = line.strip()
        if key in seen:
            return text[:position]
        if key:
            seen.add(key)
        position += len(line)
    return None


@dataclass
class Generation:
    """One generated completion.

    Attributes:
        text: The decoded completion (special tokens removed).
        prompt_ids: Token ids of the prompt as the model saw it (empty if the backend cannot tell).
        completion_ids: Token ids sampled (empty if the backend cannot tell).
        logprobs: Log-probability of each completion token under the sampling distribution, aligned
            with ``completion_ids`` (empty if unavailable).
        finish_reason: ``"stop"`` (end of sequence or stop string) or ``"length"`` (hit
            ``max_new_tokens``).
    """

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


@runtime_checkable
class GenerationBackend(Protocol):
    """A batched text generator.

    Implementations must be safe to call with any number of conversations (including one) and
    must return results in input order.
    """

    #: Human-readable name of the model, for logs and results.
    model_name: str

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion for each chat conversation, in one batched call."""
        ...

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate from already-tokenized prompts (token-in, token-out; used by the trainer)."""
        ...


class GenerationError(RuntimeError):
    """A backend could not produce completions (server down, model missing, out of memory).

    Every failure of a backend call reaches its caller as this type (or a subclass), so the world
    model, the judge and the dream envs can contain it without catching programming errors.
    """


class BackendUnavailableError(GenerationError):
    """A server could not be reached or did not answer in time, after the allowed retries."""


class BackendResponseError(GenerationError):
    """A server answered, but not with usable completions: an HTTP error status, a body that is not
    JSON or not a completion object, or a field of the wrong type (e.g. a non-numeric logprob).

    Attributes:
        status: The HTTP status code (``None`` when the status was fine but the body was not).
    """

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def validate_conversation(conversation: Any) -> Conversation:
    """Check that ``conversation`` is a non-empty list of ``{"role": str, "content": str}`` dicts.

    Raises:
        ValueError: Naming the first malformed message.
    """
    if not isinstance(conversation, (list, tuple)) or not conversation:
        raise ValueError(f"a conversation must be a non-empty list of messages, got {type(conversation).__name__}")
    for index, message in enumerate(conversation):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} must be a dict with a string 'role', got {message!r:.80}")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"message {index} must have a string 'content', got {message.get('content')!r:.80}")
    return list(conversation)


def chat_template_ids(tokenizer: Any, conversation: Conversation) -> list[int]:
    """Token ids of ``tokenizer``'s chat template applied to ``conversation``, with the generation prompt.

    The rendered template already holds every special token, so none are added (that would duplicate BOS).
    Every local backend tokenizes chats this way, so the same conversation is the same ids in each.
    """
    text = tokenizer.apply_chat_template(
        validate_conversation(conversation), add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def checked_prompt_ids(prompt_ids: Sequence[Sequence[int]], vocab_size: int) -> list[list[int]]:
    """``prompt_ids`` as lists of ints, checked before they reach a model.

    Raises:
        ValueError: If a prompt is empty or holds ids outside ``[0, vocab_size)``.
    """
    prompts = [list(map(int, ids)) for ids in prompt_ids]
    for index, ids in enumerate(prompts):
        if not ids:
            raise ValueError(f"prompt {index} is empty")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"prompt {index} has token ids outside [0, {vocab_size})")
    return prompts


def sequence_seeds(seed: int, count: int, *, bits: int = 62) -> list[int]:
    """Derive one seed per sequence from ``(seed, position)``, each below ``2**bits``.

    Every backend seeds sequence ``i`` of a call this way: identical prompts in one batch (a GRPO
    group) get different samples, a repeated call gets the same ones, and a sequence's sample does
    not depend on how the batch is split.
    """
    base = int(seed) % 2**63
    states = (np.random.SeedSequence([base, row]).generate_state(1, dtype=np.uint64)[0] for row in range(count))
    return [int(state) % 2**bits for state in states]


def request_seeds(seed: int | None, count: int) -> list[int | None]:
    """The seeds of ``count`` requests to a server or engine: :func:`sequence_seeds` in 31 bits, what every server
    accepts; ``None`` for each when ``seed`` is ``None`` (unseeded sampling)."""
    return [None] * count if seed is None else sequence_seeds(seed, count, bits=31)


def default_threads() -> int:
    """A CPU engine's threads when none are given: the CPUs this process may use (``taskset``), at most
    ``OMP_NUM_THREADS`` where set. More threads than idle cores stall at every barrier (docs/world-model.md)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux: the CPUs this process may use
    count = len(affinity(0)) if affinity else os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "").strip()
    return max(1, min(count, int(limit))) if limit.isdigit() and int(limit) > 0 else count


def cpu_supports_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX-512 BF16 or AMX): where it does, bf16 autocast
    speeds training and bfloat16 weights speed batched generation (docs/world-model.md)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, check, lambda: False)()) for check in checks)


__all__ = [
    "Conversation",
    "SamplingParams",
    "Generation",
    "GenerationBackend",
    "GenerationError",
    "BackendUnavailableError",
    "BackendResponseError",
    "cpu_supports_bf16",
    "cut_at_repeated_line",
    "default_threads",
    "request_seeds",
    "sequence_seeds",
    "validate_conversation",
]
