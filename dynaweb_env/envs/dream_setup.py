"""How a dream env is set up: its arguments checked, its world model named, its start states chosen.

Shared by :class:`~dynaweb_env.envs.dream.DreamWebEnv` and
:class:`~dynaweb_env.envs.dream_vector.DreamWebVectorEnv`: both take the keyword arguments of
:class:`DreamSettings` (:func:`takes_dream_settings`), so they accept the same arguments and start
from the same pages.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..browsergym_actions import check_action_set
from ..data.start_states import StartState, load_start_states, sample_start_state
from ..llm.base import GenerationBackend, SamplingParams
from ..world_model.judge import TrajectoryJudge
from ..world_model.model import DEFAULT_MAX_AXTREE_CHARS, WebWorldModel
from .dream_episode import generation_budgets
from .dream_guards import RewardGuards, judge_threshold_for, with_retries, with_votes

if TYPE_CHECKING:
    from .dream import DreamDynamics

#: The ``judge`` that makes the world model's own backend judge (the paper's one-LLM setting), in its prompt style.
WORLD_MODEL_JUDGE = "world_model"
#: The render modes of both dream envs.
RENDER_MODES = ("ansi",)


@dataclasses.dataclass(frozen=True)
class DreamSettings:
    """The keyword arguments of ``DreamWeb-v0``, single (``gym.make``) and vectorized (``gym.make_vec``).

    Args:
        world_model: Backend spec (string or dict) for :func:`dynaweb_env.llm.make_backend`, a backend, or a
            ready ``WebWorldModel`` (whose own sampling then applies instead of the arguments below). Default:
            the shipped world model of ``output_mode``, and with neither named ``"smollm2-135m-wm-patch-all"``
            (:data:`~dynaweb_env.models.DEFAULT_WORLD_MODEL`: the embedded model with the LoRA adapter
            ``dynaweb-train-wm`` trained on the large and the all-tasks MiniWoB++ data);
            ``"smollm2-135m-wm-patch"`` is the one ``dynaweb-train`` dreams with, ``"smollm2-135m-wm"`` the shipped
            tree-mode one, ``"smollm2-135m"`` the same model untrained.
        judge: Backend spec, backend or ``TrajectoryJudge``. Default (``None``): the shipped trained judge
            ``"smollm2-135m-judge-dagger"`` (:data:`~dynaweb_env.models.DEFAULT_JUDGE`), prompted in its
            ``grounded`` style. ``"world_model"``: the world model's own backend judges (the paper's one-LLM
            setting).
        start_states: A trajectory JSONL file or directory; ``None`` for the shipped MiniWoB++ set (24 tasks).
        tasks: Keep only these task ids.
        dream_length: Most steps per dream (paper: up to 5).
        include_intermediate: Also start from intermediate pages of the recordings.
        world_model_temperature: World-model sampling temperature (paper: 0.7; 0 is greedy).
        max_new_tokens: Generation budget of the world model. Default: 768, or an embedded model's own
            (``tiny-random``, whose random weights never stop: 16).
        judge_max_new_tokens: Generation budget of the judge. Default: 256, or an embedded model's own.
        max_axtree_chars: Character budget of the current tree in the world-model prompt (0: no limit).
        output_mode: What the world model writes: ``"tree"`` (the paper's next tree) or ``"patch"`` (edits of
            the current tree, :mod:`dynaweb_env.world_model.patch`). Default: the named world model's own mode
            if it records one, else ``"tree"``; ``"patch"`` when no world model is named.
        reward_guards: A :class:`~dynaweb_env.envs.dream_guards.RewardGuards` or a dict of its fields, e.g.
            ``{"judge_votes": 5}`` or ``{"gate_termination": True}``. Default: only ``objective_check``;
            ``{"objective_check": False}`` is the paper's dream.
        action_set: The action grammar: ``"paper"`` (``click [13]``) or ``"browsergym"`` (BrowserGym's
            ``HighLevelActionSet`` calls, ``click('13')``: :mod:`~dynaweb_env.browsergym_actions`). Both are read
            into the same actions, so the world model and the judge see the paper's form either way.
        render_mode: ``None`` or ``"ansi"``.

    A model named by a spec is prompted in the style it was trained on (``model_prompt_style``).

    Raises:
        ValueError: If ``render_mode`` is not ``None`` or ``"ansi"``; :meth:`build` checks the rest.
    """

    world_model: str | dict | GenerationBackend | WebWorldModel | None = None
    judge: str | dict | GenerationBackend | TrajectoryJudge | None = None
    start_states: str | None = None
    tasks: list[str] | None = None
    dream_length: int = 5
    include_intermediate: bool = True
    world_model_temperature: float = 0.7
    max_new_tokens: int | None = None
    judge_max_new_tokens: int | None = None
    max_axtree_chars: int = DEFAULT_MAX_AXTREE_CHARS
    output_mode: str | None = None
    reward_guards: RewardGuards | dict | None = None
    action_set: str = "paper"
    render_mode: str | None = None

    def __post_init__(self):
        check_action_set(self.action_set)
        if self.render_mode is not None and self.render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None or one of {list(RENDER_MODES)}, got {self.render_mode!r}")

    @classmethod
    def of(cls, env: str, settings: dict[str, Any]) -> DreamSettings:
        """The settings an env named ``env`` was given (``TypeError`` naming the unknown keywords, and the known)."""
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise TypeError(f"{env} got unexpected keyword argument(s) {unknown}; it takes {known}")
        return cls(**settings)

    def build(self) -> tuple[DreamDynamics, list[StartState]]:
        """The dynamics (models built on first use: cheap) and the start states, every argument checked now.

        Raises:
            ValueError: If an argument is out of range, a spec is malformed, or a task is unknown.
        """
        states = load_task_start_states(self.start_states, self.tasks, self.include_intermediate)
        budgets = generation_budgets(self.world_model, self.judge, self.max_new_tokens, self.judge_max_new_tokens)
        dynamics = build_dynamics(
            self.world_model, self.judge, self.dream_length, self.world_model_temperature, *budgets,
            self.max_axtree_chars, self.output_mode, self.reward_guards, tasks={state.task_id for state in states},
        )  # fmt: skip
        dynamics.action_set = self.action_set
        return dynamics, states


def takes_dream_settings(init: Callable) -> Callable:
    """Show ``init(self, ..., **settings)`` with the fields of :class:`DreamSettings` as its keyword-only
    parameters (``inspect.signature``, ``help``), after its own: the one list of both dream envs' keywords."""
    own = [param for param in inspect.signature(init).parameters.values() if param.kind != param.VAR_KEYWORD]
    fields = [
        inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.type)
        for field in dataclasses.fields(DreamSettings)
    ]
    init.__signature__ = inspect.Signature(own + fields)  # type: ignore[attr-defined]
    return init


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

    Neither named: :data:`~dynaweb_env.models.DEFAULT_WORLD_MODEL` (the shipped patch-mode world model).
    Only the mode: the shipped world model of that mode. A trained world model (shipped adapter,
    ``dynaweb-train-wm`` output directory, ready :class:`WebWorldModel`) carries its own mode; naming
    another one is a ``ValueError`` (the model would be read in a format it does not write). A model that
    records no mode (a prompted one) writes the paper's next tree unless ``output_mode`` says otherwise.
    """
    from ..models import DEFAULT_WORLD_MODEL, DEFAULT_WORLD_MODELS, world_model_output_mode
    from ..world_model.model import OUTPUT_MODES

    if output_mode is not None and output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {sorted(OUTPUT_MODES)}, got {output_mode!r}")
    if world_model is None:
        mode = output_mode or world_model_output_mode(DEFAULT_WORLD_MODEL)
        return DEFAULT_WORLD_MODELS[mode], mode
    if isinstance(world_model, WebWorldModel):
        own_mode = world_model.output_mode
    else:
        own_mode = world_model_output_mode(world_model)
    if own_mode is not None and output_mode is not None and own_mode != output_mode:
        raise ValueError(f"world model {world_model!r} writes output_mode={own_mode!r}, not {output_mode!r}")
    return world_model, own_mode or output_mode or "tree"


def resolve_judge(
    judge: str | dict | GenerationBackend | TrajectoryJudge | None,
    tasks: Iterable[str] | None = None,
) -> str | dict | GenerationBackend | TrajectoryJudge | None:
    """The judge a dream env of ``tasks`` uses, given what the user named: ``None`` is the shipped trained judge of
    those tasks (:func:`~dynaweb_env.models.default_judge`: ``"smollm2-135m-judge-dagger"``, or
    ``"smollm2-135m-judge-all"`` when a task is one the first never trained on, e.g. the long tasks);
    :data:`WORLD_MODEL_JUDGE` (``"world_model"``, also spelled ``"world-model"``) gives ``None``: the world model's
    backend judges."""
    from ..models import default_judge

    if judge is None:
        return default_judge(tasks)
    if isinstance(judge, str) and judge.strip().replace("-", "_") == WORLD_MODEL_JUDGE:
        return None
    return judge


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


def build_dynamics(
    world_model: str | dict | GenerationBackend | WebWorldModel | None,
    judge: str | dict | GenerationBackend | TrajectoryJudge | None,
    dream_length: int,
    world_model_temperature: float,
    max_new_tokens: int,
    judge_max_new_tokens: int,
    max_axtree_chars: int,
    output_mode: str | None = None,
    reward_guards: RewardGuards | dict | None = None,
    tasks: Iterable[str] | None = None,
) -> DreamDynamics:
    """A :class:`DreamDynamics` whose models are built from these specs on first use (cheap to call).

    Every argument is checked now (``ValueError`` for an out-of-range value or a malformed spec), not
    at the first step; both dream envs build their dynamics here. A model named by a spec is prompted
    in the style it was trained on (:func:`~dynaweb_env.models.model_prompt_style`). ``tasks`` (the task ids
    dreamed) choose the judge when none is named (:func:`resolve_judge`).
    """
    from ..llm import parse_backend_spec  # light: no torch until a backend is built
    from ..models import model_prompt_style

    validate_dream_kwargs(dream_length, max_new_tokens, judge_max_new_tokens, world_model_temperature, max_axtree_chars)
    world_model, output_mode = resolve_world_model(world_model, output_mode)
    judge = resolve_judge(judge, tasks)
    guards = RewardGuards.parse(reward_guards)

    for spec in (world_model, judge):
        if isinstance(spec, (str, dict)):
            parse_backend_spec(spec)
        elif (
            spec is not None
            and not callable(getattr(spec, "generate", None))
            and not isinstance(spec, (WebWorldModel, TrajectoryJudge))
        ):
            raise ValueError(f"expected a backend spec, a backend or a model object, got {type(spec).__name__}")

    def backend(spec: str | dict | GenerationBackend) -> GenerationBackend:
        from ..llm import make_backend  # deferred: importing backends pulls in torch
        from ..llm.batching import shared_batching_backend

        # Shared per backend: envs stepped on several threads of one process batch their calls together.
        return shared_batching_backend(make_backend(spec) if isinstance(spec, (str, dict)) else spec)

    def make_world_model() -> WebWorldModel:
        if isinstance(world_model, WebWorldModel):
            return with_retries(world_model, guards)
        sampling = SamplingParams(temperature=world_model_temperature, top_p=0.9, max_new_tokens=max_new_tokens)
        return WebWorldModel(
            backend(world_model), sampling=sampling, max_axtree_chars=max_axtree_chars, output_mode=output_mode,
            prompt_style=model_prompt_style(world_model), invalid_retries=guards.world_model_retries,
        )  # fmt: skip

    def make_judge() -> TrajectoryJudge:
        if isinstance(judge, TrajectoryJudge):
            return with_votes(judge, guards)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=judge_max_new_tokens)
        if judge is None:  # "world_model": the world model's backend judges, in the world model's prompt style
            judge_backend, style = dynamics.world_model.backend, dynamics.world_model.prompt_style
        else:
            judge_backend, style = backend(judge), model_prompt_style(judge)
        return TrajectoryJudge(
            judge_backend, sampling=sampling, prompt_style=style, votes=guards.judge_votes,
            vote_temperature=guards.judge_vote_temperature, objective_check=guards.objective_check,
            success_threshold=judge_threshold_for(guards, judge_backend if judge is None else judge),
        )  # fmt: skip

    from .dream import DreamDynamics  # here, not at the top: dream.py imports this module

    dynamics = DreamDynamics(make_world_model, make_judge, dream_length, guards)
    return dynamics


__all__ = [
    "RENDER_MODES",
    "WORLD_MODEL_JUDGE",
    "DreamSettings",
    "build_dynamics",
    "choose_start_state",
    "load_task_start_states",
    "resolve_judge",
    "resolve_world_model",
    "takes_dream_settings",
    "validate_dream_kwargs",
]
