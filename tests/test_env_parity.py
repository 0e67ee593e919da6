"""DreamWeb-v0 and RealWeb-v0 behave alike on every action of the grammar (issue #49, item 6).

Both envs start from the same real MiniWoB++ page (the dream's start state is the real env's first
observation) and take the same actions: each action of the grammar, its malformed variants, and the
impossible ones (an unknown key, a tab that is not open, the last tab, a missing element, a refused
address). They must report the same ``last_action_error`` and end the episode the same way; the actions
that leave a MiniWoB++ task's page (``new_tab``, ``go_back``, ``goto`` another page) end both with reward
0, and after the end both raise ``ResetNeeded``. The dream's models are the tiny random test model, greedy,
with small budgets: no rule checked here depends on what a model predicts.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.actions import ACTION_ARGUMENTS
from dynaweb_env.data.start_states import StartState
from dynaweb_env.experts import parse_axtree

TASK = "miniwob.enter-text"
TASK_SEED = 3
STEPS = 60


def _bid(observation: dict, role: str) -> str:
    return next(node.bid for node in parse_axtree(observation["axtree"]) if node.role == role)


@pytest.fixture(scope="module")
def dream() -> gym.Env:
    return gym.make(
        "DreamWeb-v0", world_model="tiny-random", judge="tiny-random", world_model_temperature=0.0, max_new_tokens=8,
        judge_max_new_tokens=4, dream_length=STEPS,
    )  # fmt: skip


@pytest.fixture()
def envs(real_web_env: gym.Env, dream: gym.Env):
    real_web_env.unwrapped.max_steps = STEPS
    yield real_web_env, dream
    real_web_env.unwrapped.max_steps = 10


def _reset(real: gym.Env, dream: gym.Env) -> dict:
    observation, info = real.reset(options={"task": TASK, "task_seed": TASK_SEED})
    start = StartState(TASK, observation["goal"], observation["url"], observation["axtree"], "real/0", 0, [])
    dream.reset(options={"start_state": start})
    return observation


def _both(real: gym.Env, dream: gym.Env, action: str) -> tuple[tuple, tuple]:
    outcomes = []
    for env in (real, dream):
        observation, reward, terminated, truncated, _ = env.step(action)
        outcomes.append((observation["last_action_error"], terminated, truncated))
    return outcomes[0], outcomes[1]


def _actions_that_go_on(observation: dict) -> tuple[list[str], list[str]]:
    """``(malformed, well-formed)`` actions that end neither episode."""
    textbox, button = _bid(observation, "textbox"), _bid(observation, "button")
    malformed = [
        "", "click 12", "click [", "type [5]", "type [5] [a] [2]", "scroll [left]", "x" * 5000, "foo [1]",
        "tab_focus [-1]", "tab_focus [one]", "press []", "press [Foo+Bar]", "press [Control+é]", "goto []",
        "new_tab [1]", "go_back [1]", "stop [a] [b]", "REASON: no action here",
    ]  # fmt: skip
    impossible = [
        "click [999]", "hover [abc]", f"type [{button}] [x] [0]", "tab_focus [99]", "tab_focus [1]", "close_tab",
        "goto [file:///etc/passwd]", "goto [http://127.0.0.1:9/]", "goto [data:text/html,x]",
        f"select [{button}] [x]", f"select [{textbox}] [x]", "dblclick [999]", "focus [999]", "press_on [999] [a]",
    ]  # fmt: skip
    valid = [
        f"hover [{textbox}]", "scroll [down]", "scroll [up]", "press [Tab]", "press [ctrl+a]", "tab_focus [0]",
        f"type [{textbox}] [hello] [0]", f"click [{textbox}]", "go_forward",
        f"dblclick [{textbox}]", f"focus [{button}]", f"press_on [{textbox}] [Backspace]", "noop [10]",
    ]  # fmt: skip
    return malformed, impossible + valid


@pytest.mark.browser
def test_the_same_errors_on_every_action_that_does_not_end_the_episode(envs) -> None:
    real, dream = envs
    observation = _reset(real, dream)
    malformed, well_formed = _actions_that_go_on(observation)
    covered = {action.split(" ")[0] for action in well_formed}
    assert set(ACTION_ARGUMENTS) - covered == {"new_tab", "go_back", "stop"}  # the ending ones: below
    # (select's success needs a <select>: tests/test_real_env_actions.py drives it on choose-list.)
    for action in malformed + well_formed:
        real_outcome, dream_outcome = _both(real, dream, action)
        assert real_outcome == dream_outcome, (action[:60], real_outcome, dream_outcome)
        assert real_outcome[1:] == (False, False), action[:60]
        if action in ("press [Foo+Bar]", "tab_focus [99]", "close_tab", "click [999]") or action.startswith("select"):
            assert real_outcome[0], action  # the examples are errors in both


@pytest.mark.browser
@pytest.mark.parametrize(
    "action, task_error",
    [
        ("new_tab", "invalid page, terminating task"),
        ("go_back", "invalid url, terminating task"),
        ("goto [click-button.html]", "invalid url, terminating task"),
        ("stop [done]", None),
    ],
)
def test_the_same_episode_end_and_reset_needed_after_it(envs, action: str, task_error: str | None) -> None:
    real, dream = envs
    _reset(real, dream)
    real_observation, real_reward, *real_end, real_info = real.step(action)
    dream_observation, dream_reward, *dream_end, dream_info = dream.step(action)
    assert real_end == dream_end == [True, False], action
    assert real_observation["last_action_error"] == dream_observation["last_action_error"] == ""
    if task_error is not None:
        assert real_info["task_info"]["error"] == dream_info["task_error"] == task_error
        assert real_reward == dream_reward == 0.0 and dream_info["end_reason"] == "left_task_page"
    if action in ("new_tab", "go_back"):  # both show the blank tab they ended on
        assert (real_observation["url"], real_observation["axtree"]) == (
            dream_observation["url"], dream_observation["axtree"]
        )  # fmt: skip
    for env in (real, dream):
        with pytest.raises(gym.error.ResetNeeded, match="the episode has ended"):
            env.step("scroll [down]")


@pytest.mark.browser
def test_a_truncated_episode_needs_a_reset_in_both(envs) -> None:
    real, dream = envs
    _reset(real, dream)
    real.unwrapped.max_steps = 2
    dream.unwrapped.dynamics.dream_length = 2
    try:
        for step in range(2):
            real_outcome, dream_outcome = _both(real, dream, "click 12")
            assert real_outcome == dream_outcome and real_outcome[2] == (step == 1)
        for env in (real, dream):
            with pytest.raises(gym.error.ResetNeeded):
                env.step("scroll [down]")
    finally:
        dream.unwrapped.dynamics.dream_length = STEPS
