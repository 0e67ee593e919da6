"""The actions beyond the paper's twelve, driven on real MiniWoB++ pages through RealWeb-v0."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.experts import find_all_by_role, parse_axtree


def _options(axtree: str) -> list[str]:
    return [node.name for node in find_all_by_role(parse_axtree(axtree), "option")]


def _bid(axtree: str, role: str) -> str:
    return find_all_by_role(parse_axtree(axtree), role)[0].bid


@pytest.mark.browser
def test_select_picks_an_option_of_a_real_select_and_submit_scores(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.choose-list", "task_seed": 3})
    target = re.search(r"Select (.+) from the list", observation["goal"]).group(1)
    listbox = _bid(observation["axtree"], "combobox")
    other = next(option for option in _options(observation["axtree"]) if option != target)

    observation, reward, terminated, _, _ = real_web_env.step(f"select [{listbox}] [{other}]")
    assert observation["last_action"] == f"select [{listbox}] [{other}]"
    assert observation["last_action_error"] == "" and f"value={other!r}" in observation["axtree"]
    assert (reward, terminated) == (0.0, False)

    observation, _, _, _, _ = real_web_env.step(f"REASON: the goal names it.\nACTION: select [{listbox}] [{target}]")
    assert observation["last_action_error"] == "" and f"value={target!r}" in observation["axtree"]
    _, reward, terminated, _, _ = real_web_env.step(f"click [{_bid(observation['axtree'], 'button')}]")
    assert (reward, terminated) == (1.0, True)


@pytest.mark.browser
def test_select_on_a_missing_option_or_a_button_is_an_error_not_a_crash(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.choose-list", "task_seed": 4})
    listbox, button = _bid(observation["axtree"], "combobox"), _bid(observation["axtree"], "button")
    for action in (f"select [{listbox}] [No Such Name]", f"select [{button}] [x]", f"select [{listbox}]"):
        after, reward, terminated, truncated, _ = real_web_env.step(action)
        assert after["last_action_error"], action
        assert (reward, terminated, truncated) == (0.0, False, False), action
        assert after["axtree"] == observation["axtree"], action


@pytest.mark.browser
def test_check_env_passes_with_the_browsergym_grammar(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button", action_set="browsergym")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()
    with pytest.raises(ValueError, match="action_set must be one of"):
        gym.make("RealWeb-v0", action_set="playwright")


@contextmanager
def browsergym_grammar(env: gym.Env) -> Iterator[gym.Env]:
    """The shared env reading BrowserGym's calls, 20 steps long, for one test (a new browser would cost seconds)."""
    env.unwrapped.action_set, env.unwrapped.max_steps = "browsergym", 20
    try:
        yield env
    finally:
        env.unwrapped.action_set, env.unwrapped.max_steps = "paper", 10


def _listen(env: gym.Env, selector: str, event: str) -> None:
    """Make ``event`` on ``selector`` rename the page (the tree's RootWebArea shows the title)."""
    handler = f"() => {{ document.title = {event!r}; }}"
    script = f"document.querySelector({selector!r}).addEventListener({event!r}, {handler})"
    env.unwrapped.run_in_browser(lambda page: page.evaluate(script))


def _step(env: gym.Env, action: str, shown: str) -> dict:
    observation, reward, terminated, truncated, _ = env.step(action)
    assert observation["last_action"] == shown and observation["last_action_error"] == "", (action, observation)
    assert (reward, terminated, truncated) == (0.0, False, False), action
    return observation


@pytest.mark.browser
def test_browsergym_calls_act_on_a_real_form(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.enter-text", "task_seed": 2})
    box, submit = _bid(observation["axtree"], "textbox"), _bid(observation["axtree"], "button")
    with browsergym_grammar(real_web_env) as env:
        observation = _step(env, f"fill('{box}', 'abc')", f"type [{box}] [abc] [0]")
        assert "value='abc'" in observation["axtree"]
        observation = _step(env, f"press('{box}', 'Backspace')", f"press_on [{box}] [Backspace]")
        assert "value='ab'" in observation["axtree"]
        observation = _step(env, f"clear('{box}')", f"type [{box}] [] [0]")
        assert "value=" not in observation["axtree"].splitlines()[1]
        observation = _step(env, f"focus('{submit}')", f"focus [{submit}]")
        assert "'Submit', focused" in observation["axtree"]
        _listen(env, "input", "dblclick")  # (a double click on Submit would submit the task)
        observation = _step(env, f"dblclick('{box}')", f"dblclick [{box}]")
        assert observation["axtree"].startswith("RootWebArea 'dblclick'")
        _listen(env, "button", "mouseover")
        observation = _step(env, f"hover('{submit}')", f"hover [{submit}]")
        assert observation["axtree"].startswith("RootWebArea 'mouseover'")
        _step(env, "noop(10)", "noop [10]")
        _step(env, "go_forward()", "go_forward")  # nothing to go forward to: the page stays
        observation, _, _, _, _ = env.step("goto('file:///etc/passwd')")  # read, then refused by the navigation rule
        assert observation["last_action"] == "goto [file:///etc/passwd]"
        assert "passwd" in observation["last_action_error"]
        observation, _, _, _, _ = env.step("upload_file('1', '/etc/passwd')")
        assert observation["last_action_error"] == "invalid action: upload_file is not supported in this environment"
        _, reward, terminated, _, _ = env.step("send_msg_to_user('N/A')")
        assert terminated and reward == 0.0 and env.unwrapped._observation["last_action"] == "stop [N/A]"


@pytest.mark.browser
def test_browsergym_calls_scroll_select_and_submit(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.choose-list", "task_seed": 5})
    target = re.search(r"Select (.+) from the list", observation["goal"]).group(1)
    listbox, submit = _bid(observation["axtree"], "combobox"), _bid(observation["axtree"], "button")
    with browsergym_grammar(real_web_env) as env:
        env.unwrapped.run_in_browser(lambda page: page.evaluate("document.body.style.height = '5000px'"))
        scroll_y = "() => window.scrollY"
        _step(env, "scroll(0, 200)", "scroll [down]")
        assert env.unwrapped.run_in_browser(lambda page: page.evaluate(scroll_y)) > 0
        _step(env, "scroll(0, -200)", "scroll [up]")
        assert env.unwrapped.run_in_browser(lambda page: page.evaluate(scroll_y)) == 0
        observation = _step(env, f"select_option('{listbox}', {target!r})", f"select [{listbox}] [{target}]")
        assert f"value={target!r}" in observation["axtree"]
        _, reward, terminated, _, _ = env.step(f"REASON: it is chosen.\nACTION: click('{submit}')")
        assert (reward, terminated) == (1.0, True)


@pytest.mark.browser
def test_go_back_leaves_the_task_page_as_in_the_paper_grammar(real_web_env: gym.Env) -> None:
    real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 1})
    with browsergym_grammar(real_web_env) as env:
        observation, reward, terminated, _, info = env.step("go_back()")
    assert observation["last_action"] == "go_back" and (reward, terminated) == (0.0, True)
    assert info["task_info"].get("error") == "invalid url, terminating task"


@pytest.mark.browser
def test_new_paper_actions_act_on_a_real_form(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.enter-text", "task_seed": 3})
    box, submit = _bid(observation["axtree"], "textbox"), _bid(observation["axtree"], "button")
    observation = _step(real_web_env, f"type [{box}] [xyz] [0]", f"type [{box}] [xyz] [0]")
    observation = _step(real_web_env, f"press_on [{box}] [Backspace]", f"press_on [{box}] [Backspace]")
    assert "value='xy'" in observation["axtree"]
    observation = _step(real_web_env, f"focus [{submit}]", f"focus [{submit}]")
    assert "'Submit', focused" in observation["axtree"]
    _listen(real_web_env, "input", "dblclick")
    observation = _step(real_web_env, f"dblclick [{box}]", f"dblclick [{box}]")
    assert observation["axtree"].startswith("RootWebArea 'dblclick'")
    _step(real_web_env, "noop", "noop [1000]")
