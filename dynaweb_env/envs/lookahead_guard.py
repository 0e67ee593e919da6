"""``RealWeb-v0(lookahead_guard=...)``: refuse an action whose dreamed outcome leaves the task or ends it in failure.

Before an action runs in the real browser, the world model dreams its next page from the current one
(:class:`~dynaweb_env.envs.lookahead.Lookahead`, depth 1) and the judge reads the trajectory so far with that
dreamed page. The action is refused when (:func:`guard_refusal`):

- it leaves the task's page or site (a ``goto`` or link off the site, ``new_tab`` or ``go_back`` on a one-page task),
  or the world model dreams it going off-site; or
- its dreamed page ends the episode (``stop``, or a page the world model marks final) and the judge's probability of
  SUCCESS is below ``threshold``: the action would end the task in failure.

A refused action does not run: the page stays, the step gives reward 0 and the episode goes on, with
``last_action_error`` saying why (``"lookahead guard refused ..."``) and ``info["lookahead_guard"]`` holding the
dreamed outcome. An action that would continue the task is never refused (the judge grades unfinished trajectories
FAILURE: the task is not done yet). Malformed actions pass through to the env, which reports them as usual.

``benchmarks/lookahead_guard.py`` measures, on the recorded exploration data, how often the guard would have blocked
the actions that really ended episodes in failure, and how often actions of real successes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from ..actions import read_action
from ..observation import action_target
from .lookahead import ImaginedOutcome, Lookahead, start_from_observation

#: The judge's probability of SUCCESS below which a dreamed ending counts as a failure.
DEFAULT_GUARD_THRESHOLD = 0.5
#: The start of every refusal's ``last_action_error``.
GUARD_REFUSAL = "lookahead guard refused"


def guard_refusal(outcome: ImaginedOutcome, threshold: float = DEFAULT_GUARD_THRESHOLD) -> str:
    """Why the guard refuses the action whose dreamed outcome this is, or ``""`` (the action may run)."""
    if outcome.leaves_site:
        return "its dreamed outcome leaves the task's page"
    if not outcome.ended:
        return ""
    probability = outcome.success_probability if outcome.success_probability is not None else outcome.verdict
    if probability is None:  # no verdict (a backend failed): nothing to go on, the action runs
        return ""
    if probability < threshold:
        return f"its dreamed outcome ends the task in failure (judge: P(SUCCESS) = {probability:.2f})"
    return ""


class LookaheadGuard(gym.Wrapper):
    """Refuses actions whose dreamed outcome leaves the task or ends it in failure (see the module docstring).

    Args:
        env: A ``RealWeb-v0`` env (or any env with its observation and ``info["task_id"]``).
        lookahead: The world model and judge: a :class:`Lookahead`, ``True`` for the shipped ones, or a dict of
            :class:`Lookahead`'s arguments plus ``threshold``.
        threshold: The judge's probability of SUCCESS below which a dreamed ending is a failure.
    """

    def __init__(self, env: gym.Env, lookahead: Lookahead | Mapping[str, Any] | bool = True, threshold: float = 0.5):
        super().__init__(env)
        # The env's tasks choose the judge when none is named, as DreamWeb-v0's start states do.
        task = getattr(env.unwrapped, "task", None)
        tasks = getattr(env.unwrapped, "tasks", None) or ([task] if isinstance(task, str) else None)
        if isinstance(lookahead, Mapping):
            options = dict(lookahead)
            threshold = float(options.pop("threshold", threshold))
            lookahead = Lookahead(**{"depth": 1, "tasks": tasks, **options})
        elif lookahead is True:
            lookahead = Lookahead(depth=1, tasks=tasks)
        if not isinstance(lookahead, Lookahead):
            raise ValueError(f"lookahead_guard must be True, a dict of its arguments or a Lookahead, got {lookahead!r}")
        if not 0 <= threshold <= 1:
            raise ValueError(f"the guard's threshold must be in [0, 1], got {threshold}")
        self.lookahead, self.threshold = lookahead, threshold
        self._observation: dict[str, str] = {}
        self._info: dict[str, Any] = {}
        self._task_seed: int | None = None
        self._history: list[str] = []
        self._targets: list[str] = []
        #: Actions refused so far, and actions checked (for reports).
        self.refused = self.checked = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._observation, self._info = dict(observation), dict(info)
        self._task_seed = (options or {}).get("task_seed")
        self._history, self._targets = [], []
        return observation, info

    def step(self, action: str):
        read = read_action(action)
        if read.action is None or not self._observation:
            return self._pass(action, read.shown)
        task = str(self._info.get("task_id", ""))
        start = start_from_observation(self._observation, task, self._history, self._targets, self._task_seed)
        episodes = self.lookahead.begin([start])
        first = self.lookahead.step(episodes, [str(action)])
        (outcome,) = self.lookahead.score(episodes, first)
        self.checked += 1
        reason = guard_refusal(outcome, self.threshold)
        if not reason:
            return self._pass(action, read.shown, outcome)
        self.refused += 1
        observation = {**self._observation, "last_action": read.shown}
        observation["last_action_error"] = f"{GUARD_REFUSAL} {read.shown}: {reason}"
        info = copy.deepcopy(self._info)
        info["lookahead_guard"] = {"refused": True, "reason": reason, **outcome.to_dict()}
        self._observation = observation
        return observation, 0.0, False, False, info

    def _pass(self, action: str, shown: str, outcome: ImaginedOutcome | None = None):
        axtree = self._observation.get("axtree", "")
        observation, reward, terminated, truncated, info = self.env.step(action)
        if read_action(action).action is not None:
            self._history.append(shown)
            self._targets.append(action_target(shown, axtree))
        if outcome is not None:
            info = {**info, "lookahead_guard": {"refused": False, **outcome.to_dict()}}
        self._observation, self._info = dict(observation), {**self._info, **info}
        return observation, reward, terminated, truncated, info


def make_real_web(lookahead_guard: Lookahead | Mapping[str, Any] | bool | None = None, **kwargs: Any) -> gym.Env:
    """The entry point of ``RealWeb-v0``: :class:`~dynaweb_env.envs.real.RealWebEnv` (``kwargs``), inside a
    :class:`LookaheadGuard` when ``lookahead_guard`` is given (``True``, a dict of its arguments, a Lookahead)."""
    from .real import RealWebEnv

    if lookahead_guard is None or lookahead_guard is False:
        return RealWebEnv(**kwargs)
    if not (lookahead_guard is True or isinstance(lookahead_guard, (Mapping, Lookahead))):
        raise ValueError(
            f"lookahead_guard must be True, a dict of Lookahead arguments or a Lookahead, got {lookahead_guard!r}"
        )
    return LookaheadGuard(RealWebEnv(**kwargs), lookahead_guard)


__all__ = ["DEFAULT_GUARD_THRESHOLD", "GUARD_REFUSAL", "LookaheadGuard", "guard_refusal", "make_real_web"]
