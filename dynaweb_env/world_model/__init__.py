"""The web world model and the trajectory judge.

- :mod:`~dynaweb_env.world_model.prompts`: the paper's world-model prompt and the output format
  (``[Web state changes]`` / ``[Next page accessibility tree]`` / ``[Episode ended]``).
- :mod:`~dynaweb_env.world_model.parsing`: reading outputs, malformed ones included, without raising.
- :mod:`~dynaweb_env.world_model.model`: :class:`WebWorldModel`, batched next-state prediction.
- :mod:`~dynaweb_env.world_model.judge`: :class:`TrajectoryJudge`, batched 0/1 trajectory rewards.
"""

from .judge import JudgeRequest, JudgeStep, JudgeVerdict, TrajectoryJudge, parse_judge_output
from .model import WebWorldModel, WorldModelRequest
from .parsing import WorldModelPrediction, parse_world_model_output
from .prompts import (
    CHANGES_HEADER,
    TERMINAL_MARKER,
    TREE_HEADER,
    build_world_model_messages,
    format_world_model_target,
)

__all__ = [
    "CHANGES_HEADER",
    "TERMINAL_MARKER",
    "TREE_HEADER",
    "JudgeRequest",
    "JudgeStep",
    "JudgeVerdict",
    "TrajectoryJudge",
    "WebWorldModel",
    "WorldModelPrediction",
    "WorldModelRequest",
    "build_world_model_messages",
    "format_world_model_target",
    "parse_judge_output",
    "parse_world_model_output",
]
