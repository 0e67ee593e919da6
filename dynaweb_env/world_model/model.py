"""The web world model: an LLM that predicts the next page from the current page and an action.

:class:`WebWorldModel` wraps any :class:`~dynaweb_env.llm.base.GenerationBackend`. One call to
:meth:`WebWorldModel.predict` sends *all* its requests to the backend as one batch, which is what
makes a vectorized dream env cheap: on this project's CPU a batch of 8 costs about a third of 8
single calls.

Example:
    >>> from dynaweb_env.llm import make_backend
    >>> world_model = WebWorldModel(make_backend("smollm2-135m"))
    >>> request = WorldModelRequest(goal="Click ONE.", url="file:///click.html",
    ...                             axtree="RootWebArea 'Click'\\n\\t[13] button 'ONE'", action="click [13]")
    >>> prediction = world_model.predict([request], seed=0)[0]
    >>> prediction.axtree, prediction.changes, prediction.error  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..llm.base import Conversation, Generation, GenerationBackend, GenerationError, SamplingParams
from .parsing import WorldModelPrediction, parse_world_model_output
from .patch import parse_patch_output, patch_system_prompt
from .prompts import build_world_model_messages, check_prompt_style, world_model_system_prompt

#: Default token budget of one prediction: room for a Δ description and a MiniWoB-sized tree.
#: (The paper allows 8,192 tokens with a 120B model on GPUs; the embedded CPU model cannot afford it.)
DEFAULT_MAX_NEW_TOKENS = 768
#: Default character budget of the current tree in the prompt (``truncate_axtree``).
DEFAULT_MAX_AXTREE_CHARS = 6000
#: Lowest temperature of a redraw of a malformed output (``invalid_retries``): a greedy redraw would repeat it.
RETRY_MIN_TEMPERATURE = 0.7


@dataclass(frozen=True)
class WorldModelRequest:
    """One transition to predict: the current page and the action taken on it.

    Attributes:
        goal: The task query.
        url: The current URL.
        axtree: The current accessibility tree.
        action: The action, in canonical grammar form (see :mod:`dynaweb_env.actions`).
        previous_action: The action before it (``""`` at the first step).
    """

    goal: str
    url: str
    axtree: str
    action: str
    previous_action: str = ""


#: Output mode -> parser of a generation into a prediction. "tree": the model writes the full next
#: tree (the paper's format). "patch": Δ as edits of the current tree applied in code
#: (:mod:`~dynaweb_env.world_model.patch`).
OutputParser = Callable[[Generation, WorldModelRequest], WorldModelPrediction]


def _parse_full_tree(generation: Generation, request: WorldModelRequest) -> WorldModelPrediction:
    return parse_world_model_output(generation.text, request.url, request.axtree, generation.finish_reason)


def _parse_patch(generation: Generation, request: WorldModelRequest) -> WorldModelPrediction:
    return parse_patch_output(generation.text, request.url, request.axtree, generation.finish_reason)


OUTPUT_MODES: dict[str, OutputParser] = {"tree": _parse_full_tree, "patch": _parse_patch}
#: Output mode -> its system prompt in a prompt style ("paper" default: the paper's for "tree", the paper's with
#: the format section replaced for "patch"; "compact": the output format alone, for trained models).
OUTPUT_MODE_PROMPTS: dict[str, Callable[..., str]] = {"tree": world_model_system_prompt, "patch": patch_system_prompt}


def is_clean(prediction: WorldModelPrediction) -> bool:
    """Whether an output parsed with no problem and no fallback to the current page (what ``strict_f1`` scores)."""
    return prediction.error is None and not prediction.fallback


class WebWorldModel:
    """Predicts next web states in batches with an LLM backend.

    Args:
        backend: Any :class:`~dynaweb_env.llm.base.GenerationBackend`.
        sampling: Sampling parameters of every prediction (default: the paper's temperature 0.7 and
            top-p 0.9 with :data:`DEFAULT_MAX_NEW_TOKENS`). Its ``seed`` is replaced by the ``seed``
            given to :meth:`predict`.
        max_axtree_chars: Character budget of the current tree in the prompt (``0``: no limit).
        output_mode: What the model writes and how it is read: one of :data:`OUTPUT_MODES`, ``"tree"``
            (the paper's full next tree, default) or ``"patch"`` (edits of the current tree).
        prompt_style: ``"paper"`` (default: the paper's system prompt, for prompted models) or ``"compact"``
            (for a model trained on compact prompts; :func:`~dynaweb_env.models.model_prompt_style` says which
            a trained model needs).
        invalid_retries: How many times an output that does not parse cleanly (an ``error`` or a
            ``fallback``) is drawn again, at temperature at least :data:`RETRY_MIN_TEMPERATURE`, all redraws of
            a batch in one backend call. The first clean redraw replaces it; if none is clean, the first output
            stays. ``0`` (default): never.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        sampling: SamplingParams | None = None,
        max_axtree_chars: int = DEFAULT_MAX_AXTREE_CHARS,
        output_mode: str = "tree",
        prompt_style: str = "paper",
        invalid_retries: int = 0,
    ):
        if not callable(getattr(backend, "generate", None)):
            raise ValueError(f"backend must implement GenerationBackend.generate, got {type(backend).__name__}")
        if max_axtree_chars < 0:
            raise ValueError(f"max_axtree_chars must be >= 0, got {max_axtree_chars}")
        if output_mode not in OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {sorted(OUTPUT_MODES)}, got {output_mode!r}")
        if isinstance(invalid_retries, bool) or not isinstance(invalid_retries, int) or invalid_retries < 0:
            raise ValueError(f"invalid_retries must be an integer >= 0, got {invalid_retries!r}")
        self.backend = backend
        self.invalid_retries = invalid_retries
        self.sampling = sampling or SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=DEFAULT_MAX_NEW_TOKENS)
        self.max_axtree_chars = max_axtree_chars
        self.output_mode = output_mode
        self.prompt_style = check_prompt_style(prompt_style)

    def build_messages(self, request: WorldModelRequest) -> Conversation:
        """The conversation sent to the backend for one request."""
        return build_world_model_messages(
            goal=request.goal,
            url=request.url,
            axtree=request.axtree,
            action=request.action,
            previous_action=request.previous_action,
            max_axtree_chars=self.max_axtree_chars,
            system_prompt=OUTPUT_MODE_PROMPTS[self.output_mode](self.prompt_style),
        )

    def predict(self, requests: Sequence[WorldModelRequest], seed: int | None = None) -> list[WorldModelPrediction]:
        """Predict the next state of every request with one batched backend call.

        Args:
            requests: The transitions to predict (any number; none makes no backend call).
            seed: Seeds the batch's sampling, so the same requests and seed give the same outputs.

        Returns:
            One :class:`~dynaweb_env.world_model.parsing.WorldModelPrediction` per request, in order.
            Malformed outputs are reported in ``error``, never raised.

        Raises:
            GenerationError: If the backend fails or returns a wrong number of generations.
        """
        if not requests:
            return []
        params = dataclasses.replace(self.sampling, seed=seed)
        if self.output_mode == "patch":
            # An edit written twice is never meaningful, and a small model decoding greedily tends to repeat
            # its last edit until max_new_tokens: stop at the first repetition.
            params = dataclasses.replace(params, stop_at_repeated_line=True)
        predictions = self._generate(requests, params)
        retry = dataclasses.replace(params, temperature=max(params.temperature, RETRY_MIN_TEMPERATURE))
        for attempt in range(1, self.invalid_retries + 1):
            redo = [i for i, prediction in enumerate(predictions) if not is_clean(prediction)]
            if not redo:
                break
            # Its own seed per attempt, so that a seeded batch stays reproducible and redraws differ.
            seed_of_attempt = None if seed is None else seed + 7919 * attempt
            redrawn = self._generate([requests[i] for i in redo], dataclasses.replace(retry, seed=seed_of_attempt))
            for i, prediction in zip(redo, redrawn, strict=True):
                if is_clean(prediction):
                    predictions[i] = prediction
        return predictions

    def _generate(self, requests: Sequence[WorldModelRequest], params: SamplingParams) -> list[WorldModelPrediction]:
        """One batched backend call, parsed."""
        generations = self.backend.generate([self.build_messages(request) for request in requests], params)
        if len(generations) != len(requests):
            raise GenerationError(f"backend returned {len(generations)} generations for {len(requests)} prompts")
        parse = OUTPUT_MODES[self.output_mode]
        return [parse(generation, request) for generation, request in zip(generations, requests, strict=True)]

    def predict_samples(
        self, requests: Sequence[WorldModelRequest], samples: int, seed: int | None = None
    ) -> list[list[WorldModelPrediction]]:
        """``samples`` predictions of every request, all in one backend call (MBPO-style uncertainty).

        Each request is repeated ``samples`` times in the batch, so the samples differ only by the
        sampler's draws; with a greedy ``sampling`` they all agree.

        Returns:
            Per request, its ``samples`` predictions (the first is what :meth:`predict` would return for the
            same batch position).
        """
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be a positive integer, got {samples!r}")
        flat = self.predict([request for request in requests for _ in range(samples)], seed=seed)
        return [flat[i : i + samples] for i in range(0, len(flat), samples)]

    def __repr__(self) -> str:
        name = getattr(self.backend, "model_name", type(self.backend).__name__)
        return (
            f"WebWorldModel({name!r}, output_mode={self.output_mode!r}, prompt_style={self.prompt_style!r}, "
            f"invalid_retries={self.invalid_retries})"
        )


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_MAX_AXTREE_CHARS",
    "OUTPUT_MODES",
    "OUTPUT_MODE_PROMPTS",
    "WebWorldModel",
    "WorldModelRequest",
    "RETRY_MIN_TEMPERATURE",
    "is_clean",
]
