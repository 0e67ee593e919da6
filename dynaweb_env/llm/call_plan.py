"""How :class:`~dynaweb_env.llm.ct2_backend.CT2Backend` splits a call into engine calls and prompt prefixes.

Pure functions of token ids and lengths (no engine needed), shared by both local backends:
:func:`shared_prefix_length`, the prefix a batch's prompts share; :func:`first_turn_length`, the prefix of a prompt
kept between calls; :func:`plan_groups`, which prompts of a CTranslate2 batch decode together; and
:func:`decoding_plan`, which decoding path ``TransformersBackend`` takes on a device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

#: Decoding steps :func:`plan_groups` expects of a call, whatever its token budget: the patch world model writes
#: ~48 tokens a transition (384 allowed), a judge verdict and a policy turn at most 64. The plan must not depend
#: on what earlier calls generated (a seeded call's samples depend on its grouping), so this is a constant.
#: Costed at 256 steps instead, 8 dream pages went into calls of up to four and the batched dream step took
#: 1.2x as long (``benchmarks/probes/engine_plan.py``: 48.6 / 45.1 s vs 40.1 / 36.1 s).
EXPECTED_NEW_TOKENS = 64

#: Fewest leading tokens the prompts of a batch must share before they are prefilled once for all rows.
MIN_SHARED_PREFIX = 16


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix common to all ``prompts``, leaving every prompt at least one token.

    (Each row's last prompt token must go through the model with the row's own suffix, so that its logits
    give the row's first generated token.)
    """
    if not prompts:
        return 0
    limit = min(len(ids) for ids in prompts) - 1
    first = prompts[0]
    length = 0
    while length < limit and all(ids[length] == first[length] for ids in prompts[1:]):
        length += 1
    return length


def first_turn_length(prompt: Sequence[int]) -> int:
    """Tokens of a chat prompt's first turn: up to the second occurrence of its first token (``<|im_start|>``
    in a ChatML template), or 0 when that token does not come back (one turn, or no turn markers)."""
    start = prompt[0] if prompt else None
    return next((index for index in range(1, len(prompt) - 1) if prompt[index] == start), 0)


def plan_groups(
    lengths: Sequence[int],
    max_new_tokens: int,
    max_batch_size: int,
    decode_step_cost: float = 33.0,
    row_step_cost: float = 0.55,
    expected_new_tokens: int = EXPECTED_NEW_TOKENS,
) -> list[list[int]]:
    """Split a batch of prompts into engine calls, in prompt-length order, by a cost model.

    CTranslate2 prefills the prompts of one call only up to the shortest one and feeds every longer
    prompt's remaining tokens one decoding step at a time, for the whole call. So a call costs about
    ``rows * shortest`` prefill tokens plus ``spread + new tokens`` batched decoding steps. On ~1,000-token
    prompts with 96 new tokens, the measurement in DESIGN.md (7.37 tok/s single stream, 10.31 at batch 4,
    prefill ~330 tok/s) puts one decoding step at ~100 ms, the time of ~33 prefill tokens
    (``decode_step_cost``), growing by ~55% of that per extra row (``row_step_cost``). Contiguous groups
    of the length-sorted prompts are chosen by dynamic programming to minimise the summed cost: equal
    prompts (a GRPO group) decode together; prompts tens of tokens apart are cheaper one call each.

    Args:
        expected_new_tokens: The decoding steps a call is costed at, at most ``max_new_tokens``
            (:data:`EXPECTED_NEW_TOKENS`).

    Returns:
        Groups of indices into ``lengths``; each group holds at most ``max_batch_size`` prompts.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    steps = min(max_new_tokens, expected_new_tokens)  # outputs usually end well before the budget

    def cost(first: int, last: int) -> float:  # group order[first:last]
        rows = last - first
        shortest, longest = lengths[order[first]], lengths[order[last - 1]]
        return rows * shortest + (longest - shortest + steps) * decode_step_cost * (1 + row_step_cost * (rows - 1))

    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for last in range(1, len(order) + 1):
        for first in range(max(0, last - max_batch_size), last):
            total = best[first] + cost(first, last)
            if total < best[last]:
                best[last], cut[last] = total, first
    groups, last = [], len(order)
    while last > 0:
        groups.append(order[cut[last] : last])
        last = cut[last]
    return groups[::-1]


#: How :class:`~dynaweb_env.llm.transformers_backend.TransformersBackend` may decode: ``"loop"`` (its own loop),
#: ``"generate"`` (transformers' ``model.generate``, :mod:`~dynaweb_env.llm.hf_generate`) or ``"auto"``
#: (:func:`decoding_plan`'s rule).
DECODINGS = ("auto", "loop", "generate")


def decoding_plan(device: Any, decoding: str = "auto", compile: bool | None = None) -> tuple[str, bool]:
    """How a model on ``device`` decodes: ``(decoding, compile)``. The one rule choosing between the two paths.

    On a CPU the backend's own loop (shared-prefix prefill, per-row prefill, a KV cache grown in place) is what
    the CPU benchmarks measured, and ``torch.compile`` does not pay there; on an accelerator, transformers'
    ``generate`` with a static cache and ``torch.compile`` (CUDA graphs) keeps the device busy where the loop's
    per-token Python and host syncs starve it.

    Args:
        device: Where the model's weights are (a ``torch.device``).
        decoding: One of :data:`DECODINGS`; ``"auto"`` applies the rule above.
        compile: Static cache and ``torch.compile`` on the ``generate`` path; ``None``: on CUDA only.

    Raises:
        ValueError: If ``decoding`` is not one of :data:`DECODINGS`.
    """
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {DECODINGS}, got {decoding!r}")
    if decoding == "auto":
        decoding = "loop" if device.type == "cpu" else "generate"
    if compile is None:
        compile = device.type == "cuda"
    return decoding, bool(compile) and decoding == "generate"


#: How a compiled ``generate`` traces its shapes: ``"dynamic"`` (one graph per model for every batch size and cache
#: length; CUDA graphs are still recorded per shape) or ``"static"`` (one graph per shape, each compiled anew).
COMPILE_SHAPES = ("dynamic", "static")
#: The default, by the rule of ``benchmarks/gpu/choose.py`` fixed before measuring (dynamic unless it decodes the
#: world model's batch more than 1.25x slower, warm). On an H200 (``benchmarks/results/gpu/nvidia_h200.json``):
#: 8 world-model prompts batched at 695.7 tok/s static, 574.3 dynamic (1.21x), and a default training update
#: alike either way (21.3 s static, 20.6-26.7 s dynamic); a static graph is compiled anew for each (batch size,
#: cache length) pair a run meets, 20-60 s each on an H100, a dynamic one once per model.
DEFAULT_COMPILE_SHAPES = "dynamic"
#: The environment variable that overrides :func:`compile_shapes`'s default (for a whole training run).
COMPILE_SHAPES_ENV = "DYNAWEB_COMPILE_SHAPES"


def compile_shapes(shapes: str | None = None) -> str:
    """How a compiled call traces its shapes (:data:`COMPILE_SHAPES`): ``shapes`` if given, else
    ``$DYNAWEB_COMPILE_SHAPES``, else :data:`DEFAULT_COMPILE_SHAPES`.

    Raises:
        ValueError: If the choice is not one of :data:`COMPILE_SHAPES`.
    """
    choice = shapes or os.environ.get(COMPILE_SHAPES_ENV) or DEFAULT_COMPILE_SHAPES
    if choice not in COMPILE_SHAPES:
        raise ValueError(f"compile shapes must be one of {COMPILE_SHAPES}, got {choice!r} (${COMPILE_SHAPES_ENV})")
    return choice


__all__ = [
    "COMPILE_SHAPES",
    "COMPILE_SHAPES_ENV",
    "DEFAULT_COMPILE_SHAPES",
    "DECODINGS",
    "EXPECTED_NEW_TOKENS",
    "MIN_SHARED_PREFIX",
    "compile_shapes",
    "decoding_plan",
    "first_turn_length",
    "plan_groups",
    "shared_prefix_length",
]
