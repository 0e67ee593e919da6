"""DreamWebVectorEnv: spaces as AsyncVectorEnv's, one batched model call per step, autoreset, masks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

import dynaweb_env  # noqa: F401  (registers the envs)
from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_env.envs.dream import DreamWebEnv
from dynaweb_env.envs.dream_vector import DreamWebVectorEnv
from dynaweb_env.llm.base import Generation
from dynaweb_env.spaces import OBSERVATION_KEYS, web_action_space, web_observation_space
from dynaweb_env.world_model import format_world_model_target
from dynaweb_env.world_model.judge import JUDGE_SYSTEM_PROMPT

TREE = "RootWebArea 'Click Button Task', focused\n\t[13] button 'ONE'\n\t[14] button 'TWO'"


@pytest.fixture()
def start_file(tmp_path):
    trajectories = [
        Trajectory(
            id=f"click/{seed}",
            task_id=f"miniwob.task-{seed % 3}",
            goal=f"Click ONE ({seed}).",
            source="expert",
            steps=[Step(f"file:///t{seed}.html", TREE, "click [13]"), Step(f"file:///t{seed}.html", TREE, "")],
            metadata={"seed": seed},
        )
        for seed in range(6)
    ]
    path = tmp_path / "start.jsonl"
    write_trajectories(path, trajectories)
    return str(path)


class ScriptedBackend:
    """World model: ``click [14]`` ends the episode, others change the title. Judge: SUCCESS iff answer ONE."""

    model_name = "scripted"

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def generate(self, conversations, params):
        kind = "judge" if conversations[0][0]["content"] == JUDGE_SYSTEM_PROMPT else "world_model"
        self.calls.append((kind, len(conversations)))
        texts = []
        for conversation in conversations:
            user = conversation[1]["content"]
            if kind == "judge":
                texts.append("VERDICT: " + ("SUCCESS" if "AGENT ANSWER: ONE" in user else "FAILURE"))
            else:
                action = user.rsplit("CURRENT ACTION: ", 1)[1]
                tree = TREE.replace("Click Button Task", f"after {action}")
                texts.append(format_world_model_target("changed", "", tree, action == "click [14]"))
        return [Generation(text=text) for text in texts]

    def generate_from_ids(self, prompt_ids, params):
        raise NotImplementedError


class CountingBackend:
    """A thin wrapper around a real backend that records the batch size of every call."""

    def __init__(self, backend):
        self.backend = backend
        self.model_name = backend.model_name
        self.batch_sizes: list[int] = []

    def generate(self, conversations, params):
        self.batch_sizes.append(len(conversations))
        return self.backend.generate(conversations, params)

    def generate_from_ids(self, prompt_ids, params):
        return self.backend.generate_from_ids(prompt_ids, params)


def test_make_vec_builds_the_native_vector_env(start_file):
    envs = gym.make_vec("DreamWeb-v0", num_envs=3, start_states=start_file)
    assert isinstance(envs, DreamWebVectorEnv) and envs.num_envs == 3
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    disabled = gym.make_vec("DreamWeb-v0", num_envs=2, start_states=start_file, autoreset_mode="Disabled")
    assert disabled.autoreset_mode == AutoresetMode.DISABLED
    with pytest.raises(ValueError, match="SAME_STEP"):
        DreamWebVectorEnv(num_envs=2, start_states=start_file, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="num_envs"):
        DreamWebVectorEnv(num_envs=0, start_states=start_file)


def test_spaces_and_observations_match_gymnasiums_own_vectorization(start_file):
    backend = ScriptedBackend()
    native = DreamWebVectorEnv(num_envs=3, world_model=backend, judge="world_model", start_states=start_file)
    sync = SyncVectorEnv([lambda: DreamWebEnv(world_model=backend, judge="world_model", start_states=start_file)] * 3)
    # AsyncVectorEnv builds its spaces exactly like SyncVectorEnv: batch_space of the single spaces.
    assert native.observation_space == sync.observation_space == batch_space(web_observation_space(), 3)
    assert native.action_space == sync.action_space == batch_space(web_action_space(), 3)
    assert native.single_observation_space == web_observation_space()
    native_obs, native_info = native.reset(seed=7)
    sync_obs, sync_info = sync.reset(seed=7)
    assert type(native_obs) is type(sync_obs) and list(native_obs) == list(sync_obs)
    assert all(type(native_obs[key]) is tuple and len(native_obs[key]) == 3 for key in OBSERVATION_KEYS)
    assert native_obs == sync_obs and native.observation_space.contains(native_obs)
    assert list(native_info["trajectory_id"]) == list(sync_info["trajectory_id"])
    for actions in (("click [13]", "bad", "stop [ONE]"), ("click [14]", "click [13]", "click [13]")):
        native_step, sync_step = native.step(actions), sync.step(actions)
        assert native_step[0] == sync_step[0]
        for native_array, sync_array in zip(native_step[1:4], sync_step[1:4], strict=True):
            assert native_array.dtype == sync_array.dtype and np.array_equal(native_array, sync_array)
        assert sorted(native_step[4]) == sorted(sync_step[4])
    assert native_step[1].tolist() == [0.0, 0.0, 0.0]


def test_one_world_model_call_and_one_judge_call_per_step(start_file):
    backend = ScriptedBackend()
    envs = DreamWebVectorEnv(
        num_envs=4, world_model=backend, judge="world_model", start_states=start_file, dream_length=2,
        reward_guards={"objective_check": False},  # "stop [ONE]" never clicks the ONE the goal names
    )  # fmt: skip
    envs.reset(seed=0)
    _, rewards, terminations, truncations, info = envs.step(["click [13]", "nonsense", "stop [ONE]", "click [14]"])
    # Malformed and stop actions are left out of the world-model batch; both ending dreams share one judge call.
    assert backend.calls == [("world_model", 2), ("judge", 2)]
    assert rewards.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert terminations.tolist() == [False, False, True, True] and not truncations.any()
    assert list(info["end_reason"][info["_end_reason"]]) == ["stop", "terminal_state"]
    assert info["world_model_error"][1] == "" and "unknown action" in envs.step(["a"] * 4)[0]["last_action_error"][1]


def test_next_step_autoreset(start_file):
    backend = ScriptedBackend()
    envs = DreamWebVectorEnv(
        num_envs=2, world_model=backend, judge="world_model", start_states=start_file, dream_length=3
    )
    envs.reset(seed=1)
    observations, _, terminations, _, _ = envs.step(["stop [ONE]", "click [13]"])
    assert terminations.tolist() == [True, False] and observations["last_action"][0] == "stop [ONE]"
    observations, rewards, terminations, truncations, info = envs.step(["click [13]", "click [13]"])
    # Sub-env 0 was reset (its action ignored, no model call for it); sub-env 1 stepped.
    assert observations["last_action"][0] == "" and observations["axtree"][0] == TREE
    assert info["_dream_step"].tolist() == [False, True] and info["_start_step_index"].tolist() == [True, True]
    assert rewards.tolist() == [0.0, 0.0] and not terminations.any() and not truncations.any()
    assert backend.calls[-1] == ("world_model", 1)


def test_disabled_autoreset_and_masked_reset_with_a_shared_start_state(start_file):
    backend = ScriptedBackend()
    envs = DreamWebVectorEnv(
        num_envs=4, world_model=backend, judge="world_model", start_states=start_file, autoreset_mode="Disabled"
    )
    envs.reset(seed=2)
    envs.step(["stop [ONE]", "click [13]", "stop [no]", "click [13]"])
    with pytest.raises(ValueError, match="has ended"):
        envs.step(["click [13]"] * 4)
    mask = np.array([True, False, True, False])
    observations, info = envs.reset(options={"reset_mask": mask, "task": "miniwob.task-1", "task_seed": 4})
    assert info["_trajectory_id"].tolist() == mask.tolist()
    assert list(info["trajectory_id"][mask]) == ["click/4", "click/4"]
    assert observations["url"][0] == observations["url"][2] == "file:///t4.html"
    assert observations["axtree"][1].startswith("RootWebArea 'after click [13]'")  # untouched sub-env
    observations, *_ = envs.step(["click [13]"] * 4)
    assert all(axtree.startswith("RootWebArea 'after click [13]'") for axtree in observations["axtree"])
    for options in ({"reset_mask": mask.astype(int)}, {"reset_mask": np.zeros(4, dtype=bool)}):
        with pytest.raises(ValueError, match="reset_mask"):
            envs.reset(options=options)
    with pytest.raises(ValueError, match="expected 4 actions"):
        envs.step(["click [13]"])


def test_batched_step_on_a_real_model_makes_exactly_one_call(start_file):
    from dynaweb_env.llm import make_backend

    counting = CountingBackend(make_backend("tiny-random"))
    envs = gym.make_vec(
        "DreamWeb-v0",
        num_envs=4,
        world_model=counting,
        judge="world_model",
        start_states=start_file,
        max_new_tokens=8,
        judge_max_new_tokens=8,
        dream_length=2,
    )
    observations, _ = envs.reset(seed=3)
    observations, rewards, terminations, truncations, info = envs.step(
        ["click [13]", "click [14]", "oops", "click [13]"]
    )
    assert counting.batch_sizes == [3]  # one world-model call for the three valid actions
    assert all(info["world_model_error"][i] for i in (0, 1, 3))  # a random model cannot follow the format
    assert observations["axtree"] == (TREE,) * 4
    _, rewards, terminations, truncations, info = envs.step(["stop [ONE]", "click [13]", "click [13]", "click [13]"])
    # Step 2 of 2: three world-model requests in one call, then all four dreams end, judged in one call.
    assert counting.batch_sizes == [3, 3, 4]
    assert truncations.tolist() == [False, True, True, True] and terminations.tolist() == [True, False, False, False]
    assert rewards.dtype == np.float64 and set(rewards.tolist()) <= {0.0, 1.0}
