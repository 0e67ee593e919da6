"""Cross-thread micro-batching: concurrent ``generate`` calls become one batched call.

A host library that runs one env per thread (SkyRL's env thread pool, GEM's async vector env, an
OpenEnv server with several sessions) makes one single-prompt model call per env and step, where
``DreamWebVectorEnv`` makes one batched call. :class:`BatchingBackend` wraps a
:class:`~dynaweb_env.llm.base.GenerationBackend` so that calls arriving from several threads at about
the same time are merged into one call of the wrapped backend, and each caller gets its own
completions back.

How a batch forms (no extra thread: the caller that dispatches a batch runs it):

- Calls with the same sampling parameters (seed aside) may be merged; the world model's and the
  judge's calls, which sample differently, form separate batches.
- A batch is dispatched as soon as every *active* thread (one that called in the last
  ``active_window_s`` seconds and is still alive) is waiting, when ``max_batch_size`` conversations wait, or
  ``max_wait_s`` after its oldest call arrived. A lone thread is not delayed, except for the very
  first call (:data:`COLD_START_WAIT_S`), when threads that start together are not known yet.
- The wrapped backend runs one batch at a time; calls that arrive meanwhile wait and join the next
  batch, which is what keeps a busy model full.
- A :class:`~dynaweb_env.llm.base.GenerationError` (the model failed) reaches every caller of the
  batch; any other error (a bad prompt) makes the batch run again call by call, so it reaches only
  the caller that caused it.

Seeds: a call that is batched alone keeps its seed, so a single-threaded env is reproducible as
before. A merged batch is sampled with a seed derived from all of its calls' seeds, so with
``temperature > 0`` which samples a thread gets depends on which calls shared its batch (as in a
vector env, where a sub-env's sample depends on the batch); greedy decoding is unaffected.

:func:`shared_batching_backend` returns one wrapper per backend object, so every DreamWeb env built
from the same backend spec in a process shares one queue (both dream envs use it).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .base import Conversation, Generation, GenerationBackend, GenerationError, SamplingParams

#: Longest a call waits for other threads' calls before its batch is dispatched anyway (seconds).
DEFAULT_MAX_WAIT_S = 0.05
#: A thread that called within this many seconds is expected to call again soon (seconds).
DEFAULT_ACTIVE_WINDOW_S = 2.0
#: The very first batch, when no thread is known yet, waits this long for threads that start
#: together (seconds; at most ``max_wait_s``).
COLD_START_WAIT_S = 0.02


@dataclass(eq=False)
class _Call:
    conversations: list[Conversation]
    params: SamplingParams
    thread: threading.Thread
    arrived: float
    result: list[Generation] | None = None
    error: BaseException | None = None
    done: bool = False
    key: tuple = field(init=False)

    def __post_init__(self) -> None:
        self.key = _batch_key(self.params)


def _batch_key(params: SamplingParams) -> tuple:
    """Calls whose sampling differs only in the seed can share a batch."""
    return (params.max_new_tokens, params.temperature, params.top_p, params.stop, params.stop_at_repeated_line)


def merged_seed(seeds: Sequence[int | None]) -> int | None:
    """The seed of a merged batch: the calls' common seed, else one derived from all of them (``None`` if any is)."""
    if any(seed is None for seed in seeds):
        return None
    if len(set(seeds)) == 1:
        return seeds[0]
    state = np.random.SeedSequence([int(seed) % 2**63 for seed in seeds]).generate_state(1, dtype=np.uint32)[0]
    return int(state) % (2**31 - 1)


class BatchingBackend:
    """A :class:`GenerationBackend` that merges concurrent calls from several threads into one batch.

    Args:
        backend: The backend that generates (it is called by one thread at a time).
        max_wait_s: Longest a call waits for other threads' calls to join its batch.
        max_batch_size: Dispatch at once when this many conversations wait (``None``: no limit;
            the wrapped backend splits large batches itself).
        active_window_s: How recently a thread must have called to be waited for.

    Attributes other than ``generate`` / ``generate_from_ids`` (``model_name``, ``tokenizer``, ...)
    are those of the wrapped backend.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        *,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        max_batch_size: int | None = None,
        active_window_s: float = DEFAULT_ACTIVE_WINDOW_S,
    ):
        if not callable(getattr(backend, "generate", None)):
            raise ValueError(f"expected a generation backend, got {type(backend).__name__}")
        if max_wait_s < 0 or active_window_s < 0:
            raise ValueError(f"max_wait_s and active_window_s must be >= 0, got {max_wait_s}, {active_window_s}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.backend = backend
        self.max_wait_s = max_wait_s
        self.max_batch_size = max_batch_size
        self.active_window_s = active_window_s
        self._condition = threading.Condition()
        self._pending: list[_Call] = []
        self._running = False
        self._last_seen: dict[threading.Thread, float] = {}
        self._cold = True  # no batch has run yet
        #: Sizes (in calls) of the batches run so far; for tests and benchmarks.
        self.batch_sizes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class does not define: delegate to the wrapped backend.
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per conversation, batched with other threads' concurrent calls."""
        conversations = list(conversations)
        if not conversations:
            return []
        call = _Call(conversations, params, threading.current_thread(), time.monotonic())
        with self._condition:
            self._pending.append(call)
            self._last_seen[call.thread] = call.arrived
            self._condition.notify_all()
            while not call.done:
                batch = self._take_ready_batch()
                if batch is None:
                    self._condition.wait(timeout=self._time_to_deadline())
                    continue
                self._running = True
                self._condition.release()
                try:
                    self._run(batch)
                finally:
                    self._condition.acquire()
                    self._running = False
                    now = time.monotonic()
                    for member in batch:
                        self._last_seen[member.thread] = now
                    self._condition.notify_all()
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Token-level generation, passed through unbatched (but never concurrently with a batch)."""
        with self._condition:
            while self._running:
                self._condition.wait()
            self._running = True
        try:
            return self.backend.generate_from_ids(prompt_ids, params)
        finally:
            with self._condition:
                self._running = False
                self._condition.notify_all()

    # --- batch formation (called with the condition held) ---------------------------------------

    def _take_ready_batch(self) -> list[_Call] | None:
        """Remove and return the batch to run now, or ``None`` if it should wait (or one is running)."""
        if self._running or not self._pending:
            return None
        now = time.monotonic()
        oldest = self._pending[0]
        group = [call for call in self._pending if call.key == oldest.key]
        waiting_threads = {call.thread for call in self._pending}
        recent = {t for t, seen in self._last_seen.items() if now - seen <= self.active_window_s and t.is_alive()}
        active = recent | waiting_threads
        size = sum(len(call.conversations) for call in group)
        full = self.max_batch_size is not None and size >= self.max_batch_size
        waited = now - oldest.arrived
        everyone = waiting_threads >= active and not (self._cold and waited < min(self.max_wait_s, COLD_START_WAIT_S))
        if not (everyone or full or waited >= self.max_wait_s):
            return None
        self._cold = False
        if self.max_batch_size is not None:
            group = self._fit(group)
        taken = set(map(id, group))
        self._pending = [call for call in self._pending if id(call) not in taken]
        self._forget_idle(now)
        return group

    def _fit(self, group: list[_Call]) -> list[_Call]:
        # The oldest call always goes, even if it alone exceeds max_batch_size.
        fitted, size = [], 0
        for call in group:
            if fitted and size + len(call.conversations) > self.max_batch_size:  # type: ignore[operator]
                break
            fitted.append(call)
            size += len(call.conversations)
        return fitted

    def _time_to_deadline(self) -> float | None:
        if self._running or not self._pending:
            return None  # woken by notify when a batch ends or a call arrives
        wait = min(self.max_wait_s, COLD_START_WAIT_S) if self._cold else self.max_wait_s
        return max(0.0, self._pending[0].arrived + wait - time.monotonic())

    def _forget_idle(self, now: float) -> None:
        idle = [t for t, seen in self._last_seen.items() if now - seen > self.active_window_s or not t.is_alive()]
        for thread in idle:
            del self._last_seen[thread]

    # --- running a batch (called without the condition) -----------------------------------------

    def _run(self, batch: list[_Call]) -> None:
        try:
            self._generate(batch)
        except GenerationError as error:  # the model failed (server down, timeout): every caller sees it
            for call in batch:
                call.error, call.done = error, True
        except Exception as error:
            if len(batch) == 1:
                batch[0].error, batch[0].done = error, True
            else:  # bad input somewhere: each call alone, so the error reaches only its own caller
                for call in batch:
                    self._run([call])
        except BaseException as error:  # KeyboardInterrupt: re-raised in the thread that ran the batch
            for call in batch:
                call.error = GenerationError(f"the batch was interrupted ({type(error).__name__})")
                call.done = True
            raise
        else:
            self.batch_sizes.append(len(batch))

    def _generate(self, batch: list[_Call]) -> None:
        conversations = [conversation for call in batch for conversation in call.conversations]
        params = batch[0].params
        if len(batch) > 1:
            params = replace(params, seed=merged_seed([call.params.seed for call in batch]))
        generations = self.backend.generate(conversations, params)
        if len(generations) != len(conversations):
            raise GenerationError(
                f"{type(self.backend).__name__} returned {len(generations)} completions for "
                f"{len(conversations)} conversations"
            )
        start = 0
        for call in batch:
            call.result = generations[start : start + len(call.conversations)]
            call.done = True
            start += len(call.conversations)

    def __repr__(self) -> str:
        return f"BatchingBackend({self.backend!r})"


# Keyed by id(backend) and holding the wrappers weakly: a wrapper keeps its backend alive, so an id
# cannot be reused while its entry exists, and the entry goes when the last env drops the wrapper.
_shared: weakref.WeakValueDictionary[int, BatchingBackend] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_batching_backend(backend: GenerationBackend) -> BatchingBackend:
    """The process-wide :class:`BatchingBackend` of ``backend`` (created on first use).

    Every caller holding the same backend object gets the same wrapper, hence one queue; a backend
    that is already a ``BatchingBackend`` is returned as is.
    """
    if isinstance(backend, BatchingBackend):
        return backend
    with _shared_lock:
        wrapper = _shared.get(id(backend))
        if wrapper is None:
            wrapper = BatchingBackend(backend)
            _shared[id(backend)] = wrapper
        return wrapper


__all__ = [
    "BatchingBackend",
    "COLD_START_WAIT_S",
    "DEFAULT_ACTIVE_WINDOW_S",
    "DEFAULT_MAX_WAIT_S",
    "merged_seed",
    "shared_batching_backend",
]
