"""The web world model and the trajectory judge.

- :mod:`~dynaweb_env.world_model.output_format`: the output format, defined once
  (``[Web state changes]`` / ``[Next page accessibility tree]`` / ``[Episode ended]``, patch edits).
- :mod:`~dynaweb_env.world_model.prompts`: the paper's world-model prompt.
- :mod:`~dynaweb_env.world_model.parsing`: reading outputs, malformed ones included, without raising;
  :mod:`~dynaweb_env.world_model.patch`: patch mode (edits of the current tree applied in code).
- :mod:`~dynaweb_env.world_model.model`: :class:`WebWorldModel`, batched next-state prediction.
- :mod:`~dynaweb_env.world_model.judge`: :class:`TrajectoryJudge`, batched 0/1 trajectory rewards.
- :mod:`~dynaweb_env.world_model.teacher`, :mod:`~dynaweb_env.world_model.state_changes`: the Δ labels
  of real transitions the world model is trained on (teacher LLM or structural diff; CLI).
"""

from .judge import JudgeRequest, JudgeStep, JudgeVerdict, TrajectoryJudge, parse_judge_output
from .model import WebWorldModel, WorldModelRequest
from .output_format import CHANGES_HEADER, TERMINAL_MARKER, TREE_HEADER
from .parsing import WorldModelPrediction, parse_world_model_output
from .prompts import build_world_model_messages, format_world_model_target

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
