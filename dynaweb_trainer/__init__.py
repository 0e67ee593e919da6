"""DynaWeb trainer: TRL-based GSPO on dreamed and real web environments.

Main entry points (imported lazily, so ``import dynaweb_trainer`` stays cheap):

- :class:`~dynaweb_trainer.config.GSPOConfig` and :class:`~dynaweb_trainer.trainer.DynaWebTrainer`
  (``dynaweb-train`` on the command line, see :mod:`dynaweb_trainer.cli`);
- :func:`~dynaweb_trainer.rollout.run_episodes`, the one policy-environment loop (training,
  evaluation, benchmarks);
- :class:`~dynaweb_trainer.encoding.EpisodeEncoder` and
  :func:`~dynaweb_trainer.encoding.encode_expert_trajectory`, the one multi-turn token encoding.
"""

from __future__ import annotations

import importlib
from typing import Any

from dynaweb_env.compat.library_warnings import silence_library_warnings

__version__ = "0.1.0"

# Other libraries' warnings that no flag of a DynaWeb command can avoid (listed, one filter each, in compat/).
silence_library_warnings()

_LAZY = {
    "GSPOConfig": "dynaweb_trainer.config",
    "DynaWebTrainer": "dynaweb_trainer.trainer",
    "DynaWebRollout": "dynaweb_trainer.trainer",
    "run_episodes": "dynaweb_trainer.rollout",
    "EpisodeResult": "dynaweb_trainer.rollout",
    "RolloutStats": "dynaweb_trainer.rollout",
    "EpisodeEncoder": "dynaweb_trainer.encoding",
    "EncodedEpisode": "dynaweb_trainer.encoding",
    "encode_expert_trajectory": "dynaweb_trainer.encoding",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dynaweb_trainer' has no attribute {name!r}")


__all__ = ["__version__", *_LAZY]
