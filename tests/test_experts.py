"""Scripted experts, record_episode, and the shipped start-state dataset recorded with them."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import dynaweb_env
from dynaweb_env.actions import parse_action
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.experts import (
    EXPERTS,
    ExpertError,
    ExpertPolicy,
    find_by_role_and_name,
    get_expert,
    parse_axtree,
    register_expert,
)
from dynaweb_env.spaces import web_action_space, web_observation_space
from dynaweb_trainer.collect import main as collect_main
from dynaweb_trainer.collect import record_episode

BUILTIN = Path(dynaweb_env.__file__).parent / "data" / "builtin" / "miniwob_small.jsonl"
#: The experts of :mod:`dynaweb_env.experts.miniwob`, whose demonstrations are the shipped dataset.
BASIC_TASKS = sorted(task for task, expert in EXPERTS.items() if type(expert).__module__.endswith("experts.miniwob"))

TREE = """RootWebArea 'Login User Task', focused, url='file:///x/login-user.html'
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t[16] textbox '' value='it\\'s me', focused
\t[18] checkbox 'Gh', checked='true'
\t[19] tab 'Section #1', expanded=False, selected=False
\t[20] button 'Login'"""


def _observation(goal: str, axtree: str, last_action: str = "", error: str = "") -> dict[str, str]:
    return {"goal": goal, "url": "file:///x.html", "axtree": axtree, "last_action": last_action,
            "last_action_error": error}  # fmt: skip


# ---------------------------------------------------------------------------- tree helpers


def test_parse_axtree_reads_bids_roles_names_and_attributes() -> None:
    nodes = parse_axtree(TREE)
    assert [node.role for node in nodes][:4] == ["RootWebArea", "paragraph", "LabelText", "StaticText"]
    root, textbox = nodes[0], nodes[4]
    assert root.bid is None and root.name == "Login User Task" and root.attributes["focused"] == "True"
    assert (textbox.bid, textbox.role, textbox.depth, textbox.value) == ("16", "textbox", 2, "it's me")
    assert nodes[3].bid is None and nodes[3].name == "Username"
    assert nodes[5].checked and not nodes[6].expanded and nodes[6].attributes["selected"] == "False"


def test_find_by_role_and_name() -> None:
    nodes = parse_axtree(TREE)
    assert find_by_role_and_name(nodes, "button", "Login").bid == "20"
    assert find_by_role_and_name(nodes, "button", "login") is None
    assert find_by_role_and_name(nodes, "button", "login", case_sensitive=False).bid == "20"
    assert find_by_role_and_name(nodes, "tab", "Section", exact=False).bid == "19"
    assert find_by_role_and_name(nodes, "StaticText", "Username") is None  # no bid: not actionable


# ---------------------------------------------------------------------------- registry


def test_registry() -> None:
    assert len(EXPERTS) >= 4
    assert {"miniwob.click-button", "miniwob.enter-text", "miniwob.click-checkboxes"} <= set(EXPERTS)
    assert all(expert.task_id == task_id for task_id, expert in EXPERTS.items())
    with pytest.raises(KeyError, match="experts exist for: .*miniwob.click-button"):
        get_expert("miniwob.no-such-task")
    with pytest.raises(ValueError, match="already registered"):
        register_expert(type(get_expert("miniwob.click-button")))
    with pytest.raises(ValueError, match="must set task_id"):
        register_expert(type("Nameless", (ExpertPolicy,), {}))


def test_experts_answer_in_the_grammar_and_the_response_format() -> None:
    observation = _observation(
        'Click on the "ONE" button.', "RootWebArea 'x'\n\t[13] button 'ONE'\n\t[14] button 'TWO'"
    )
    expert = get_expert("miniwob.click-button")
    reasoning, action = expert.act(observation)
    assert action == "click [13]" and "ONE" in reasoning
    assert expert.respond(observation) == f"REASON: {reasoning}\nACTION: click [13]"


def test_expert_reports_a_page_that_does_not_fit() -> None:
    observation = _observation('Click on the "ONE" button.', "RootWebArea 'x'\n\t[14] button 'TWO'")
    with pytest.raises(ExpertError, match="expected button 'ONE'"):
        get_expert("miniwob.click-button").act(observation)
    with pytest.raises(ExpertError, match="does not match"):
        get_expert("miniwob.enter-text").act(_observation("Something else entirely.", "RootWebArea 'x'"))


@pytest.mark.parametrize(
    ("goal", "checked", "expected"),
    [
        ("Select A, B and click Submit.", {"A"}, "click [2]"),  # tick B
        ("Select A and click Submit.", {"A", "C"}, "click [3]"),  # untick C
        ("Select nothing and click Submit.", set(), "click [9]"),
        ("Select A, B, C and click Submit.", {"A", "B", "C"}, "click [9]"),
    ],
)
def test_click_checkboxes_expert(goal: str, checked: set[str], expected: str) -> None:
    lines = ["RootWebArea 'Click Checkboxes Task'"]
    for bid, name in (("1", "A"), ("2", "B"), ("3", "C")):
        lines.append(f"\t[{bid}] checkbox '{name}', checked='{str(name in checked).lower()}'")
    lines.append("\t[9] button 'Submit'")
    assert get_expert("miniwob.click-checkboxes").act(_observation(goal, "\n".join(lines)))[1] == expected


def test_password_experts_read_progress_from_the_last_action() -> None:
    tree = "RootWebArea 'x'\n\t[16] textbox ''\n\t[19] textbox ''\n\t[20] button 'Submit'"
    expert = get_expert("miniwob.enter-password")
    goal = 'Enter the password "pw" into both text fields and press submit.'
    assert expert.act(_observation(goal, tree))[1] == "type [16] [pw] [0]"
    assert expert.act(_observation(goal, tree, last_action="type [16] [pw] [0]"))[1] == "type [19] [pw] [0]"
    assert expert.act(_observation(goal, tree, last_action="type [19] [pw] [0]"))[1] == "click [20]"
    failed = _observation(goal, tree, last_action="type [19] [pw] [0]", error="TimeoutError")
    assert expert.act(failed)[1] == "type [16] [pw] [0]"


# ---------------------------------------------------------------------------- shipped dataset


def test_shipped_dataset_is_small_valid_and_successful() -> None:
    assert BUILTIN.stat().st_size < 1_000_000
    trajectories = read_trajectories(BUILTIN, on_error="raise")
    assert len(trajectories) >= 20
    assert set(BASIC_TASKS) <= {t.task_id for t in trajectories} <= set(EXPERTS)
    assert all(t.source == "expert" and t.success and t.reward == 1.0 for t in trajectories)
    assert {t.metadata["split"] for t in trajectories} == {"train", "test"}
    assert len({t.id for t in trajectories}) == len(trajectories)
    for trajectory in trajectories:
        assert isinstance(trajectory.metadata["seed"], int)
        assert trajectory.steps[-1].action == "" and len(trajectory.steps) == len(trajectory.actions) + 1
        for step in trajectory.steps[:-1]:
            parse_action(step.action)
            assert step.url.startswith("file://") and step.axtree.startswith("RootWebArea")


def test_experts_reproduce_the_shipped_demonstrations() -> None:
    # Each recorded step's observation, fed back to the expert, gives the recorded action: the
    # experts read only the observation, and the data is what they did on the real pages.
    for trajectory in read_trajectories(BUILTIN, on_error="raise"):
        expert = get_expert(trajectory.task_id)
        previous = ""
        for step in trajectory.steps[:-1]:
            observation = _observation(trajectory.goal, step.axtree, previous, step.last_action_error)
            assert expert.act(observation)[1] == step.action, trajectory.id
            previous = step.action


# ---------------------------------------------------------------------------- record_episode without a browser


class _ScriptedEnv(gym.Env):
    """Two pages; ``click [1]`` on the first finishes the task, anything else keeps the page."""

    observation_space = web_observation_space()
    action_space = web_action_space()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.options = options
        return _observation("Click one.", "RootWebArea 'a'\n\t[1] button 'one'"), {}

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        done = action == "click [1]" or action.startswith("stop")
        observation = _observation("Click one.", "RootWebArea 'b'", last_action=action)
        return observation, float(action == "click [1]"), done, False, {}


def test_record_episode_with_a_callable_policy() -> None:
    env = _ScriptedEnv()
    trajectory = record_episode(env, lambda obs: ("the button", "click [1]"), "toy.task", 7, metadata={"split": "test"})
    assert env.options == {"task": "toy.task", "task_seed": 7}
    assert [step.action for step in trajectory.steps] == ["click [1]", ""]
    assert trajectory.steps[0].reasoning == "the button" and trajectory.steps[1].axtree == "RootWebArea 'b'"
    assert (trajectory.success, trajectory.reward, trajectory.source) == (True, 1.0, "expert")
    assert trajectory.metadata["split"] == "test" and trajectory.metadata["seed"] == 7
    assert trajectory.metadata["end_reason"] == "terminated" and trajectory.id == "toy.task/seed-7/expert"


def test_record_episode_with_a_text_policy_that_stops() -> None:
    trajectory = record_episode(_ScriptedEnv(), lambda obs: "REASON: nothing to do.\nACTION: stop [N/A]", "t.t", 1,
                                source="real")  # fmt: skip
    assert [(s.action, s.reasoning) for s in trajectory.steps] == [("stop [N/A]", "nothing to do.")]
    assert not trajectory.success and trajectory.source == "real"


def test_record_episode_max_steps_and_bad_arguments() -> None:
    trajectory = record_episode(_ScriptedEnv(), lambda obs: ("", "click [2]"), "t.t", 1, max_steps=3)
    assert [s.action for s in trajectory.steps] == ["click [2]"] * 3 + [""]
    with pytest.raises(ValueError, match="source"):
        record_episode(_ScriptedEnv(), lambda obs: ("", "click [1]"), "t.t", 1, source="dreamt")


def test_expert_collection_rejects_a_task_without_expert(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert collect_main(["--output", str(tmp_path / "x.jsonl"), "--tasks", "miniwob.no-such-task"]) == 2
    assert "no scripted expert" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()


# ---------------------------------------------------------------------------- experts on real pages


@pytest.mark.browser
@pytest.mark.parametrize("task_id", BASIC_TASKS)
def test_expert_solves_its_task_on_a_real_page(real_web_env: gym.Env, task_id: str) -> None:
    # Seed 100 is not in the shipped data (seeds 0-4): a fresh page.
    trajectory = record_episode(real_web_env, get_expert(task_id), task_id, 100)
    assert trajectory.success, [(s.action, s.last_action_error) for s in trajectory.steps]
    assert trajectory.steps[-1].action == ""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("task_id", BASIC_TASKS)
def test_expert_solves_its_task_over_more_seeds(real_web_env: gym.Env, task_id: str) -> None:
    for seed in (101, 102, 103, 104, 105):
        trajectory = record_episode(real_web_env, get_expert(task_id), task_id, seed)
        assert trajectory.success, (seed, [(s.action, s.last_action_error) for s in trajectory.steps])


@pytest.mark.browser
def test_login_expert_retypes_a_wrong_username_on_a_real_page(real_web_env: gym.Env) -> None:
    # A wrong word in the username (a policy's or exploration's mistake) is visible, so the expert types it again
    # rather than counting the field filled because the last action typed into it.
    observation, _ = real_web_env.reset(options={"task": "miniwob.login-user", "task_seed": 109})
    expert = get_expert("miniwob.login-user")
    first = expert.act(observation)[1]
    assert first.startswith("type [")
    username_box = first.split("]")[0] + "]"
    observation, reward, terminated, truncated, _ = real_web_env.step(f"{username_box} [login] [0]")
    actions = []
    while not (terminated or truncated) and len(actions) < 5:
        actions.append(expert.act(observation)[1])
        observation, reward, terminated, truncated, _ = real_web_env.step(actions[-1])
    assert actions[0] == first and reward == 1.0, actions
