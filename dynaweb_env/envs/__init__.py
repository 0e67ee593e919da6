"""The DynaWeb environments.

- :class:`~dynaweb_env.envs.dream.DreamWebEnv` (``DreamWeb-v0``): a world model plays the web.
- :class:`~dynaweb_env.envs.dream_vector.DreamWebVectorEnv`: its native batched version
  (``gym.make_vec("DreamWeb-v0", num_envs=n)``).
- :class:`~dynaweb_env.envs.real.RealWebEnv` (``RealWeb-v0``): a real Chromium browser.

Classes are imported on first access, so importing this package loads neither a browser nor a model.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"DreamWebEnv": ".dream", "DreamWebVectorEnv": ".dream_vector", "RealWebEnv": ".real"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
