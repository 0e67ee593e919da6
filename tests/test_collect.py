"""dynaweb-collect: exploration actions, resume keys, cut-short files, and collections on toy and real pages."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from dynaweb_env.actions import parse_action
from dynaweb_env.data.io import read_trajectories
from dynaweb_env.data.shipped import split_of
from dynaweb_env.experts import EXPERTS, ExpertPolicy
from dynaweb_env.llm.base import SamplingParams
from dynaweb_env.observation import make_observation
from dynaweb_trainer.collect import CollectConfig, collect, main, policy_label, read_done
from dynaweb_trainer.encoding import EpisodeEncoder
from dynaweb_trainer.exploration import ExplorationPolicy, NearMissPolicy, near_miss, random_action
from dynaweb_trainer.identity_env import BUTTON_NAMES, TASK_ID, make_click_button_vector_env
from dynaweb_trainer.policy import PolicyTurn

FORM_TREE = (
    "RootWebArea 'Login'\n\t[14] paragraph ''\n\t\tStaticText 'Username'\n\t\t[16] textbox ''\n"
    "\t[19] textbox ''\n\t[20] button 'Login'\n\tStaticText 'no id here'"
)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model("tiny-random"))


class IdentityExpert(ExpertPolicy):
    """Clicks the button the identity task names (its ids are 1, 2, ... in name order)."""

    task_id = TASK_ID

    def act(self, observation):
        name = observation["goal"].split("'")[1]
        return f"The button named {name} is the one to click.", f"click [{BUTTON_NAMES.index(name) + 1}]"


@pytest.fixture()
def identity_expert(monkeypatch):
    monkeypatch.setitem(EXPERTS, TASK_ID, IdentityExpert())


def _config(tmp_path, **overrides) -> CollectConfig:
    values = {"tasks": [TASK_ID], "seeds": "0-3", "num_envs": 2, "max_steps": 3, "tokenizer": "tiny-random",
              "output": str(tmp_path / "out.jsonl")}  # fmt: skip
    return CollectConfig(**{**values, **overrides})


# ---------------------------------------------------------------------------- pure helpers


def test_split_rule_and_policy_labels(tmp_path):
    assert [split_of(seed) for seed in range(10)] == ["train"] * 4 + ["test"] + ["train"] * 4 + ["test"]
    assert policy_label(_config(tmp_path)) == "expert"
    assert policy_label(_config(tmp_path, policy="explore", epsilon=0.25, seed=3)) == "explore-e0.25-s3"
    assert policy_label(_config(tmp_path, policy="near-miss", epsilon=0.5)) == "near-miss-e0.5-s0"
    assert policy_label(_config(tmp_path, policy="runs/sft")) == "runs/sft"  # greedy: the seed plays no part
    assert policy_label(_config(tmp_path, policy="runs/sft", temperature=0.7, seed=1)) == "runs/sft@t0.7-s1"
    with pytest.raises(ValueError, match="epsilon"):
        _config(tmp_path, epsilon=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        _config(tmp_path, batch_size=0)


def test_random_actions_are_valid_varied_seeded_and_on_the_page():
    observation = make_observation('Enter the username "kenda" and press login.', "file:///x.html", FORM_TREE)
    actions = [random_action(observation, np.random.default_rng(seed))[1] for seed in range(300)]
    parsed = [parse_action(action) for action in actions]  # raises on anything outside the grammar
    assert {action.name for action in parsed} == {"click", "type", "hover", "scroll", "press"}
    assert {action.element_id for action in parsed if action.name in ("click", "hover")} == {"16", "19", "20"}
    typed = [action for action in parsed if action.name == "type"]
    assert {action.element_id for action in typed} == {"16", "19"}
    assert any(action.args[1] == "kenda" for action in typed) and {action.args[2] for action in typed} == {"0", "1"}
    again = [random_action(observation, np.random.default_rng(seed))[1] for seed in range(300)]
    assert again == actions
    reasoning, _ = random_action(observation, np.random.default_rng(0))
    assert reasoning.startswith("Exploring")
    bare = make_observation("Do something.", "file:///x.html", "RootWebArea ''\n\tStaticText 'text'")
    assert {parse_action(random_action(bare, np.random.default_rng(s))[1]).name for s in range(40)} <= {
        "scroll", "press"
    }  # fmt: skip


def _turn(encoder, page, task_id, turn):
    """The policy's view of an episode on ``page`` after ``turn`` turns, with task seed 7."""
    encoded = encoder.start(page)
    for _ in range(turn):
        encoded.add_policy_turn([encoder.eos_token_id])
    return PolicyTurn(page, {"task_id": task_id, "task_seed": 7}, encoded)


def test_exploration_mixes_the_expert_with_random_actions_reproducibly(tokenizer, identity_expert):
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=4000)
    page = make_observation("Click the button named 'TWO'.", "file:///identity.html",
                            "RootWebArea ''\n\t[1] button 'ONE'\n\t[2] button 'TWO'")  # fmt: skip

    def answers(epsilon, seed, turns=range(40), task_id=TASK_ID):
        policy = ExplorationPolicy(tokenizer, epsilon=epsilon, seed=seed)
        return [policy.act([_turn(encoder, page, task_id, turn)], SamplingParams())[0].text for turn in turns]

    assert all(text.endswith("ACTION: click [2]") and "Exploring" not in text for text in answers(0.0, 0))
    assert all("Exploring" in text for text in answers(1.0, 0))
    mixed = answers(0.5, 0)
    assert 5 < sum("Exploring" in text for text in mixed) < 35
    assert answers(0.5, 0) == mixed and answers(0.5, 1) != mixed  # seeded by (seed, task, task seed, turn)
    with pytest.raises(ValueError, match="epsilon"):
        ExplorationPolicy(tokenizer, epsilon=-0.1)
    # No expert for the task: every action is random.
    assert all("Exploring" in text for text in answers(0.0, 0, range(3), "miniwob.no-expert"))


def test_a_near_miss_aims_the_same_action_at_another_element_of_its_role():
    tree = FORM_TREE + "\n\t[21] button 'Cancel'\n\t[22] checkbox 'A'"
    observation = make_observation('Enter the username "kenda" and press login.', "file:///x.html", tree)
    clicks = {near_miss(observation, "click [20]", np.random.default_rng(seed))[1] for seed in range(20)}
    assert clicks == {"click [21]"}  # the other button; never the checkbox or a textbox
    reasoning, typed = near_miss(observation, "type [16] [kenda] [0]", np.random.default_rng(0))
    assert typed == "type [19] [kenda] [0]" and reasoning == "I type 'kenda' into the textbox [19]."
    # Nothing to aim at instead: the caller keeps the expert's action.
    assert near_miss(observation, "click [22]", np.random.default_rng(0)) is None  # the only checkbox
    assert near_miss(observation, "click [99]", np.random.default_rng(0)) is None  # not on the page
    assert near_miss(observation, "scroll [down]", np.random.default_rng(0)) is None
    assert near_miss(observation, "not an action", np.random.default_rng(0)) is None


def test_near_miss_policy_redirects_the_expert_reproducibly(tokenizer, identity_expert):
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=4000)
    page = make_observation("Click the button named 'TWO'.", "file:///identity.html",
                            "RootWebArea ''\n\t[1] button 'ONE'\n\t[2] button 'TWO'\n\t[3] link 'THREE'")  # fmt: skip

    def answers(epsilon, seed):
        policy = NearMissPolicy(tokenizer, epsilon=epsilon, seed=seed)
        return [policy.act([_turn(encoder, page, TASK_ID, turn)], SamplingParams())[0].text for turn in range(40)]

    assert all(text.endswith("ACTION: click [2]") for text in answers(0.0, 0))
    assert all(text.endswith("ACTION: click [1]") and "'ONE'" in text for text in answers(1.0, 0))
    mixed = answers(0.5, 0)
    assert 5 < sum(text.endswith("click [1]") for text in mixed) < 35
    assert answers(0.5, 0) == mixed and answers(0.5, 1) != mixed
    with pytest.raises(ValueError, match="epsilon"):
        NearMissPolicy(tokenizer, epsilon=1.5)


def test_read_done_drops_a_cut_short_last_line_and_skips_corrupt_ones(tmp_path):
    path = tmp_path / "t.jsonl"
    record = {"id": "a", "task_id": "t.a", "goal": "g", "source": "real", "steps": [{"url": "u", "axtree": "x"}],
              "metadata": {"seed": 3, "policy": "expert"}}  # fmt: skip
    whole = json.dumps(record)
    path.write_text(f"{whole}\nnot json\n{whole[:40]}")
    with pytest.warns(UserWarning) as caught:
        assert read_done(path) == {("t.a", 3, "expert")}
    messages = " ".join(str(warning.message) for warning in caught)
    assert "cut-short last line" in messages and "t.jsonl:2" in messages
    assert path.read_text() == f"{whole}\nnot json\n"  # only the cut-short tail is gone
    path.write_text(whole)  # a whole record that lacks its newline gets one
    assert read_done(path) == {("t.a", 3, "expert")} and path.read_text() == whole + "\n"
    assert read_done(tmp_path / "missing.jsonl") == set()


def test_a_file_that_is_not_jsonl_is_refused_not_edited(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes\nsecond line, no newline at the end")
    with pytest.raises(ValueError, match="not a JSONL file"):
        read_done(notes)
    assert main(["--output", str(notes), "--tasks", "miniwob.click-button"]) == 2
    assert "not a JSONL file" in capsys.readouterr().err
    assert notes.read_text() == "meeting notes\nsecond line, no newline at the end"  # nothing deleted


# ---------------------------------------------------------------------------- collections without a browser


def test_collect_writes_schema_valid_records_and_resumes(tmp_path, identity_expert):
    config = _config(tmp_path)
    env = make_click_button_vector_env(2)
    counts = collect(config, vector_env=env, show_progress=False)
    assert (counts["requested"], counts["skipped"], counts["collected"], counts["successes"]) == (4, 0, 4, 4)
    trajectories = read_trajectories(config.output, on_error="raise")
    assert sorted(t.metadata["seed"] for t in trajectories) == [0, 1, 2, 3]
    for trajectory in trajectories:
        seed = trajectory.metadata["seed"]
        assert trajectory.id == f"{TASK_ID}/seed-{seed}/expert" and trajectory.source == "expert"
        assert trajectory.success and trajectory.reward == 1.0
        assert trajectory.metadata["policy"] == "expert" and trajectory.metadata["split"] == split_of(seed)
        assert trajectory.steps[0].action == f"click [{seed % 4 + 1}]" and trajectory.steps[0].reasoning
        assert trajectory.steps[-1].action == ""

    # An interrupted write left half a record; a wider run appends only the missing seeds.
    with open(config.output, "a") as handle:
        handle.write('{"id": "identity.click-button/seed-4/expert", "task_id": "ident')
    wider = _config(tmp_path, seeds="0-5")
    with pytest.warns(UserWarning, match="cut-short"):
        counts = collect(wider, vector_env=env, show_progress=False)
    assert (counts["skipped"], counts["collected"]) == (4, 2)
    trajectories = read_trajectories(config.output, on_error="raise")
    assert sorted(t.metadata["seed"] for t in trajectories) == [0, 1, 2, 3, 4, 5]

    # Everything is there: nothing runs, and no browser is started (no vector env is given).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counts = collect(wider, show_progress=False)
    assert (counts["skipped"], counts["collected"]) == (6, 0)


def test_explore_collects_real_source_failures_under_its_own_label(tmp_path, identity_expert):
    config = _config(tmp_path, policy="explore", epsilon=1.0, seeds="0-7", max_steps=2, batch_size=4)
    collect(config, vector_env=make_click_button_vector_env(2), show_progress=False)
    trajectories = read_trajectories(config.output, on_error="raise")
    assert len(trajectories) == 8 and {t.source for t in trajectories} == {"real"}
    assert {t.metadata["policy"] for t in trajectories} == {"explore-e1-s0"}
    assert not all(t.success for t in trajectories)  # random actions fail too
    assert all(step.reasoning.startswith("Exploring") for t in trajectories for step in t.steps if step.action)
    # The expert's episodes of the same seeds are another policy's: they are collected beside them.
    counts = collect(_config(tmp_path, seeds="0-7"), vector_env=make_click_button_vector_env(2), show_progress=False)
    assert counts["collected"] == 8 and len(read_trajectories(config.output)) == 16


def test_exploration_does_not_depend_on_batching(tmp_path):
    def actions(num_envs, batch_size):
        output = str(tmp_path / f"{num_envs}.jsonl")
        config = _config(tmp_path, policy="explore", epsilon=1.0, seeds="0-5", output=output, num_envs=num_envs,
                         batch_size=batch_size)  # fmt: skip
        collect(config, vector_env=make_click_button_vector_env(num_envs), show_progress=False)
        return {t.metadata["seed"]: t.actions for t in read_trajectories(config.output, on_error="raise")}

    by_three = actions(3, 6)
    assert actions(2, 2) == by_three and len(set(map(tuple, by_three.values()))) > 1


def test_model_policies_are_collected_as_real_episodes(tmp_path):
    config = _config(tmp_path, policy="tiny-random", tokenizer=None, seeds="0-1", max_steps=2, max_new_tokens=8)
    counts = collect(config, vector_env=make_click_button_vector_env(2), show_progress=False)
    trajectories = read_trajectories(config.output, on_error="raise")
    assert counts["collected"] == 2 and {t.source for t in trajectories} == {"real"}
    assert {t.metadata["policy"] for t in trajectories} == {"tiny-random"}
    assert all(1 <= len(t.steps) <= 3 and t.metadata["end_reason"] for t in trajectories)


def test_cli_rejects_bad_arguments(capsys):
    assert main(["--policy", "explore", "--epsilon", "2"]) == 2
    assert "epsilon" in capsys.readouterr().err
    assert main(["--policy", "expert", "--plan", "2"]) == 2  # collect records the policy's own actions
    assert "does not plan" in capsys.readouterr().err
    # Near misses are the expert's actions aimed elsewhere: a task without an expert has none.
    assert main(["--policy", "near-miss", "--tasks", "miniwob.no-expert", "--tokenizer", "tiny-random"]) == 2
    assert "no scripted expert for miniwob.no-expert" in capsys.readouterr().err


# ---------------------------------------------------------------------------- real pages


@pytest.mark.browser
@pytest.mark.slow
def test_tiny_real_collection_expert_and_explore(tmp_path, require_browser):
    output = tmp_path / "real.jsonl"
    common = ["--tasks", "miniwob.click-button", "miniwob.login-user", "--seeds", "3-4", "--num-envs", "2",
              "--tokenizer", "tiny-random", "--output", str(output)]  # fmt: skip
    assert main(["--policy", "expert", *common]) == 0
    assert main(["--policy", "explore", "--epsilon", "0.5", *common]) == 0
    trajectories = read_trajectories(output, on_error="raise")
    assert len(trajectories) == 8
    expert = [t for t in trajectories if t.metadata["policy"] == "expert"]
    explore = [t for t in trajectories if t.metadata["policy"] == "explore-e0.5-s0"]
    assert len(expert) == len(explore) == 4
    assert all(t.source == "expert" and t.success for t in expert)
    assert all(t.source == "real" for t in explore)
    for trajectory in trajectories:
        assert trajectory.metadata["split"] == {3: "train", 4: "test"}[trajectory.metadata["seed"]]
        assert trajectory.steps[0].url.startswith("file://") and trajectory.steps[0].axtree.startswith("RootWebArea")
        for step in trajectory.steps:
            if step.action:
                parse_action(step.action)
    # Re-running collects nothing new.
    assert main(["--policy", "expert", *common]) == 0
    assert len(read_trajectories(output, on_error="raise")) == 8


@pytest.mark.browser
def test_near_misses_on_real_checkboxes_fail_the_task_the_expert_solves(tmp_path, require_browser):
    output = tmp_path / "near.jsonl"
    common = ["--tasks", "miniwob.click-checkboxes", "--seeds", "0-1", "--num-envs", "1", "--max-steps", "8",
              "--tokenizer", "tiny-random", "--output", str(output)]  # fmt: skip
    assert main(["--policy", "expert", *common]) == 0
    assert main(["--policy", "near-miss", "--epsilon", "1", *common]) == 0
    by_policy = {}
    for trajectory in read_trajectories(output, on_error="raise"):
        by_policy.setdefault(trajectory.metadata["policy"], []).append(trajectory)
    assert all(t.success for t in by_policy["expert"])
    near = by_policy["near-miss-e1-s0"]
    assert len(near) == 2 and all(t.source == "real" and not t.success for t in near)
    for missed, expert in zip(near, by_policy["expert"], strict=True):
        # Its first click went to another checkbox (ε = 1; these seeds have more than one box on the page).
        assert missed.steps[0].action != expert.steps[0].action
        assert missed.steps[0].reasoning.startswith("I click the checkbox")
