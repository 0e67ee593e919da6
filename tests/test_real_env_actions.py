"""The actions beyond the paper's twelve, driven on real MiniWoB++ pages through RealWeb-v0."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

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
