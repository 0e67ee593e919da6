"""The trajectory record: one JSON object per trajectory, shared by collection, training and dreams.

A :class:`Trajectory` is what ``dynaweb-collect`` writes, what the world model is trained on, where
dream start states come from, and what expert interleaving replays. On disk it is one JSON object
per line (see :mod:`dynaweb_env.data.io`)::

    {"id": "miniwob.click-button/seed-3/expert", "task_id": "miniwob.click-button",
     "goal": "Click on the \\"ONE\\" button.", "source": "expert", "success": true, "reward": 1.0,
     "steps": [{"url": "file:///...", "axtree": "...", "action": "click [13]",
                "reasoning": "...", "changes": "..."}],
     "metadata": {"seed": 3}}

``steps[i]`` holds the observation *before* action ``i`` and the action taken in it. The last step
of a finished trajectory normally holds the final page with action ``stop [...]`` (or an empty
action when the episode ended without one); ``changes`` is the Δ description of the transition
from ``steps[i]`` to ``steps[i + 1]`` when it has been labelled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: Where a trajectory came from. ``real``: any policy in a real browser; ``expert``: a
#: demonstration; ``dream``: a world-model rollout.
SOURCES: tuple[str, ...] = ("real", "expert", "dream")


class SchemaError(ValueError):
    """A record does not follow the trajectory schema; the message names the field."""


@dataclass
class Step:
    """One observation and the action taken in it."""

    url: str
    axtree: str
    action: str = ""
    reasoning: str = ""
    changes: str = ""
    last_action_error: str = ""

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Step:
        if not isinstance(record, dict):
            raise SchemaError(f"step must be an object, got {type(record).__name__}")
        for key in ("url", "axtree"):
            if not isinstance(record.get(key), str):
                raise SchemaError(f"step field {key!r} must be a string")
        known = {name: record[name] for name in cls.__dataclass_fields__ if name in record}
        for key, value in known.items():
            if not isinstance(value, str):
                raise SchemaError(f"step field {key!r} must be a string, got {type(value).__name__}")
        return cls(**known)


@dataclass
class Trajectory:
    """One episode on one task. See the module docstring for the on-disk form."""

    id: str
    task_id: str
    goal: str
    source: str
    steps: list[Step]
    success: bool = False
    reward: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise SchemaError(f"source must be one of {SOURCES}, got {self.source!r}")

    @property
    def actions(self) -> list[str]:
        return [step.action for step in self.steps if step.action]

    def transitions(self) -> list[tuple[Step, Step]]:
        """Consecutive ``(before, after)`` step pairs: the real transitions a world model learns."""
        return list(zip(self.steps[:-1], self.steps[1:], strict=False))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Trajectory:
        """Validate and build a trajectory; raises :class:`SchemaError` naming the bad field."""
        if not isinstance(record, dict):
            raise SchemaError(f"trajectory must be an object, got {type(record).__name__}")
        for key in ("id", "task_id", "goal", "source"):
            if not isinstance(record.get(key), str):
                raise SchemaError(f"field {key!r} must be a string")
        steps = record.get("steps")
        if not isinstance(steps, list) or not steps:
            raise SchemaError("field 'steps' must be a non-empty list")
        reward = record.get("reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise SchemaError(f"field 'reward' must be a finite number, got {reward!r:.40}")
        success = record.get("success", False)
        if not isinstance(success, bool):
            raise SchemaError("field 'success' must be true or false")
        metadata = record.get("metadata", {})
        if not isinstance(metadata, dict):
            raise SchemaError("field 'metadata' must be an object")
        parsed_steps = []
        for index, step in enumerate(steps):
            try:
                parsed_steps.append(Step.from_dict(step))
            except SchemaError as error:
                raise SchemaError(f"steps[{index}]: {error}") from None
        return cls(
            id=record["id"],
            task_id=record["task_id"],
            goal=record["goal"],
            source=record["source"],
            steps=parsed_steps,
            success=success,
            reward=float(reward),
            metadata=metadata,
        )


__all__ = ["SOURCES", "SchemaError", "Step", "Trajectory"]
