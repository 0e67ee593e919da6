"""Batched CPU generation with CTranslate2, a purpose-built inference engine (``pip install dynaweb[engine]``).

CTranslate2 runs a converted copy of a transformers checkpoint without per-token Python overhead. In
float32 (the default) it gives :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`'s greedy
tokens and is faster one prompt at a time; int8 weights (``quantization="int8"``, the policy's rollouts
with ``--use-engine``) are faster still but change outputs (``benchmarks/engine_fidelity.py``,
``benchmarks/engine_throughput.py``). :func:`~dynaweb_env.llm.ct2_convert.convert_model` converts a loaded model;
:func:`dynaweb_env.llm.ct2_convert.prepare_engine_model` converts a named or local model once into the cache.

ctranslate2 is imported only when a backend is built or a model converted, so the rest of the project
runs without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import (
    Conversation,
    Generation,
    GenerationError,
    SamplingParams,
    chat_template_ids,
    checked_prompt_ids,
    default_threads,
    request_seeds,
)
from .call_plan import EXPECTED_NEW_TOKENS, first_turn_length, plan_groups, shared_prefix_length  # noqa: F401
from .ct2_convert import (
    DEFAULT_QUANTIZATION,
    ENGINE_INFO_FILE,
    import_ctranslate2,
    is_engine_dir,
    prepare_engine_model,
)
from .transformers_backend import stop_text

DEFAULT_MAX_BATCH_SIZE = 16
#: Fewest leading tokens a batch's prompts must share before they become the engine's static prompt.
MIN_STATIC_PROMPT = 16
#: Most distinct static prompts whose state the engine keeps between calls (each ~46 KB per token for a
#: 135M model): CTranslate2 never evicts a cached prompt state, so only prompts already seen are cached.
MAX_CACHED_PROMPTS = 4
# CTranslate2 keeps one random generator per worker thread, seeded from the process-wide seed when the
# thread first samples, and offers no way to re-seed it. A seeded call therefore samples on an engine
# instance that has never sampled (a fresh worker thread), under this lock.
_SEED_LOCK = threading.Lock()


@dataclass(eq=False)
class _Engine:
    """One loaded CTranslate2 ``Generator`` and the prompt prefixes whose state it keeps."""

    generator: Any
    #: Prefixes whose state the engine keeps (CTranslate2 never evicts them).
    cached: list[tuple[int, ...]] = field(default_factory=list)
    #: Prefixes seen once, most recent first.
    recent: list[tuple[int, ...]] = field(default_factory=list)
    #: Used for one seeded call and dropped: keeps every prefix it computes.
    disposable: bool = False


class CT2Backend:
    """A :class:`~dynaweb_env.llm.base.GenerationBackend` over a CTranslate2 ``Generator`` (CPU or CUDA).

    The model is converted once (:func:`dynaweb_env.llm.ct2_convert.prepare_engine_model`: LoRA adapters merged
    into their base, float32 weights unless asked otherwise) and cached. Prompts are tokenized with the model's
    own tokenizer and chat template, so ``prompt_ids`` are what the engine saw, as with
    :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend`, whose conventions it follows:

    - ``completion_ids`` end with the end-of-sequence token when one ended the sequence (``finish_reason``
      ``"stop"``); ``text`` never holds it.
    - Stop strings and ``stop_at_repeated_line`` end a sequence in the engine's decoding loop (a per-token
      callback), at the token that completes them; ``text`` is cut as the transformers backend cuts it.
    - ``logprobs``: ``log_softmax(logits / T)`` of each sampled token before top-p filtering, with ``T = 1``
      when decoding greedily. The engine reports them at its output layer's temperature, which is 1 unless
      the model was converted with ``logits_temperature`` (the trainer converts its policy at the rollout
      temperature). A call at any other temperature returns no log-probs (``[]``) rather than wrong ones.
    - Shared prompt prefixes (the world model's system prompt, a GRPO group's identical prompts) are the
      engine's static prompt: computed once per call, and kept between calls once the same prefix comes
      back (:data:`MAX_CACHED_PROMPTS`).
    - Prompts of very different lengths are split into several engine calls (:func:`plan_groups`).

    Sampling: ``seed`` makes a call reproducible: the same prompts and seed give the same texts. Unlike the
    transformers backend, a sequence's sample depends on the other prompts of its batch (the engine draws
    for the whole batch from one generator). CTranslate2 seeds a worker thread's generator once, when the
    thread first samples, and cannot re-seed it; so a seeded sampling call samples on a *spare* engine
    instance that has never sampled, and drops it afterwards. The spare is loaded in a background thread
    while each seeded call decodes (~0.5-0.8 CPU-seconds for 135M int8), and computes there the state of
    the call's shared prompt prefix too (greedily, so its random generator stays untouched): the next
    seeded call with the same prefix (the world model's system prompt) waits for neither. Greedy and
    unseeded calls run on the loaded engine.

    Args:
        model: An embedded model name, a shipped adapter name, a local checkpoint or adapter directory
            (converted once into the cache), or a directory already converted by CTranslate2.
        tokenizer: The tokenizer; default: the one saved beside the converted model.
        device: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
        quantization: Weight type of the conversion (and the engine's compute type); default: a converted
            directory's own, else ``float32`` (:data:`~dynaweb_env.llm.ct2_convert.DEFAULT_QUANTIZATION`:
            ``int8`` is faster but changes outputs).
        max_batch_size: Most sequences decoded together.
        threads: CPU threads of the engine (default: :func:`default_threads`, the CPUs this process may use, at
            most ``OMP_NUM_THREADS``).
        workers: Engine calls run side by side (CTranslate2 ``inter_threads``), each on ``threads // workers``
            threads. A greedy or unseeded call whose prompts split into several engine calls
            (:func:`plan_groups`) runs them in parallel; single-threaded workers also avoid the thread
            barriers that stall a call on an oversubscribed CPU. Each worker keeps its own prompt states.
        model_name: Name for logs; default: ``"ct2:" + model``.

    Raises:
        ImportError: If CTranslate2 is not installed.
        GenerationError: If the model cannot be converted or loaded.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = "smollm2-135m",
        tokenizer: Any = None,
        *,
        device: str | None = None,
        quantization: str | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        threads: int | None = None,
        workers: int = 1,
        model_name: str | None = None,
    ) -> None:
        self._ct2 = import_ctranslate2()
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.max_batch_size = max_batch_size
        self.device = device or "cpu"
        self.threads = threads or default_threads()
        self.model_name = model_name or f"ct2:{os.fspath(model)}"
        reference = os.fspath(model)
        directory = Path(reference).expanduser()
        try:
            if is_engine_dir(directory):
                self.path = directory
            else:
                self.path = prepare_engine_model(reference, quantization or DEFAULT_QUANTIZATION)
        except (OSError, RuntimeError) as error:
            raise GenerationError(f"cannot convert {reference!r} for CTranslate2: {error}") from error
        info_file = self.path / ENGINE_INFO_FILE
        info = json.loads(info_file.read_text()) if info_file.is_file() else {}
        # A converted directory computes in the type it was converted to (int8 would quantize float32 weights).
        self.compute_type = quantization or info.get("quantization") or DEFAULT_QUANTIZATION
        self.tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer(self.path)
        self.logits_temperature = float(info.get("logits_temperature", 1.0))
        self.eos_token_ids = self._eos_ids()
        self._lock = threading.Lock()
        self._engine = _Engine(self._new_generator(self.workers))
        # The spare engine for the next seeded call, loaded in the background once a seeded call was made.
        self._loader: ThreadPoolExecutor | None = None
        self._spare: Future[_Engine] | None = None
        self._seeded_prefix: tuple[int, ...] | None = None  # the last seeded call's shared prefix

    @staticmethod
    def _load_tokenizer(path: Path) -> Any:
        from transformers import AutoTokenizer

        if not (path / "tokenizer_config.json").is_file():
            raise GenerationError(f"{path} holds no tokenizer: pass CT2Backend(path, tokenizer=...)")
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        config_file = self.path / "generation_config.json"
        if config_file.is_file():
            value = json.loads(config_file.read_text()).get("eos_token_id")
            ids.update([value] if isinstance(value, int) else list(value or []))
        return sorted(ids)

    def _new_generator(self, workers: int = 1) -> Any:
        return self._ct2.Generator(
            str(self.path), device=self.device, compute_type=self.compute_type, inter_threads=workers,
            intra_threads=max(1, self.threads // workers),
        )  # fmt: skip

    @property
    def generator(self) -> Any:
        """The loaded CTranslate2 ``Generator`` (greedy and unseeded calls run on it)."""
        return self._engine.generator

    @property
    def _cached_prompts(self) -> list[tuple[int, ...]]:
        return self._engine.cached

    def unload(self) -> None:
        """Free the weights of every engine this backend loaded, now, whoever still holds the backend; it cannot
        generate afterwards."""
        with self._lock:
            spare, self._spare = self._spare, None
            engines = [self._engine.generator]
            if spare is not None and not spare.cancel():
                with contextlib.suppress(RuntimeError, OSError):
                    engines.append(spare.result().generator)
            for generator in engines:
                if generator is not None and generator.model_is_loaded:
                    generator.unload_model()

    def reload(self, path: str | os.PathLike[str] | None = None) -> None:
        """Load the converted model again, from ``path`` if given (the trainer's weight sync)."""
        with self._lock:
            if path is not None:
                self.path = Path(path)
                info_file = self.path / ENGINE_INFO_FILE
                info = json.loads(info_file.read_text()) if info_file.is_file() else {}
                self.logits_temperature = float(info.get("logits_temperature", 1.0))
            spare, self._spare = self._spare, None
            if spare is not None and not spare.cancel():
                spare.exception()  # it holds the old weights: let its load end, then drop it
            self._engine = _Engine(None)  # free the old weights before loading the new ones
            self._engine = _Engine(self._new_generator(self.workers))
            if self._loader is not None:
                self._load_next_spare()

    def _seeded_engine(self) -> _Engine:
        """An engine that has never sampled: the spare loaded in the background, else one loaded now.

        The caller starts the next spare's load once the call has chosen its prefix, so consecutive
        seeded calls do not wait for a load.
        """
        spare, self._spare = self._spare, None
        engine = None
        if spare is not None:
            with contextlib.suppress(RuntimeError, OSError):  # a failed background load: load here instead
                engine = spare.result()
        engine = engine or _Engine(self._new_generator(), disposable=True)
        return engine

    def _load_next_spare(self) -> None:
        """Start loading the next seeded call's engine, with the last seeded call's shared prefix computed."""
        if self._loader is None:
            self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ct2-spare")
        prefixes = [self._seeded_prefix] if self._seeded_prefix else []
        self._spare = self._loader.submit(self._load_spare, prefixes)

    def _load_spare(self, prefixes: list[tuple[int, ...]]) -> _Engine:
        """Load a fresh engine and compute the given prompt prefixes' states in it (greedily: CTranslate2
        draws random numbers only when it samples, so the engine's generator is left unseeded)."""
        engine = _Engine(self._new_generator(), disposable=True)
        for prefix in prefixes:
            tokens = self.tokenizer.convert_ids_to_tokens(list(prefix))
            engine.generator.generate_batch(  # the state after ``static_prompt`` is what the engine keeps
                [tokens[-1:]], static_prompt=tokens, cache_static_prompt=True, max_length=1, sampling_topk=1,
                include_prompt_in_result=False,
            )  # fmt: skip
            engine.cached.append(prefix)
        return engine

    def chat_prompt_ids(self, conversation: Conversation) -> list[int]:
        """Token ids of the chat template applied to ``conversation``, with the generation prompt."""
        return chat_template_ids(self.tokenizer, conversation)

    def generate(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[Generation]:
        """Generate one completion per chat conversation (chat template applied), in input order."""
        return self.generate_from_ids([self.chat_prompt_ids(conversation) for conversation in conversations], params)

    def generate_from_ids(self, prompt_ids: Sequence[list[int]], params: SamplingParams) -> list[Generation]:
        """Generate one completion per tokenized prompt, in input order.

        Raises:
            ValueError: If a prompt is empty or holds ids outside the vocabulary.
        """
        prompts = checked_prompt_ids(prompt_ids, len(self.tokenizer))
        if not prompts:
            return []
        seeded = params.seed is not None and not params.greedy
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._lock)
            engine = self._engine
            if seeded:
                engine = self._seeded_engine()
                stack.enter_context(_SEED_LOCK)
                (engine_seed,) = request_seeds(params.seed, 1)  # the seed a server would get for this call
                self._ct2.set_random_seed(engine_seed)
            results: list[Generation | None] = [None] * len(prompts)
            shared = shared_prefix_length(prompts) if len(prompts) > 1 else 0
            rests = [len(ids) - shared for ids in prompts]
            groups = plan_groups(rests, params.max_new_tokens, self.max_batch_size)
            # One prefix for the whole call: kept in the engine when several of its groups start from it.
            static, keep = self._static_prompt(engine, prompts, reused=len(groups) > 1)
            if seeded:
                self._load_next_spare()  # loads while this call decodes
            # Several engine calls run side by side on a multi-worker engine; a seeded call's engine has one
            # worker, so its calls draw from its one generator in a fixed order.
            side_by_side = self.workers > 1 and not engine.disposable
            pending = [
                (group, self._submit(engine.generator, [prompts[i] for i in group], params, static, keep, side_by_side))
                for group in groups
            ]
            for group, collect in pending:
                for index, generation in zip(group, collect(), strict=True):
                    results[index] = generation
        return results  # type: ignore[return-value]

    def _static_prompt(self, engine: _Engine, prompts: list[list[int]], reused: bool) -> tuple[list[int], bool]:
        """The prefix of every prompt to prefill once for the call, and whether the engine keeps its state.

        A single prompt's prefix is its first chat turn (:func:`first_turn_length`: the world model's or the
        judge's system prompt, the same in every call), so that a process stepping one env at a time prefills
        it once, not at every step. A prefix whose state the engine already holds costs nothing to prefill,
        but the rows' rests then start there; a longer prefix shared by the whole call (a GRPO group) is
        prefilled once but may be new. The cheaper of the two is taken. A new prefix is kept when several
        engine calls of this call start from it (``reused``) or when it comes back in a later call, and at
        most :data:`MAX_CACHED_PROMPTS` are: the engine never evicts a kept state. A disposable engine (a seeded
        call's) keeps what it computes, since its cache goes with it.
        """
        shared = shared_prefix_length(prompts) if len(prompts) > 1 else first_turn_length(prompts[0])
        shared = shared if shared >= MIN_STATIC_PROMPT else 0
        if engine.disposable:
            # A seeded call splits its prompts where they part, whatever the engine holds, so that the
            # numbers (hence the samples) depend on the call alone; its spare computed that prefix if the
            # previous seeded call had the same one.
            self._seeded_prefix = tuple(prompts[0][:shared]) if shared else None
            return list(prompts[0][:shared]), bool(shared)
        known = [
            prefix
            for prefix in engine.cached
            if all(len(ids) > len(prefix) and tuple(ids[: len(prefix)]) == prefix for ids in prompts)
        ]
        if known:
            prefix = max(known, key=len)
            if len(prompts) * (shared - len(prefix)) <= shared:  # rests from the kept state cost less
                return list(prefix), True
        if not shared:
            return [], False
        prefix = tuple(prompts[0][:shared])
        keep = (reused or prefix in engine.recent) and len(engine.cached) < MAX_CACHED_PROMPTS
        if keep:
            engine.cached.append(prefix)
        else:
            engine.recent = [prefix, *engine.recent[:15]]
        return list(prefix), keep

    def _decode(
        self, generator: Any, prompts: list[list[int]], params: SamplingParams, static: list[int], cache: bool
    ) -> list[Generation]:
        return self._submit(generator, prompts, params, static, cache, asynchronous=False)()

    def _decode_one_token_prompts_apart(
        self, generator: Any, prompts: list[list[int]], params: SamplingParams
    ) -> Callable[[], list[Generation]]:
        """Decode the one-token prompts and the longer ones in two calls (see ``_submit``), in the callers' order."""
        short = [row for row, ids in enumerate(prompts) if len(ids) == 1]
        rest = [row for row in range(len(prompts)) if len(prompts[row]) > 1]
        outputs = dict(zip(short, self._decode(generator, [prompts[r] for r in short], params, [], False), strict=True))
        outputs.update(zip(rest, self._decode(generator, [prompts[r] for r in rest], params, [], False), strict=True))
        return lambda: [outputs[row] for row in range(len(prompts))]

    def _generate_options(self, params: SamplingParams, on_token: Callable[[Any], bool]) -> dict[str, Any]:
        """``Generator.generate_batch`` keywords for ``params``, streaming every token to ``on_token``."""
        temperature = 1.0 if params.greedy else params.temperature / self.logits_temperature
        return {
            "max_length": params.max_new_tokens,
            "include_prompt_in_result": False,
            "end_token": self.eos_token_ids or None,
            "return_end_token": True,
            "return_scores": True,
            "callback": on_token,
            "sampling_topk": 1 if params.greedy else 0,
            "sampling_topp": 1.0 if params.greedy else params.top_p,
            "sampling_temperature": temperature,
        }

    def _generations(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        completions: list[list[int]],
        logprobs: list[list[float]],
        texts: list[str | None],
        finish: list[str],
    ) -> list[Generation]:
        """The streamed tokens of one call as :class:`Generation` s (``texts[row]`` set where a stop rule cut it)."""
        # The engine's log-probs are at its output layer's temperature: right only when that is the call's.
        exact = self.logits_temperature == (1.0 if params.greedy else params.temperature)
        generations = []
        for row, ids in enumerate(prompts):
            text = texts[row]
            if text is None:
                text = self.tokenizer.decode(completions[row], skip_special_tokens=True)
            row_logprobs = [float(value) for value in logprobs[row]] if exact else []
            generations.append(Generation(text, list(ids), completions[row], row_logprobs, finish[row]))
        return generations

    def _submit(
        self,
        generator: Any,
        prompts: list[list[int]],
        params: SamplingParams,
        static: list[int],
        cache: bool,
        asynchronous: bool,
    ) -> Callable[[], list[Generation]]:
        """Start one engine call (on any free worker if ``asynchronous``); returns what waits for its outputs."""
        rests = [len(ids) - len(static) for ids in prompts]
        if min(rests) == 1 and max(rests) > 1:
            # CTranslate2 prefills a call's prompts up to the shortest minus one token; when that is nothing,
            # it reports the longer prompts' remaining tokens as generated ones. Keep two tokens in every rest.
            if not static:
                return self._decode_one_token_prompts_apart(generator, prompts, params)
            static, cache = static[:-1], False
        skip = len(static)
        start_tokens = [self.tokenizer.convert_ids_to_tokens(ids[skip:]) for ids in prompts]
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        texts: list[str | None] = [None] * len(prompts)
        finish = ["length"] * len(prompts)
        stops = bool(params.stop or params.stop_at_repeated_line)
        eos = set(self.eos_token_ids)
        # The engine's worker thread holds this callback until its next job: it must not hold the backend, whose
        # Generator CTranslate2 cannot destroy on its own worker thread (the process aborts).
        tokenizer = self.tokenizer

        def on_token(step: Any) -> bool:
            row = step.batch_id
            completions[row].append(step.token_id)
            logprobs[row].append(step.log_prob)
            if step.token_id in eos:
                finish[row] = "stop"
                return False
            if stops and (text := stop_text(tokenizer, completions[row], params)) is not None:
                finish[row], texts[row] = "stop", text
                return True
            return False

        options = self._generate_options(params, on_token)
        if static:
            options.update(static_prompt=self.tokenizer.convert_ids_to_tokens(static), cache_static_prompt=cache)
        try:
            handles = generator.generate_batch(start_tokens, asynchronous=asynchronous, **options)
        except (RuntimeError, ValueError) as error:
            raise GenerationError(f"CTranslate2 generation failed: {error}") from error

        def collect() -> list[Generation]:
            try:
                for handle in handles if asynchronous else ():
                    handle.result()
            except (RuntimeError, ValueError) as error:
                raise GenerationError(f"CTranslate2 generation failed: {error}") from error
            return self._generations(prompts, params, completions, logprobs, texts, finish)

        return collect


__all__ = ["CT2Backend", "plan_groups"]
