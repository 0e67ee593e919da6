"""DreamWeb-v0 refuses what RealWeb-v0 refuses, in the same words (issue #15, item 2), and stays bounded.

A policy must not be able to tell a dream from the real web by what it may do: navigations out of
the task are refused before any model call, a world model's predicted address out of the task (or
with control bytes) is refused as the browser would refuse it, and every observation fits the space.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.data.start_states import StartState
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.llm.base import Generation
from dynaweb_env.navigation import NavigationPolicy
from dynaweb_env.spaces import MAX_TEXT_LENGTH, web_observation_space
from dynaweb_env.world_model import format_world_model_target
from dynaweb_env.world_model.judge import JUDGE_SYSTEM_PROMPT

URL = "file:///srv/pages/miniwob/click-button.html"
TREE = (
    "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] link 'away', url='file:///etc/passwd'\n"
    "\t[15] link 'next', url='file:///srv/pages/miniwob/next.html'\n"
    "\t[16] link 'script', url=\"javascript:location.href='file:///etc/hosts'\""
)
REFUSED = [
    "file:///etc/passwd", "file:///", "../", "data:text/html,<script>x</script>", "javascript:alert(1)",
    "chrome://version", "about:version", "blob:file:///0c1e", "http://169.254.169.254/latest/meta-data/",
]  # fmt: skip


class PredictingBackend:
    """World model predicting ``next_url`` (and the same tree); judge always FAILURE. Counts model calls."""

    model_name = "predicting"

    def __init__(self, next_url: str = ""):
        self.next_url = next_url
        self.calls = 0

    def generate(self, conversations, params):
        self.calls += 1
        if conversations[0][0]["content"] == JUDGE_SYSTEM_PROMPT:
            return [Generation(text="REASONING: no.\nVERDICT: FAILURE") for _ in conversations]
        return [Generation(text=format_world_model_target("moved.", self.next_url, TREE)) for _ in conversations]

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError


def _start_state(url: str = URL, axtree: str = TREE, history: list[str] | None = None) -> StartState:
    return StartState("miniwob.click-button", "Click ONE.", url, axtree, "t/0", 0, history or [])


@pytest.fixture()
def start_file(tmp_path) -> str:
    path = tmp_path / "start.jsonl"
    steps = [Step(URL, TREE, "click [13]"), Step(URL, TREE, "")]
    write_trajectories(path, [Trajectory("t", "miniwob.click-button", "Click ONE.", "expert", steps, True, 1.0)])
    return str(path)


def _dream(start_file: str, backend: PredictingBackend, **kwargs) -> DreamWebEnv:
    return DreamWebEnv(world_model=backend, judge="world_model", start_states=start_file, dream_length=20, **kwargs)


@pytest.mark.parametrize("target", REFUSED)
def test_goto_out_of_the_task_is_refused_without_a_model_call(start_file: str, target: str) -> None:
    backend = PredictingBackend()
    env = _dream(start_file, backend)
    env.reset(options={"start_state": _start_state()})
    observation, reward, terminated, truncated, info = env.step(f"goto [{target}]")
    assert observation["last_action_error"] == NavigationPolicy.for_start_url(URL).refusal(target, base_url=URL)
    assert "refused" in observation["last_action_error"]
    assert (observation["url"], observation["axtree"], reward, terminated, truncated) == (URL, TREE, 0.0, False, False)
    assert backend.calls == 0 and info["dream_step"] == 1


def test_link_clicks_are_checked_as_in_the_real_env(start_file: str) -> None:
    backend = PredictingBackend()
    env = _dream(start_file, backend)
    env.reset(options={"start_state": _start_state()})
    observation, *_ = env.step("click [14]")
    assert observation["last_action_error"] == NavigationPolicy.for_start_url(URL).refusal("file:///etc/passwd")
    assert backend.calls == 0
    for allowed in ("click [15]", "click [16]"):  # inside the task; a page's own script link
        observation, *_ = env.step(allowed)
        assert observation["last_action_error"] == ""
    assert backend.calls == 2


@pytest.mark.parametrize(
    "predicted",
    ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,x", "file:///srv/pages/miniwob/a\x07.html"],
)
def test_a_predicted_address_out_of_the_task_is_refused(start_file: str, predicted: str) -> None:
    env = _dream(start_file, PredictingBackend(predicted))
    env.reset(options={"start_state": _start_state()})
    observation, _, terminated, _, info = env.step("click [13]")
    assert observation["url"] == URL and observation["axtree"] == TREE and not terminated
    assert observation["last_action_error"] == NavigationPolicy.for_start_url(URL).refusal(predicted, URL)
    assert info["world_model_error"].startswith("predicted URL refused: navigation")


def test_a_predicted_address_inside_the_task_is_followed(start_file: str) -> None:
    env = _dream(start_file, PredictingBackend("file:///srv/pages/miniwob/next.html"))
    env.reset(options={"start_state": _start_state()})
    observation, *_ = env.step("click [13]")
    assert observation["url"] == "file:///srv/pages/miniwob/next.html" and observation["last_action_error"] == ""


def test_dream_observations_fit_the_space(start_file: str) -> None:
    huge_tree = "RootWebArea 'big'\n" + "\t[1] button 'x'\n" * 30_000
    env = _dream(start_file, PredictingBackend())
    long_history = ["type [1] [" + "y" * 300_000 + "] [0]"]
    observation, _ = env.reset(options={"start_state": _start_state(axtree=huge_tree, history=long_history)})
    assert observation in web_observation_space()
    assert len(observation["axtree"]) <= MAX_TEXT_LENGTH and observation["axtree"].endswith("more lines cut)")
    observation, *_ = env.step("type [1] [" + "z" * 1_000_000 + "] [0]")
    assert "more than the 4096 allowed" in observation["last_action_error"] and observation in web_observation_space()


# ---------------------------------------------------------------------------- the same words as the real env


@pytest.mark.browser
def test_dream_and_real_refuse_in_the_same_words(real_web_env: gym.Env, start_file: str) -> None:
    real_observation, _ = real_web_env.reset(options={"task": "miniwob.click-button", "task_seed": 2})
    start = StartState("miniwob.click-button", real_observation["goal"], real_observation["url"],
                       real_observation["axtree"], "real/0", 0, [])  # fmt: skip
    dream = _dream(start_file, PredictingBackend())
    dream.reset(options={"start_state": start})
    real_web_env.unwrapped.max_steps = 20  # the episode ends after max_steps: these steps must fit in one
    try:
        for target in [*REFUSED, "chrome-extension://x/y.html", "file:///srv/a\x01b.html", "http://[::1]:8080/"]:
            action = f"goto [{target}]"
            real_error = real_web_env.step(action)[0]["last_action_error"]
            dream_error = dream.step(action)[0]["last_action_error"]
            assert real_error == dream_error and "refused" in real_error, (target, real_error, dream_error)
        for action in ("x" * 5000, "click 12", "type [13]", "scroll [left]"):
            assert real_web_env.step(action)[0]["last_action_error"] == dream.step(action)[0]["last_action_error"]
    finally:
        real_web_env.unwrapped.max_steps = 10
