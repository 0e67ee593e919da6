"""Dream start states: real pages, taken from recorded trajectories, where a dream begins.

The paper samples dream start states from real trajectories, "initial *and intermediate*" states.
:func:`start_states_from_trajectories` turns trajectory records (see :mod:`dynaweb_env.data.schema`)
into :class:`StartState` objects: step 0 of every trajectory, plus (with ``include_intermediate``)
every later step at which the recorded agent took an ordinary action. A final page (one whose action
is ``stop`` or empty) is not a start state: the recorded episode was already over there.

:func:`load_start_states` with no path reads the shipped set: the scripted experts' trajectories of the large
dataset's train split (``dynaweb_env/data/miniwob-large/train/expert.jsonl.xz``: all 24 MiniWoB++ tasks the shipped
world model and judge learned, recorded on real pages). Loaded start states are kept per process (keyed by the
file, its size and modification time, and the arguments), so building many envs reads each file once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..observation import action_target
from . import urls
from .io import PathLike, read_trajectories
from .schema import SchemaError, Trajectory
from .shipped import LARGE_DATA_DIR

#: The shipped start-state set (a file of trajectory records inside the package, relative to the data directory):
#: the experts of the large dataset's train split, every task the shipped world model learned.
BUILTIN_START_STATES = "miniwob-large/train/expert.jsonl.xz"


@dataclass
class StartState:
    """A real page a dream starts from.

    Attributes:
        task_id: The task, e.g. ``"miniwob.click-button"``.
        goal: The task query shown to the policy.
        url: The page's URL.
        axtree: The page's accessibility tree.
        trajectory_id: The recorded trajectory it comes from.
        step_index: Its index in that trajectory's steps (``0``: the initial page).
        history: The recorded actions taken before it (empty for an initial page).
        history_targets: For each of ``history``, the tree line of the element it acted on in the page it was
            taken on (``""`` if none): the judge reads them with the actions. Empty when not recorded.
        task_seed: The task seed of the recording (``metadata["seed"]``), if known.
    """

    task_id: str
    goal: str
    url: str
    axtree: str
    trajectory_id: str = ""
    step_index: int = 0
    history: list[str] = field(default_factory=list)
    task_seed: int | None = None
    history_targets: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> StartState:
        """Validate and build a start state; raises :class:`~dynaweb_env.data.schema.SchemaError`."""
        if not isinstance(record, dict):
            raise SchemaError(f"start state must be an object, got {type(record).__name__}")
        for key in ("task_id", "goal", "url", "axtree"):
            if not isinstance(record.get(key), str):
                raise SchemaError(f"start state field {key!r} must be a string")
        unknown = set(record) - set(cls.__dataclass_fields__)
        if unknown:
            raise SchemaError(f"unknown start state field(s): {sorted(unknown)}")
        history = record.get("history", [])
        if not isinstance(history, list) or not all(isinstance(action, str) for action in history):
            raise SchemaError("start state field 'history' must be a list of strings")
        targets = record.get("history_targets", [])
        if not isinstance(targets, list) or not all(isinstance(target, str) for target in targets):
            raise SchemaError("start state field 'history_targets' must be a list of strings")
        if targets and len(targets) != len(history):
            raise SchemaError(f"start state has {len(targets)} history_targets for {len(history)} history actions")
        step_index = record.get("step_index", 0)
        if isinstance(step_index, bool) or not isinstance(step_index, int) or step_index < 0:
            raise SchemaError("start state field 'step_index' must be a non-negative integer")
        task_seed = record.get("task_seed")
        if task_seed is not None and (isinstance(task_seed, bool) or not isinstance(task_seed, int)):
            raise SchemaError("start state field 'task_seed' must be an integer or null")
        return cls(
            task_id=record["task_id"],
            goal=record["goal"],
            url=record["url"],
            axtree=record["axtree"],
            trajectory_id=str(record.get("trajectory_id", "")),
            step_index=step_index,
            history=list(history),
            task_seed=task_seed,
            history_targets=list(targets),
        )


def start_states_from_trajectories(
    trajectories: Iterable[Trajectory],
    include_intermediate: bool = True,
    split: str | None = None,
) -> list[StartState]:
    """Extract start states from trajectories.

    Args:
        trajectories: Trajectory records.
        include_intermediate: Also use intermediate pages, not only each trajectory's first page.
        split: Keep only trajectories whose ``metadata["split"]`` equals this (``None``: all).

    Returns:
        The start states, in trajectory and step order.
    """
    states: list[StartState] = []
    for trajectory in trajectories:
        if split is not None and trajectory.metadata.get("split") != split:
            continue
        seed = trajectory.metadata.get("seed")
        task_seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
        history: list[str] = []
        targets: list[str] = []
        for index, step in enumerate(trajectory.steps):
            is_final = _is_final_action(step.action)
            if index == 0 or (include_intermediate and not is_final):
                states.append(
                    StartState(
                        task_id=trajectory.task_id,
                        goal=trajectory.goal,
                        url=step.url,
                        axtree=step.axtree,
                        trajectory_id=trajectory.id,
                        step_index=index,
                        history=list(history),
                        task_seed=task_seed,
                        history_targets=list(targets),
                    )
                )
            if not include_intermediate:
                break
            if step.action.strip():
                history.append(step.action.strip())
                targets.append(action_target(step.action.strip(), step.axtree))
    return states


def _is_final_action(action: str) -> bool:
    name = action.strip().strip("`").split("[", 1)[0].strip()
    return not name or name == "stop"


def sample_start_state(states: Sequence[StartState], rng: np.random.Generator) -> StartState:
    """Draw one start state uniformly with ``rng`` (an env's ``np_random``)."""
    if not states:
        raise ValueError("cannot sample from an empty list of start states")
    return states[int(rng.integers(len(states)))]


def builtin_start_states_path() -> Path:
    """Path of the shipped start-state file (it may not exist in a partial checkout)."""
    return LARGE_DATA_DIR.parent / BUILTIN_START_STATES


def load_start_states(
    path: PathLike | None = None,
    include_intermediate: bool = True,
    split: str | None = None,
) -> list[StartState]:
    """Load start states from a trajectory file (JSONL, or xz-compressed JSONL), a directory of them, or the
    shipped set.

    A file is read once per process for each set of arguments (until it changes on disk); each call returns a
    new list of the same :class:`StartState` objects, which callers must not modify.

    Args:
        path: A ``.jsonl`` / ``.jsonl.xz`` file of trajectory records or a directory of such files; ``None`` for
            the shipped :data:`BUILTIN_START_STATES`.
        include_intermediate: See :func:`start_states_from_trajectories`.
        split: See :func:`start_states_from_trajectories`.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If it holds no usable start state.
    """
    source = (builtin_start_states_path() if path is None else Path(path).expanduser()).resolve()
    if not source.exists():
        raise FileNotFoundError(f"start-state file not found: {source}")
    files = sorted([*source.glob("*.jsonl"), *source.glob("*.jsonl.xz")]) if source.is_dir() else [source]
    stamp = tuple((str(file), file.stat().st_size, file.stat().st_mtime_ns) for file in files)
    # Reading resolves portable MiniWoB++ URLs against this machine's pages: a new location is a new read.
    pages = urls.miniwob_pages_url()
    return list(_load_cached(str(source), stamp, bool(include_intermediate), split, pages))


@functools.lru_cache(maxsize=16)
def _load_cached(
    source: str, stamp: tuple[tuple[str, int, int], ...], include_intermediate: bool, split: str | None, pages: str
) -> tuple[StartState, ...]:
    """The start states of ``source`` (``stamp``: its files' sizes and times, so a changed file is read again;
    ``pages``: where this machine's MiniWoB++ pages are, which the recorded URLs resolve against)."""
    states = start_states_from_trajectories(read_trajectories(source), include_intermediate, split)
    if not states:
        raise ValueError(f"no start states in {source}" + (f" for split {split!r}" if split is not None else ""))
    return tuple(states)


__all__ = [
    "BUILTIN_START_STATES",
    "StartState",
    "builtin_start_states_path",
    "load_start_states",
    "sample_start_state",
    "start_states_from_trajectories",
]
