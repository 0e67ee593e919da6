"""RealWeb-v0 on real Chromium and real MiniWoB++ pages: contract, rewards, bad input, guards, crashes, vectors."""

from __future__ import annotations

import os
import signal
import time
import warnings

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.envs.browsergym_adapter import normalize_key_combination
from dynaweb_env.envs.real import RealWebEnv
from dynaweb_env.experts import find_all_by_role, get_expert, parse_axtree
from dynaweb_env.navigation import url_in_domains
from dynaweb_env.spaces import OBSERVATION_KEYS, web_action_space, web_observation_space

# ---------------------------------------------------------------------------- without a browser


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "click-button"}, "BrowserGym task id"),
        ({"task": "miniwob.no-such-task"}, "unknown BrowserGym task"),
        ({"task": "nosuchbenchmark.x"}, "browsergym-nosuchbenchmark"),
        ({"tasks": "miniwob.click-button"}, "non-empty list"),
        ({"tasks": []}, "non-empty list"),
        ({"max_steps": 0}, "max_steps"),
        ({"allowed_domains": "example.com"}, "allowed_domains"),
        ({"step_timeout_s": 0}, "timeouts"),
        ({"element_timeout_ms": 0}, "element_timeout_ms"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RealWebEnv(**kwargs)


def test_spaces_are_the_shared_contract() -> None:
    env = RealWebEnv()
    assert env.observation_space == web_observation_space()
    assert env.action_space == web_action_space()
    with pytest.raises(gym.error.ResetNeeded):
        env.step("click [1]")
    env.close()
    assert env.browser_pids == []


@pytest.mark.parametrize(
    ("keys", "expected"),
    [("enter", "Enter"), ("Enter", "Enter"), ("ctrl+a", "Control+a"), ("Control+Shift+t", "Control+Shift+t"),
     ("a", "a"), ("+", "+"), ("arrowdown", "ArrowDown"), ("esc", "Escape")],
)  # fmt: skip
def test_key_combinations_use_playwright_names(keys: str, expected: str) -> None:
    assert normalize_key_combination(keys) == expected


@pytest.mark.parametrize(
    ("url", "domains", "allowed"),
    [
        ("file:///tmp/a.html", ["localhost"], False),
        ("http://localhost:7770/x", ["localhost:7770"], True),
        ("http://localhost:9999/x", ["localhost:7770"], False),
        ("http://localhost:9999/x", ["localhost"], True),
        ("https://shop.example.com/a", ["example.com"], True),
        ("https://example.com.evil.org/a", ["example.com"], False),
        ("https://evil.org/?q=example.com", ["example.com"], False),
        ("http://example.com/", ["http://example.com"], True),
        ("about:blank", [], False),  # hosts only: blank pages are the navigation policy's business
        ("http://localhost:abc/", ["localhost"], False),
    ],
)
def test_url_in_domains(url: str, domains: list[str], allowed: bool) -> None:
    assert url_in_domains(url, domains) is allowed


# ---------------------------------------------------------------------------- real browser


def _bid(observation: dict, role: str, name: str | None = None) -> str:
    nodes = find_all_by_role(parse_axtree(observation["axtree"]), role)
    matching = [node for node in nodes if name is None or node.name == name]
    assert matching, f"no {role} {name!r} in\n{observation['axtree']}"
    return matching[0].bid


@pytest.mark.browser
def test_check_env_passes_without_warnings(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.browser
def test_observation_format_and_info(real_web_env: gym.Env) -> None:
    observation, info = real_web_env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 3})
    assert tuple(observation) == OBSERVATION_KEYS
    assert observation in web_observation_space()
    assert observation["goal"].startswith("Click on the")
    assert observation["url"].startswith("file://") and observation["url"].endswith("click-button.html")
    assert observation["axtree"].startswith("RootWebArea 'Click Button Task'")
    assert "InlineTextBox" not in observation["axtree"] and "LineBreak" not in observation["axtree"]
    assert find_all_by_role(parse_axtree(observation["axtree"]), "button"), "buttons must keep their bids"
    assert (observation["last_action"], observation["last_action_error"]) == ("", "")
    assert info["task_id"] == "miniwob.click-button" and info["task_seed"] == 3
    assert (info["source"], info["changes"], info["error"]) == ("real", "", "")
    assert "RAW_REWARD_GLOBAL" in info["task_info"]
    rendered = real_web_env.render()
    assert rendered.startswith("OBJECTIVE: Click on the") and observation["axtree"] in rendered


@pytest.mark.browser
def test_same_task_seed_gives_same_page(real_web_env: gym.Env) -> None:
    first, _ = real_web_env.reset(seed=0, options={"task": "miniwob.click-checkboxes", "task_seed": 11})
    second, _ = real_web_env.reset(seed=999, options={"task": "miniwob.click-checkboxes", "task_seed": 11})
    assert first == second
    other, _ = real_web_env.reset(seed=0, options={"task": "miniwob.click-checkboxes", "task_seed": 12})
    assert other != first


@pytest.mark.browser
def test_tasks_are_sampled_with_the_env_seed(real_web_env: gym.Env) -> None:
    env = real_web_env.unwrapped
    env.tasks = ["miniwob.focus-text", "miniwob.click-dialog"]  # read at reset, like the constructor argument
    try:
        _, first = real_web_env.reset(seed=7)
        _, again = real_web_env.reset(seed=7)
        assert first["task_id"] in env.tasks and first["task_id"] == again["task_id"]
        assert first["task_seed"] == again["task_seed"]
    finally:
        env.tasks = None


@pytest.mark.browser
def test_clicking_the_right_button_gives_reward_one(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 5})
    _, action = get_expert("miniwob.click-button").act(observation)
    observation, reward, terminated, truncated, info = real_web_env.step(f"REASON: it is the one.\nACTION: {action}")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert observation["last_action"] == action and observation["last_action_error"] == ""
    assert info["step"] == 1
    # The element timeout reaches BrowserGym's action code (its literal 500 ms flaked on a busy CPU).
    action_code = real_web_env.unwrapped._browser_env.action_mapping(f"click('{action.split('[')[1][:-1]}')")
    assert "timeout=500" not in action_code and f"timeout={real_web_env.unwrapped.element_timeout_ms}" in action_code


@pytest.mark.browser
def test_clicking_the_wrong_button_gives_reward_zero(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 5})
    _, right = get_expert("miniwob.click-button").act(observation)
    buttons = find_all_by_role(parse_axtree(observation["axtree"]), "button")
    wrong = next(button for button in buttons if f"[{button.bid}]" not in right)
    _, reward, terminated, truncated, _ = real_web_env.step(f"click [{wrong.bid}]")
    assert (reward, terminated, truncated) == (0.0, True, False)


BAD_ACTIONS = [
    ("blah blah", "unknown action"),
    ("click 12", "takes 1"),
    ("goto http://x", "goto takes 1"),
    ("click [1] [2]", "takes 1"),
    ("type [15]", "takes 3"),
    ("scroll [sideways]", "up or down"),
    ("click [999]", "999"),  # parses, but no such element on the page
    ("tab_focus [7]", "there is no tab 7; the open tabs are 0"),  # parses, but there is no 8th tab
    (None, "must be a string"),
]


@pytest.mark.browser
def test_bad_actions_cost_a_step_and_never_raise(real_web_env: gym.Env) -> None:
    real_web_env.reset(options={"task": "miniwob.enter-text", "task_seed": 1})
    for step, (action, message) in enumerate(BAD_ACTIONS, start=1):
        observation, reward, terminated, truncated, info = real_web_env.step(action)
        assert message in observation["last_action_error"], (action, observation["last_action_error"])
        assert (reward, terminated, truncated, info["step"]) == (0.0, False, False, step), action
        assert observation in web_observation_space()
    # The episode goes on: a good action still works and clears the error; step 10 of 10 truncates.
    assert len(BAD_ACTIONS) == 9
    textbox = _bid(observation, "textbox")
    observation, _, terminated, truncated, _ = real_web_env.step(f"type [{textbox}] [hello world] [0]")
    assert observation["last_action_error"] == "" and "value='hello world'" in observation["axtree"]
    assert (terminated, truncated) == (False, True)


@pytest.mark.browser
def test_stop_ends_the_episode_with_the_task_reward(real_web_env: gym.Env) -> None:
    real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 2})
    observation, reward, terminated, truncated, _ = real_web_env.step("stop [I am done]")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert observation["last_action"] == "stop [I am done]" and observation["last_action_error"] == ""


@pytest.mark.browser
def test_navigation_outside_allowed_domains_is_refused(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 2})
    url = observation["url"]
    observation, _, terminated, truncated, _ = real_web_env.step("goto [http://example.com/]")
    assert "refused" in observation["last_action_error"] and "file://" in observation["last_action_error"]
    assert observation["url"] == url and not terminated and not truncated

    # A navigation the pre-check cannot see (a script on the page) is stopped by the request guard.
    real_web_env.unwrapped.run_in_browser(
        lambda page: page.evaluate(
            "() => { for (const b of document.querySelectorAll('button')) "
            "b.onclick = (e) => { e.stopImmediatePropagation(); location.href = 'http://example.com/'; }; }"
        )
    )
    observation, _, _, _, info = real_web_env.step(f"click [{_bid(observation, 'button')}]")
    assert "example.com/ refused" in observation["last_action_error"]  # Chromium may upgrade it to https
    assert observation["url"] == url and info["error"] == ""


@pytest.mark.browser
def test_link_to_a_disallowed_domain_is_refused(real_web_env: gym.Env) -> None:
    env = real_web_env.unwrapped
    env.allowed_domains = ["example.com"]  # read at reset, as the constructor argument would be
    try:
        observation, _ = real_web_env.reset(options={"task": "miniwob.click-tab", "task_seed": 1})
        link = _bid(observation, "link")
        observation, _, _, _, _ = real_web_env.step(f"click [{link}]")
        assert "refused: outside the allowed domains (example.com)" in observation["last_action_error"]
        assert observation["last_action"] == f"click [{link}]"
    finally:
        env.allowed_domains = None


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _tree(pids: list[int]) -> list[int]:
    everything = list(pids)
    for pid in pids:
        try:
            everything += [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return everything


@pytest.mark.browser
def test_killed_browser_truncates_and_next_reset_recovers(real_web_env: gym.Env) -> None:
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 4})
    pids = real_web_env.unwrapped.browser_pids
    assert len(pids) == 1  # headless: the task's browser only (the chat lives in memory)
    os.kill(pids[0], signal.SIGKILL)
    observation, reward, terminated, truncated, info = real_web_env.step(f"click [{_bid(observation, 'button')}]")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["error"].startswith("browser failure") and observation["last_action_error"] == info["error"]
    with pytest.raises(gym.error.ResetNeeded, match="the episode has ended"):  # as a dream after its end
        real_web_env.step("click [1]")

    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 4})
    assert real_web_env.unwrapped.browser_pids and pids[0] not in real_web_env.unwrapped.browser_pids
    _, action = get_expert("miniwob.click-button").act(observation)
    assert real_web_env.step(action)[1] == 1.0


@pytest.mark.browser
def test_hung_browser_is_killed_and_the_step_truncated(real_web_env: gym.Env) -> None:
    env = real_web_env.unwrapped
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 0})
    pids = env.browser_pids
    env.step_timeout_s = 5.0
    try:
        os.kill(pids[0], signal.SIGSTOP)  # the browser stops answering
        started = time.monotonic()
        _, _, _, truncated, info = real_web_env.step(f"click [{_bid(observation, 'button')}]")
        assert truncated and "no answer from the browser within 5 s" in info["error"]
        assert time.monotonic() - started < 15
        assert _alive(pids[:1]) == []
    finally:
        env.step_timeout_s = 60.0
        if _alive(pids[:1]):
            os.kill(pids[0], signal.SIGKILL)
    observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 0})
    assert observation["goal"].startswith("Click on the")


@pytest.mark.browser
def test_close_leaves_no_chromium_process(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.focus-text")
    env.reset(options={"task_seed": 0})
    env.reset(options={"task": "miniwob.click-dialog", "task_seed": 0})  # a task switch keeps browsers for reuse
    processes = _tree(env.unwrapped.browser_pids)
    assert len(processes) > 2
    env.close()
    deadline = time.monotonic() + 10
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(processes) == []
    env.close()  # closing twice is harmless


@pytest.mark.browser
def test_async_vector_env_with_groups_and_reset_mask(require_browser: None) -> None:
    envs = gym.make_vec(
        "RealWeb-v0",
        2,
        vectorization_mode="async",
        vector_kwargs={"shared_memory": False, "autoreset_mode": AutoresetMode.DISABLED},
        task="miniwob.click-button",
    )
    try:
        observations, infos = envs.reset(seed=0, options={"task": "miniwob.enter-text", "task_seed": 5})
        assert observations["goal"][0] == observations["goal"][1]  # one group: same page in both envs
        assert observations["goal"][0].startswith("Enter ")
        assert list(infos["task_id"]) == ["miniwob.enter-text"] * 2 and list(infos["task_seed"]) == [5, 5]
        submit = _bid({"axtree": observations["axtree"][0]}, "button", "Submit")
        observations, rewards, terminated, truncated, _ = envs.step([f"click [{submit}]", "nonsense"])
        assert list(terminated) == [True, False] and list(rewards) == [0.0, 0.0]
        assert observations["last_action_error"][1].startswith("invalid action")

        mask = np.array([True, False])
        observations, infos = envs.reset(options={"reset_mask": mask, "task": "miniwob.click-button", "task_seed": 1})
        assert observations["goal"][0].startswith("Click on the")
        assert observations["goal"][1].startswith("Enter ")  # not reset
        assert infos["task_id"][0] == "miniwob.click-button" and list(infos["_task_id"]) == [True, False]
        workers = [process.pid for process in envs.processes]
        browsers = [child.pid for pid in workers for child in psutil.Process(pid).children(recursive=True)]
    finally:
        envs.close()
    time.sleep(1)
    assert _alive(workers + browsers) == []


@pytest.mark.browser
def test_typing_into_a_button_fails_as_a_dream_says_it_does(real_web_env: gym.Env) -> None:
    """DreamWeb refuses ``type`` on a button without asking the world model; its words are the real page's."""
    from dynaweb_env.envs.dream_episode import NOT_FILLABLE_ERROR

    observation, _ = real_web_env.reset(options={"task": "miniwob.enter-text", "task_seed": 1})
    observation, reward, terminated, _, _ = real_web_env.step(f"type [{_bid(observation, 'button')}] [hi] [0]")
    assert observation["last_action_error"].startswith(NOT_FILLABLE_ERROR) and (reward, terminated) == (0.0, False)
