"""Every step is bounded (issue #15, item 5): page size, tree size and depth, action length, tabs.

The huge page is made by the test harness (``run_in_browser``), inside the task's own page: the
agent itself has no way to write one.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.actions import read_action
from dynaweb_env.envs.browsergym_adapter import MAX_AXTREE_DEPTH, MAX_AXTREE_NODES, bounded_axtree, flatten_axtree
from dynaweb_env.spaces import MAX_ACTION_LENGTH, MAX_TEXT_LENGTH, fit_observation, web_observation_space


def _wide_tree(children: int) -> dict:
    root = {"nodeId": "0", "role": {"value": "RootWebArea"}, "name": {"value": "wide"}, "childIds": []}
    nodes = [root]
    for index in range(1, children + 1):
        root["childIds"].append(str(index))
        nodes.append({"nodeId": str(index), "role": {"value": "button"}, "name": {"value": f"b{index}"},
                      "childIds": [], "browsergym_id": str(index)})  # fmt: skip
    return {"nodes": nodes}


def _deep_tree(depth: int) -> dict:
    nodes = [{"nodeId": str(level), "role": {"value": "group"}, "name": {"value": f"g{level}"},
              "childIds": [str(level + 1)] if level + 1 < depth else []} for level in range(depth)]  # fmt: skip
    return {"nodes": nodes}


@pytest.mark.timeout(120)
def test_a_huge_tree_is_bounded_before_it_is_flattened() -> None:
    wide = _wide_tree(100_000)
    tree, cut = bounded_axtree(wide)
    assert len(tree["nodes"]) == MAX_AXTREE_NODES and cut == 100_001 - MAX_AXTREE_NODES
    text, cut = flatten_axtree(wide)
    assert text.count("\n") < MAX_AXTREE_NODES and cut == 100_001 - MAX_AXTREE_NODES


def test_a_deep_tree_is_cut_at_the_depth_limit_without_recursion_errors() -> None:
    text, cut = flatten_axtree(_deep_tree(5_000))
    assert cut == 5_000 - (MAX_AXTREE_DEPTH + 1)
    assert f"'g{MAX_AXTREE_DEPTH}'" in text and f"'g{MAX_AXTREE_DEPTH + 1}'" not in text


def test_a_small_tree_is_left_as_it_is() -> None:
    tree = _wide_tree(10)
    assert bounded_axtree(tree) == (tree, 0)


def test_actions_longer_than_the_space_admits_are_refused() -> None:
    longest = "type [1] [" + "x" * (MAX_ACTION_LENGTH - 15) + "] [0]"
    assert len(longest) == MAX_ACTION_LENGTH and read_action(longest).action is not None
    read = read_action(longest + " ")
    assert read.action is None and len(read.shown) <= 200
    length = MAX_ACTION_LENGTH + 1
    assert read.error == f"invalid action: the action is {length} characters long, more than the 4096 allowed"


def test_fit_observation_keeps_every_field_in_the_space() -> None:
    huge = {"goal": "g" * 300_000, "url": "u" * 300_000, "axtree": "line\n" * 100_000,
            "last_action": "a" * 300_000, "last_action_error": "e" * 300_000}  # fmt: skip
    fitted = fit_observation(huge)
    assert fitted in web_observation_space() and all(len(v) <= MAX_TEXT_LENGTH for v in fitted.values())
    assert fitted["axtree"].endswith("more lines cut)")


# ---------------------------------------------------------------------------- real Chromium


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_page_with_300k_buttons_gives_a_bounded_observation(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button", step_timeout_s=240.0)
    try:
        observation, _ = env.reset(options={"task_seed": 1})
        # Chromium lays the page out once (~20 s here): the harness waits for that, not the step.
        env.unwrapped.run_in_browser(
            lambda page: page.evaluate(
                "() => { document.body.innerHTML += '<button>x</button>'.repeat(300000);"
                " return document.getElementsByTagName('*').length; }"
            )
        )
        observation, reward, terminated, truncated, info = env.step("scroll [down]")
        assert info["error"] == "" and not truncated
        assert "elements, more than the 20000 an observation may show" in observation["axtree"]
        assert observation in web_observation_space()
        # The agent may still act: the page is not extracted, but it is there.
        observation, *_ = env.step("type [1] [" + "x" * 1_000_000 + "] [0]")
        assert "more than the 4096 allowed" in observation["last_action_error"]
        assert observation in web_observation_space() and len(observation["last_action"]) <= 200
    finally:
        env.close()


@pytest.mark.browser
def test_a_page_just_under_the_element_limit_is_extracted(require_browser: None) -> None:
    env = gym.make("RealWeb-v0", task="miniwob.click-button", max_page_elements=400)
    try:
        env.reset(options={"task_seed": 1})
        env.unwrapped.run_in_browser(
            lambda page: page.evaluate("() => { document.body.innerHTML += '<button>y</button>'.repeat(300); }")
        )
        observation, *_ = env.step("scroll [down]")
        assert observation["axtree"].count("button 'y'") == 300
        env.unwrapped.run_in_browser(
            lambda page: page.evaluate("() => { document.body.innerHTML += '<button>z</button>'.repeat(100); }")
        )
        observation, *_ = env.step("scroll [up]")
        assert "more than the 400 an observation may show" in observation["axtree"]
    finally:
        env.close()
