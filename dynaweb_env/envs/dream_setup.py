"""How a dream env is set up: its arguments checked, its world model named, its start states chosen.

Shared by :class:`~dynaweb_env.envs.dream.DreamWebEnv` and
:class:`~dynaweb_env.envs.dream_vector.DreamWebVectorEnv`, so the two envs accept the same
arguments and start from the same pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..data.start_states import StartState, load_start_states, sample_start_state
from ..llm.base import GenerationBackend
from ..world_model.model import WebWorldModel


def validate_dream_kwargs(
    dream_length: int, max_new_tokens: int, judge_max_new_tokens: int, temperature: float, max_axtree_chars: int
) -> None:
    if isinstance(dream_length, bool) or not isinstance(dream_length, int) or dream_length < 1:
        raise ValueError(f"dream_length must be a positive integer, got {dream_length!r}")
    for name, value in (("max_new_tokens", max_new_tokens), ("judge_max_new_tokens", judge_max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"world_model_temperature must be >= 0, got {temperature!r}")
    if isinstance(max_axtree_chars, bool) or not isinstance(max_axtree_chars, int) or max_axtree_chars < 0:
        raise ValueError(f"max_axtree_chars must be a non-negative integer (0: no limit), got {max_axtree_chars!r}")


def resolve_world_model(
    world_model: str | dict | GenerationBackend | WebWorldModel | None, output_mode: str | None
) -> tuple[str | dict | GenerationBackend | WebWorldModel, str]:
    """The world model and output mode a dream env uses, given what the user named (``None``: not named).

    Neither named: the shipped tree-mode world model. Only the mode: the shipped world model of that
    mode. A trained world model (shipped adapter, ``dynaweb-train-wm`` output directory, ready
    :class:`WebWorldModel`) carries its own mode; naming another one is a ``ValueError`` (the model
    would be read in a format it does not write).
    """
    from ..models import DEFAULT_WORLD_MODELS, world_model_output_mode
    from ..world_model.model import OUTPUT_MODES

    if output_mode is not None and output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {sorted(OUTPUT_MODES)}, got {output_mode!r}")
    if isinstance(world_model, WebWorldModel):
        own_mode = world_model.output_mode
    else:
        own_mode = world_model_output_mode(world_model)
    if own_mode is not None and output_mode is not None and own_mode != output_mode:
        raise ValueError(f"world model {world_model!r} writes output_mode={own_mode!r}, not {output_mode!r}")
    mode = own_mode or output_mode or "tree"
    return (DEFAULT_WORLD_MODELS[mode] if world_model is None else world_model), mode


def load_task_start_states(start_states: str | None, tasks: Sequence[str] | None, include_intermediate: bool):
    """Load start states and keep those of ``tasks`` (``ValueError`` naming unknown tasks)."""
    if start_states is not None and not isinstance(start_states, (str, Path)):
        raise ValueError(f"start_states must be a path or None, got {type(start_states).__name__}")
    states = load_start_states(start_states, include_intermediate=include_intermediate)
    if tasks is None:
        return states
    if isinstance(tasks, str):
        tasks = [tasks]
    known = {state.task_id for state in states}
    unknown = sorted(set(tasks) - known)
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; the start states cover {sorted(known)}")
    return [state for state in states if state.task_id in set(tasks)]


def choose_start_state(states: Sequence[StartState], rng: np.random.Generator, options: dict | None) -> StartState:
    """The start state for a reset: pinned by ``options`` or sampled with ``rng``.

    ``options["start_state"]`` (a :class:`StartState` or its dict) is used as is;
    ``options["task"]`` (with optional ``"task_seed"`` and ``"step_index"``, default 0 when a seed is
    given) picks among the loaded states. Unknown option values raise ``ValueError``.
    """
    options = options or {}
    if options.get("start_state") is not None:
        pinned = options["start_state"]
        if isinstance(pinned, StartState):
            return pinned
        if isinstance(pinned, dict):
            return StartState.from_dict(pinned)
        raise ValueError(f"options['start_state'] must be a StartState or dict, got {type(pinned).__name__}")
    candidates = list(states)
    if options.get("task") is not None:
        candidates = [state for state in candidates if state.task_id == options["task"]]
        if not candidates:
            raise ValueError(f"no start state for task {options['task']!r}")
    if options.get("task_seed") is not None:
        step_index = options.get("step_index", 0)
        candidates = [s for s in candidates if s.task_seed == options["task_seed"] and s.step_index == step_index]
        if not candidates:
            raise ValueError(f"no start state with task_seed={options['task_seed']!r} and step_index={step_index}")
    return sample_start_state(candidates, rng)


__all__ = ["choose_start_state", "load_task_start_states", "resolve_world_model", "validate_dream_kwargs"]
