"""One model, two engines: CTranslate2 for one prompt at a time, transformers for batches.

On a CPU the two engines are fast at different call shapes (``benchmarks/probes/engine_call_shapes.py``,
``benchmarks/results/engine/engine_call_shapes.json``, the default world model's prompts on one core):

- **One prompt**: CTranslate2 decodes without per-token Python overhead and keeps the system prompt
  between calls; 8 dream pages one at a time take 0.81x of transformers' time (28.4 s vs 35.1 s).
- **A batch**: CTranslate2 prefills a batch only up to its shortest prompt and feeds every longer
  prompt's remaining tokens one decoding step at a time.
  :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` prefills the shared prefix once
  and each prompt's rest alone, then decodes all rows together; it is the faster at every batch of
  2 to 8 pages, e.g. 8 pages of 8 tasks in 0.85x of the engine's time (18.5 s vs 21.8 s) and a GSPO
  group of 8 in 0.47x (7.0 s vs 14.8 s).

:class:`RoutedBackend` serves one model with whichever fits the call, loading each engine on first
use and never holding both: single prompts go to the engine until a batch arrives; from then on
everything goes to transformers and the engine's weights are freed. A process that steps one env keeps
the engine for good; a vector env (or a host library's threads, batched by
:mod:`~dynaweb_env.llm.batching`) switches at its first batched step and keeps one model in memory.

On a CPU that multiplies bfloat16 natively (AVX-512 BF16 or AMX) the transformers copy holds bfloat16 weights
(:func:`batch_dtype`): a batch's decoding steps read every weight each step, and on the 2-core CPU a step of 8
rows took 57 ms in bfloat16 against 102 ms in float32, with the same fidelity on held-out transitions. With
float32 weights on both (``?dtype=float32``) greedy decoding gives the same tokens on both engines
(``benchmarks/engine_fidelity.py``). Seeded sampling differs between the engines, so a sampled dream depends on
which engine served it, as it already depends on the batch it was drawn in; each engine is reproducible on its own.

Bare shipped-adapter names resolve to this backend where CTranslate2 is installed (spec ``auto:<ref>``;
``ct2:<ref>`` and ``transformers:<ref>`` pin one engine; see :mod:`dynaweb_env.llm`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .base import Conversation, Generation, GenerationBackend, SamplingParams

#: Prompts in a call from which transformers serves it, and every call after it (measured: see the module docstring).
BATCH_ROWS = 2
#: Constructor options that only one of the engines takes.
ENGINE_ONLY = ("quantization", "threads", "workers")
TRANSFORMERS_ONLY = ("dtype", "share_prefix", "decoding", "compile", "compile_shapes", "frozen")


def batch_dtype(device: Any = None) -> str | None:
    """The weights' dtype of the batches' transformers copy: ``"bfloat16"`` on a CPU that multiplies bfloat16
    natively (AVX-512 BF16 or AMX), else ``None`` (transformers' own default: float32 on a CPU, bfloat16 on CUDA).

    Measured on 202 held-out transitions of the 24 tasks, 8 to a batch: strict F1 0.923 (bfloat16) vs 0.909
    (float32) for the default world model (``engine/world_model_all_bf16_batched.json``), 0.891 vs 0.886 for the
    training presets' (``engine/world_model_bf16_batched.json``), in 0.59x the time; the judge gave the same
    verdict on all 186 of its held-out cases (``judge/judge_bf16_batched.json``). Batched decoding is bound by
    reading the weights, which bfloat16 halves. A spec's ``?dtype=float32`` keeps float32.
    """
    import torch

    from .base import cpu_supports_bf16

    on_cpu = torch.device(device).type == "cpu" if device is not None else not torch.cuda.is_available()
    return "bfloat16" if on_cpu and cpu_supports_bf16() else None


class RoutedBackend:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` that serves one model on the engine its calls' shape favours.

    Args:
        model: The model reference both engines load: a shipped adapter name, an embedded model name or a
            local checkpoint or adapter directory.
        batch_rows: Prompts in a call from which it goes to transformers (and the engine's weights are freed).
        **kwargs: Passed to both engines' constructors (e.g. ``max_batch_size``).

    Example:
        >>> backend = RoutedBackend("smollm2-135m-judge-dagger")
        >>> backend.engine  # nothing loaded yet
        >>> [one] = backend.generate([[{"role": "user", "content": "Hi"}]], SamplingParams(max_new_tokens=4))
        >>> backend.engine
        'ct2'
    """

    def __init__(self, model: str, *, batch_rows: int = BATCH_ROWS, **kwargs: Any) -> None:
        if batch_rows < 2:
            raise ValueError(f"batch_rows must be >= 2, got {batch_rows}")
        self.model = model
        self.model_name = str(model)
        self.batch_rows = batch_rows
        self.max_batch_size = kwargs.get("max_batch_size")
        self._kwargs = kwargs
        self._lock = threading.Lock()
        self._backend: GenerationBackend | None = None
        #: The engine serving now: ``None`` (nothing loaded), ``"ct2"`` or ``"transformers"``.
        self.engine: str | None = None

    def _serving(self, rows: int) -> GenerationBackend:
        """The backend for a call of ``rows`` prompts, switching to transformers for good at the first batch."""
        with self._lock:
            if rows >= self.batch_rows and self.engine != "transformers":
                from .transformers_backend import TransformersBackend

                options = {key: value for key, value in self._kwargs.items() if key not in ENGINE_ONLY}
                options.setdefault("dtype", batch_dtype(options.get("device")))
                if self._backend is not None:  # free the engine's weights before loading the other copy
                    self._backend.unload()
                self._backend, self.engine = TransformersBackend(self.model, **options), "transformers"
            elif self._backend is None:
                from .ct2_backend import CT2Backend

                options = {key: value for key, value in self._kwargs.items() if key not in TRANSFORMERS_ONLY}
                self._backend, self.engine = CT2Backend(self.model, **options), "ct2"
            return self._backend

    @property
    def tokenizer(self) -> Any:
        """The serving engine's tokenizer (both engines load the model's own)."""
        return (self._backend or self._serving(1)).tokenizer

    def chat_prompt_ids(self, conversation: Conversation) -> list[int]:
        """Token ids of the chat template applied to ``conversation``, with the generation prompt."""
        return (self._backend or self._serving(1)).chat_prompt_ids(conversation)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per chat conversation, in input order, on the engine the call's size favours."""
        return self._serving(len(conversations)).generate(conversations, params)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate one completion per tokenized prompt, in input order, on the engine the call's size favours."""
        return self._serving(len(prompt_ids)).generate_from_ids(prompt_ids, params)

    def __repr__(self) -> str:
        return f"RoutedBackend({self.model_name!r}, engine={self.engine!r})"
