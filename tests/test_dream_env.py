"""DreamWeb-v0: start states, step/reward logic, malformed input, determinism, real models."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.schema import SchemaError, Step, Trajectory
from dynaweb_env.data.start_states import (
    StartState,
    builtin_start_states_path,
    load_start_states,
    sample_start_state,
    start_states_from_trajectories,
)
from dynaweb_env.envs.dream import DreamWebEnv, resolve_world_model
from dynaweb_env.llm.base import Generation
from dynaweb_env.observation import axtree_element_ids
from dynaweb_env.spaces import web_action_space, web_observation_space
from dynaweb_env.world_model import format_world_model_target
from dynaweb_env.world_model.judge import JUDGE_SYSTEM_PROMPT

TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"
FORM = "RootWebArea 'Enter Text', focused\n\t[5] textbox 'name'\n\t[7] button 'Submit'"


def fixture_trajectories() -> list[Trajectory]:
    click = [
        Trajectory(
            id=f"click/{seed}",
            task_id="miniwob.click-button",
            goal='Click on the "ONE" button.',
            source="expert",
            steps=[Step("file:///click.html", TREE, "click [13]"), Step("file:///click.html", TREE, "")],
            success=True,
            reward=1.0,
            metadata={"seed": seed, "split": "train"},
        )
        for seed in (1, 2)
    ]
    form = Trajectory(
        id="form/3",
        task_id="miniwob.enter-text",
        goal='Enter "Kay" and press Submit.',
        source="expert",
        steps=[
            Step("file:///form.html", FORM, "type [5] [Kay] [0]"),
            Step("file:///form.html", FORM.replace("'name'", "'name' value='Kay'"), "click [7]"),
            Step("file:///form.html", FORM, "stop [N/A]"),
        ],
        success=True,
        reward=1.0,
        metadata={"seed": 3, "split": "test"},
    )
    return [*click, form]


@pytest.fixture()
def start_file(tmp_path):
    path = tmp_path / "start.jsonl"
    write_trajectories(path, fixture_trajectories())
    return str(path)


class ScriptedBackend:
    """Plays world model and judge from the conversation; counts calls. For unit tests of env logic.

    World model: ``click [14]`` ends the episode, ``hover [14]`` yields a malformed output, any other
    action marks the clicked/typed element as focused. Judge: SUCCESS iff the answer is ``ONE``.
    """

    model_name = "scripted"

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.conversations: list[list[dict[str, str]]] = []

    def generate(self, conversations, params):
        kind = "judge" if conversations[0][0]["content"] == JUDGE_SYSTEM_PROMPT else "world_model"
        self.calls.append((kind, len(conversations)))
        self.conversations.extend(conversations)
        return [Generation(text=self._respond(kind, conv[1]["content"])) for conv in conversations]

    def _respond(self, kind: str, user: str) -> str:
        if kind == "judge":
            verdict = "SUCCESS" if "AGENT ANSWER: ONE" in user else "FAILURE"
            return f"REASONING: checked the answer.\nVERDICT: {verdict}"
        action = user.rsplit("CURRENT ACTION: ", 1)[1]
        if action == "hover [14]":
            return "I am not sure what happens."
        tree = user.split("CURRENT ACCESSIBILITY TREE:\n", 1)[1].split("\nPREVIOUS ACTION:", 1)[0]
        element = re.search(r"\[(\d+)\]", action).group(1)
        tree = re.sub(rf"(\[{element}\] [^\n]*)", r"\1, focused", tree)
        return format_world_model_target(f"{action} focuses element {element}.", "", tree, action == "click [14]")

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError

    def count(self, kind: str) -> int:
        return sum(1 for called, _ in self.calls if called == kind)


def make_env(start_file, backend=None, **kwargs) -> DreamWebEnv:
    kwargs.setdefault("judge", "world_model")  # the scripted backend plays the judge too
    return DreamWebEnv(world_model=backend or ScriptedBackend(), start_states=start_file, **kwargs)


# --- start states ----------------------------------------------------------------------------


def test_start_states_initial_and_intermediate():
    states = start_states_from_trajectories(fixture_trajectories())
    # click: initial only (its second page is final); form: initial and intermediate (not the stop page).
    assert [(s.trajectory_id, s.step_index) for s in states] == [
        ("click/1", 0),
        ("click/2", 0),
        ("form/3", 0),
        ("form/3", 1),
    ]
    assert states[3].history == ["type [5] [Kay] [0]"] and states[3].task_seed == 3
    assert states[3].history_targets == ["[5] textbox 'name'"]  # the element typed into, on its page
    assert "value='Kay'" in states[3].axtree
    initial = start_states_from_trajectories(fixture_trajectories(), include_intermediate=False)
    assert [s.step_index for s in initial] == [0, 0, 0]
    assert [s.trajectory_id for s in start_states_from_trajectories(fixture_trajectories(), split="test")] == [
        "form/3"
    ] * 2


def test_start_state_dict_round_trip_and_errors():
    state = start_states_from_trajectories(fixture_trajectories())[3]
    assert StartState.from_dict(state.to_dict()) == state
    old_record = {key: value for key, value in state.to_dict().items() if key != "history_targets"}
    assert StartState.from_dict(old_record).history_targets == []  # start-state files written before the field
    for bad in (
        {"task_id": "t"},
        {**state.to_dict(), "history": "click [1]"},
        {**state.to_dict(), "extra": 1},
        {**state.to_dict(), "history_targets": ["a", "b"]},  # not one per history action
    ):
        with pytest.raises(SchemaError):
            StartState.from_dict(bad)


def test_sample_start_state_uses_the_generator(start_file):
    states = load_start_states(start_file)
    draws = [sample_start_state(states, np.random.default_rng(5)).trajectory_id for _ in range(3)]
    assert len(set(draws)) == 1
    assert {sample_start_state(states, np.random.default_rng(i)).step_index for i in range(40)} == {0, 1}
    with pytest.raises(ValueError, match="empty"):
        sample_start_state([], np.random.default_rng(0))
    with pytest.raises(FileNotFoundError):
        load_start_states(start_file + ".missing")


def test_shipped_start_states_load_by_default():
    if not builtin_start_states_path().exists():
        pytest.fail(f"shipped start states missing: {builtin_start_states_path()}")
    states = load_start_states(None)
    assert states and all(s.axtree.strip() and s.goal and s.task_id.startswith("miniwob.") for s in states)
    assert any(s.step_index > 0 for s in states) and any(s.task_seed is not None for s in states)


# --- env logic (scripted backend) ------------------------------------------------------------


def test_spaces_and_check_env(start_file):
    env = make_env(start_file)
    assert env.observation_space == web_observation_space()
    assert env.action_space == web_action_space()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


def test_stop_is_judged_and_terminates(start_file):
    backend = ScriptedBackend()
    env = make_env(start_file, backend)
    observation, info = env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 2})
    assert info == {
        "task_id": "miniwob.click-button",
        "source": "dream",
        "trajectory_id": "click/2",
        "start_step_index": 0,
        "start_history": (),
    }
    assert observation["axtree"] == TREE and observation["last_action"] == ""
    observation, reward, terminated, truncated, info = env.step("click [13]")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "[13] button 'ONE', focused" in observation["axtree"] and observation["last_action"] == "click [13]"
    assert info["changes"] == "click [13] focuses element 13." and info["world_model_error"] == ""
    response = "REASON: The ONE button is focused, so I am done.\nACTION: stop [ONE]"
    observation, reward, terminated, truncated, info = env.step(response)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert observation["last_action"] == "stop [ONE]" and info["end_reason"] == "stop"
    assert info["judge_reasoning"] == "checked the answer." and info["judge_error"] == ""
    assert backend.calls == [("world_model", 1), ("judge", 1)]
    judged = backend.conversations[-1][1]["content"]
    # Each action shows the element it acted on, as it was on the page the action was taken on.
    assert "1. click [13]\n   ELEMENT: [13] button 'ONE'\n2. stop [ONE]\n   REASON: The ONE button is focused" in judged
    with pytest.raises(gym.error.ResetNeeded):
        env.step("click [13]")


MALFORMED_ACTIONS = [
    "",
    "clik [13]",
    "click 13",
    "type [13]",
    "scroll [left]",
    "REASON: hmm\nACTION: jump [3]",
    "x" * 5000,
]


@pytest.mark.parametrize(
    "action", [*MALFORMED_ACTIONS, "click [99]", "REASON: r\nACTION: type [99] [a] [0]", "type [13] [a] [0]"]
)
def test_malformed_action_costs_a_step_without_a_model_call(start_file, action):
    backend = ScriptedBackend()
    env = make_env(start_file, backend, dream_length=2)
    before, _ = env.reset(seed=1, options={"task": "miniwob.click-button"})
    observation, reward, terminated, truncated, info = env.step(action)
    assert observation["axtree"] == before["axtree"] and observation["url"] == before["url"]
    assert env.observation_space.contains(observation) and len(observation["last_action"]) <= 200
    # Worded as RealWeb-v0 words it: a parse error, or BrowserGym's missing-element message.
    # Typing into button [13] fails in a real browser as Playwright words it.
    expected = 'Could not find element with bid "99"' if "[99]" in action else "invalid action: "
    if action == "type [13] [a] [0]":
        expected = "Element is not an <input>, <textarea> or [contenteditable]"
    assert expected in observation["last_action_error"]
    assert (reward, terminated, truncated) == (0.0, False, False) and backend.calls == []
    observation, reward, terminated, truncated, info = env.step(action)
    # Truncated at dream_length; no valid action was taken, so no judge call and reward 0.
    assert (reward, terminated, truncated) == (0.0, False, True) and backend.calls == []
    assert info["end_reason"] == "dream_length" and info["judge_reasoning"] == "the dream took no valid action"


def test_non_string_action_is_an_error_not_a_crash(start_file):
    env = make_env(start_file)
    env.reset(seed=0)
    observation, *_ = env.step(None)  # type: ignore[arg-type]
    assert "must be a string" in observation["last_action_error"]


def test_world_model_terminal_state_ends_the_dream_with_a_verdict(start_file):
    backend = ScriptedBackend()
    env = make_env(start_file, backend)
    env.reset(seed=0, options={"task": "miniwob.click-button"})
    _, reward, terminated, truncated, info = env.step("click [14]")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["end_reason"] == "terminal_state" and backend.calls == [("world_model", 1), ("judge", 1)]
    assert "AGENT ANSWER: None" in backend.conversations[-1][1]["content"]


def test_truncation_is_judged_and_malformed_world_model_output_keeps_the_page(start_file):
    backend = ScriptedBackend()
    env = make_env(start_file, backend, dream_length=2)
    before, _ = env.reset(seed=0, options={"task": "miniwob.click-button"})
    observation, _, _, _, info = env.step("hover [14]")
    assert observation["axtree"] == before["axtree"] and "missing sections" in info["world_model_error"]
    _, reward, terminated, truncated, info = env.step("click [13]")
    assert (reward, terminated, truncated) == (0.0, False, True) and info["end_reason"] == "dream_length"
    assert backend.calls == [("world_model", 1), ("world_model", 1), ("judge", 1)]
    # The world model sees the previous action.
    assert "PREVIOUS ACTION: hover [14]\nCURRENT ACTION: click [13]" in backend.conversations[1][1]["content"]


def test_intermediate_start_state_shows_and_judges_the_recorded_history(start_file):
    backend = ScriptedBackend()
    env = make_env(start_file, backend)
    observation, info = env.reset(options={"task": "miniwob.enter-text", "task_seed": 3, "step_index": 1})
    assert info["start_step_index"] == 1 and observation["last_action"] == "type [5] [Kay] [0]"
    assert info["start_history"] == ("type [5] [Kay] [0]",)
    _, _, _, _, step_info = env.step("stop [done]")
    assert "start_history" not in step_info  # reset's alone
    judged = backend.conversations[-1][1]["content"]
    assert "1. type [5] [Kay] [0]\n   ELEMENT: [5] textbox 'name'\n2. stop [done]" in judged


def test_reset_options_pin_the_start_state(start_file):
    env = make_env(start_file)
    state = start_states_from_trajectories(fixture_trajectories())[3]
    for options in ({"start_state": state}, {"start_state": state.to_dict()}):
        observation, info = env.reset(seed=123, options=options)
        assert observation["axtree"] == state.axtree and info["trajectory_id"] == "form/3"
    for options, message in (
        ({"task": "miniwob.nope"}, "no start state for task"),
        ({"task": "miniwob.click-button", "task_seed": 9}, "task_seed=9"),
        ({"start_state": 3}, "must be a StartState"),
    ):
        with pytest.raises(ValueError, match=message):
            env.reset(options=options)


def test_tasks_filter_and_bad_arguments(start_file):
    env = make_env(start_file, tasks=["miniwob.enter-text"])
    assert {env.reset(seed=i)[1]["task_id"] for i in range(10)} == {"miniwob.enter-text"}
    for kwargs, message in (
        ({"tasks": ["miniwob.nope"]}, "unknown task"),
        ({"dream_length": 0}, "dream_length"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"world_model_temperature": -1.0}, "temperature"),
        ({"render_mode": "human"}, "render_mode"),
        ({"max_axtree_chars": -5}, "max_axtree_chars"),
        ({"backend": "no-such-model"}, "neither an embedded model"),
        ({"output_mode": "html"}, "output_mode"),
        ({"backend": "smollm2-135m-wm", "output_mode": "patch"}, "writes output_mode='tree'"),
        ({"backend": 42}, "expected a backend spec"),
        ({"judge": "openai:m"}, "openai spec"),
    ):
        with pytest.raises(ValueError, match=message):
            make_env(start_file, **kwargs)


def test_render_ansi(start_file):
    env = make_env(start_file, render_mode="ansi")
    env.reset(seed=0, options={"task": "miniwob.click-button"})
    env.step("click [13]")
    text = env.render()
    assert text.startswith("[dream miniwob.click-button step 1]") and "PREVIOUS ACTION: click [13]" in text


# --- registered env, real models -------------------------------------------------------------


def test_check_env_on_the_default_registration():
    """``gym.make("DreamWeb-v0")`` with no arguments: shipped world model, shipped start states.

    ``check_env`` steps with random strings, which are malformed actions: they cost steps without
    model calls, so the embedded model is never loaded here and the check takes about a second.
    """
    env = gym.make("DreamWeb-v0")
    assert env.observation_space == web_observation_space() and env.action_space == web_action_space()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    assert not env.unwrapped.dynamics.models_loaded  # models are built lazily


@pytest.mark.parametrize(
    ("world_model", "output_mode", "expected"),
    [
        (None, None, ("smollm2-135m-wm-patch-all", "patch")),  # the shipped world model trained on all tasks
        (None, "tree", ("smollm2-135m-wm", "tree")),
        (None, "patch", ("smollm2-135m-wm-patch-all", "patch")),
        ("smollm2-135m-wm-patch", None, ("smollm2-135m-wm-patch", "patch")),  # a shipped adapter knows its mode
        ("smollm2-135m-wm-patch-all", None, ("smollm2-135m-wm-patch-all", "patch")),
        ("smollm2-135m", "patch", ("smollm2-135m", "patch")),
        ("smollm2-135m", None, ("smollm2-135m", "tree")),
    ],
)
def test_default_world_model_follows_the_output_mode(world_model, output_mode, expected):
    assert resolve_world_model(world_model, output_mode) == expected


def _rollout(env, seed: int, steps: int) -> list:
    """Click the elements of the page in turn (valid actions, so every step asks the world model)."""
    trace = [env.reset(seed=seed)]
    for step in range(steps):
        element_ids = axtree_element_ids(trace[-1][0]["axtree"])
        observation, reward, terminated, truncated, info = env.step(f"click [{element_ids[step % len(element_ids)]}]")
        trace.append((observation, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return trace


def test_same_seed_and_greedy_give_the_same_rollout_on_a_real_model():
    # Shipped start states (the default), a real (tiny random) model, greedy world model.
    kwargs = {"world_model": "tiny-random", "judge": "world_model", "world_model_temperature": 0.0}
    kwargs |= {"max_new_tokens": 16, "judge_max_new_tokens": 8, "dream_length": 3}
    first = _rollout(gym.make("DreamWeb-v0", **kwargs), 11, 3)
    second = _rollout(gym.make("DreamWeb-v0", **kwargs), 11, 3)
    assert first == second and len(first) == 4
    final_info = first[-1][4]
    # The random model produces no usable tree or verdict: both are reported, the dream goes on.
    assert all(step[4]["world_model_error"] for step in first[1:]) and final_info["judge_error"]
    assert first[-1][1] == 0.0
    assert first[-1][3] and final_info["end_reason"] == "dream_length"


def test_sampled_world_model_is_seeded_from_the_env():
    env = gym.make("DreamWeb-v0", world_model="tiny-random", judge="world_model", max_new_tokens=12)
    changes = []
    for seed in (4, 4, 5):
        env.reset(seed=seed, options={"task": "miniwob.click-button", "task_seed": 0})
        changes.append(env.step("click [13]")[4]["changes"])
    assert changes[0] == changes[1] != changes[2]


# --- judge on demand ---------------------------------------------------------------------------


def test_finish_judges_a_running_dream_now_and_only_once(start_file):
    backend = ScriptedBackend()
    env = make_env(start_file, backend)
    with pytest.raises(gym.error.ResetNeeded):
        env.finish()
    env.reset(seed=0, options={"task": "miniwob.click-button", "task_seed": 2})
    *_, info = env.step("click [13]")
    assert info["judged"] is False and "end_reason" not in info
    reward, info = env.finish()
    assert reward == 0.0 and info["judged"] is True and info["end_reason"] == "finish"
    assert info["judge_reasoning"] == "checked the answer." and info["dream_step"] == 1
    assert backend.calls == [("world_model", 1), ("judge", 1)]
    assert env.finish() == (reward, info) and backend.count("judge") == 1  # the verdict is kept
    with pytest.raises(gym.error.ResetNeeded):
        env.step("click [13]")


def test_finish_after_the_dream_ended_returns_its_verdict(start_file):
    backend = ScriptedBackend()
    env = gym.make(
        "DreamWeb-v0",
        world_model=backend,
        judge="world_model",
        start_states=start_file,
        reward_guards={"objective_check": False},
    )  # "stop [ONE]" never clicks the ONE the goal names
    env.reset(seed=0, options={"task": "miniwob.click-button"})
    _, reward, terminated, _, info = env.step("stop [ONE]")
    assert terminated and reward == 1.0 and info["judged"] is True
    assert env.unwrapped.finish() == (1.0, info) and backend.count("judge") == 1
    env.reset(seed=0, options={"task": "miniwob.click-button"})
    reward, info = env.unwrapped.finish()  # nothing done: scored 0 by rule, still a verdict
    assert (reward, info["judged"], info["judge_reasoning"]) == (0.0, True, "the dream took no valid action")
    assert backend.count("judge") == 1
