"""A trivially learnable web task with the DynaWeb observation/action contract, for learning tests.

In the spirit of Stable-Baselines3's identity envs: if GSPO cannot raise the success rate on
"click the button named X", something in the rollout, encoding or loss is broken. The env needs
no browser and no model, so a test can run dozens of training steps in a minute.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from dynaweb_env.actions import ActionParseError, extract_action, parse_action
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.observation import make_observation
from dynaweb_env.spaces import web_action_space, web_observation_space

#: Task id of the env (the ``task`` reset option).
TASK_ID = "identity.click-button"
#: Button names; button ``i`` (0-based) has element id ``i + 1``.
BUTTON_NAMES: tuple[str, ...] = ("ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT")


class ClickButtonEnv(gym.Env[dict[str, str], str]):
    """Click the button named in the goal.

    ## Description

    A page with ``num_buttons`` buttons ``[1] button 'ONE'``, ``[2] button 'TWO'``, ... The goal
    names one of them. Clicking it is a success.

    ## Action Space

    ``web_action_space()``: an action string or a whole policy response (the action is extracted
    with :func:`dynaweb_env.actions.extract_action`).

    ## Observation Space

    ``web_observation_space()``: ``goal``, ``url``, ``axtree``, ``last_action``, ``last_action_error``.

    ## Starting State

    The target is ``target`` when given, else drawn from ``self.np_random``; reset options
    ``{"task_seed": n}`` pin it to ``BUTTON_NAMES[n % num_buttons]``.

    ## Rewards

    1 for clicking the target, 0 otherwise.

    ## Episode End

    Termination: any valid ``click`` or ``stop``. Truncation: ``max_steps`` steps (malformed or
    other actions only set ``last_action_error`` / change nothing).

    ## Arguments

    - ``num_buttons``: 2 to 8 buttons.
    - ``target``: fixed target name (a one-armed identity task), or ``None`` to vary it.
    - ``max_steps``: steps before truncation.

    ## Version History

    - v0: Initial version.
    """

    metadata = {"render_modes": []}

    def __init__(self, num_buttons: int = 4, target: str | None = None, max_steps: int = 3):
        if not 2 <= num_buttons <= len(BUTTON_NAMES):
            raise ValueError(f"num_buttons must be in [2, {len(BUTTON_NAMES)}], got {num_buttons}")
        if target is not None and target not in BUTTON_NAMES[:num_buttons]:
            raise ValueError(f"target must be one of {BUTTON_NAMES[:num_buttons]}, got {target!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.observation_space = web_observation_space()
        self.action_space = web_action_space()
        self.num_buttons, self.target, self.max_steps = num_buttons, target, max_steps
        self._target_index = 0
        self._steps = 0

    def _observation(self, last_action: str = "", error: str = "") -> dict[str, str]:
        lines = ["RootWebArea 'Click Button'"]
        lines += [f"\t[{index + 1}] button '{name}'" for index, name in enumerate(BUTTON_NAMES[: self.num_buttons])]
        goal = f"Click the button named '{BUTTON_NAMES[self._target_index]}'."
        return make_observation(goal, "file:///identity/click-button.html", "\n".join(lines), last_action, error)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if self.target is not None:
            self._target_index = BUTTON_NAMES.index(self.target)
        elif options.get("task_seed") is not None:
            self._target_index = int(options["task_seed"]) % self.num_buttons
        else:
            self._target_index = int(self.np_random.integers(self.num_buttons))
        self._steps = 0
        return self._observation(), {"task_id": TASK_ID, "source": "real"}

    def step(self, action: str):
        self._steps += 1
        text = extract_action(action) if isinstance(action, str) else ""
        info: dict[str, Any] = {"task_id": TASK_ID, "source": "real"}
        try:
            parsed = parse_action(text)
        except ActionParseError as error:
            truncated = self._steps >= self.max_steps
            return self._observation(text[:200], str(error)), 0.0, False, truncated, info
        if parsed.name in ("click", "stop"):
            success = parsed.name == "click" and parsed.element_id == str(self._target_index + 1)
            info["success"] = success
            return self._observation(str(parsed)), float(success), True, False, info
        truncated = self._steps >= self.max_steps
        return self._observation(str(parsed), "nothing happens"), 0.0, False, truncated, info


def expert_trajectory(task_seed: int, num_buttons: int = 4, reward: float = 1.0) -> Trajectory:
    """A demonstration of the task for ``task_seed``: one click on the target, with its reasoning."""
    env = ClickButtonEnv(num_buttons=num_buttons)
    observation, _ = env.reset(options={"task_seed": task_seed})
    index = task_seed % num_buttons
    step = Step(
        url=observation["url"],
        axtree=observation["axtree"],
        action=f"click [{index + 1}]",
        reasoning=f"The button named {BUTTON_NAMES[index]} is [{index + 1}].",
    )
    return Trajectory(
        f"{TASK_ID}/seed-{task_seed}/expert", TASK_ID, observation["goal"], "expert", [step],
        success=reward > 0, reward=reward, metadata={"seed": task_seed},
    )  # fmt: skip


def make_click_button_vector_env(num_envs: int, **kwargs: Any) -> SyncVectorEnv:
    """``num_envs`` :class:`ClickButtonEnv` in a ``SyncVectorEnv`` with autoreset disabled."""
    return SyncVectorEnv(
        [lambda: ClickButtonEnv(**kwargs) for _ in range(num_envs)], autoreset_mode=AutoresetMode.DISABLED
    )


__all__ = ["TASK_ID", "BUTTON_NAMES", "ClickButtonEnv", "expert_trajectory", "make_click_button_vector_env"]
