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

#: Why an episode ended: one vocabulary for the envs (``info["end_reason"]`` on a dream's last step)
#: and for the rollouts that drive them (``end_reason`` of an episode result and of a recorded
#: trajectory's ``metadata``). Reason -> meaning.
END_REASONS: dict[str, str] = {
    # Named by the dream env.
    "stop": "the policy answered with stop [answer]",
    "terminal_state": "the world model marked the page as the end of the episode",
    "dream_length": "the dream reached dream_length steps (a truncation)",
    "uncertain": "the world model's samples of the step disagreed (a truncation; reward_guards uncertainty='cut')",
    "inconsistent": "the predicted page renamed a control or filled an untyped field (a truncation; "
    "reward_guards consistency='cut')",
    "backend_error": "a world-model or judge backend failed (a truncation; see info['backend_error'])",
    "finish": "its caller ended the dream with finish() (a host's turn cap), and it was judged then",
    "left_task_page": "the task lives on one page and the agent left it (new_tab, go_back, goto another address): the "
    "task ended with reward 0, as BrowserGym's MiniWoB++ ends it (info['task_error'] has its words)",
    # Named by a rollout, for an env that ended the episode without naming why (RealWeb-v0).
    "terminated": "the env terminated the episode (the task ended)",
    "truncated": "the env truncated the episode (its step limit, a browser failure)",
    # Named by a rollout that stopped an episode itself.
    "max_steps": "the policy used its max_steps turns",
    "max_tokens": "the next turn would not fit in the token budget",
    "expert": "a demonstration replayed, not a rollout",
}

#: What both envs' ``step`` raises (``gym.error.ResetNeeded``) once their episode has ended.
EPISODE_ENDED = "the episode has ended; call reset() before step()"

_LAZY = {"DreamWebEnv": ".dream", "DreamWebVectorEnv": ".dream_vector", "RealWebEnv": ".real"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["END_REASONS", "EPISODE_ENDED", *_LAZY]
