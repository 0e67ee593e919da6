"""Task queries: dataset rows name a dream start state by id, resolved to the state when the episode runs."""

from __future__ import annotations

import json

import pytest

from dynaweb_env.data.start_states import load_start_states
from dynaweb_env.data.tasks import TASK_SUITES
from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.task_queries import (
    START_STATE_ID,
    StartStateIndex,
    balanced_order,
    build_task_prompts,
    load_start_state_index,
    parse_task_prompt,
)


def test_dream_rows_carry_an_id_that_resolves_to_the_same_start_state():
    args = GSPOConfig(output_dir="/tmp/unused", environment="dream", tasks=["miniwob.click-button"])
    index = load_start_state_index(args)
    prompts = build_task_prompts(args, index)
    states = [s for s in load_start_states(None, include_intermediate=True) if s.task_id == "miniwob.click-button"]
    assert len(prompts) == len(states) == len(index) > 0
    for prompt, state in zip(prompts, states, strict=True):
        query = parse_task_prompt(prompt)
        assert "axtree" not in prompt and list(query["options"]) == [START_STATE_ID]  # a row holds no tree
        assert index.resolve(query["options"]) == {"start_state": state.to_dict()}
    assert all(len(prompt) < 200 for prompt in prompts)
    # A suite's name stands for its tasks, as in dynaweb-eval (dynaweb_env.data.tasks.expand_tasks).
    assert GSPOConfig(output_dir="/tmp/unused", tasks="multistep").tasks == list(TASK_SUITES["multistep"])


def test_repeated_trajectory_ids_get_distinct_ids_and_unknown_ids_are_refused():
    (state,) = load_start_states(None, include_intermediate=False)[:1]
    twin = type(state)(**{**state.to_dict(), "goal": "another goal"})
    index = StartStateIndex([state, twin])
    first, second = index.id_of(state), index.id_of(twin)
    assert second == first + "#2"
    assert index.resolve({START_STATE_ID: second})["start_state"]["goal"] == "another goal"
    assert index.resolve({"task": "x", "task_seed": 1}) == {"task": "x", "task_seed": 1}  # nothing to resolve
    with pytest.raises(ValueError, match="unknown start state id"):
        index.resolve({START_STATE_ID: "nope@0"})
    with pytest.raises(ValueError, match="malformed"):
        parse_task_prompt(json.dumps({"env": "moon", "options": {}}))


def test_balanced_order_trains_every_task_before_any_task_again():
    args = GSPOConfig(output_dir="/tmp/unused", environment="dream", task_order="balanced", seed=3)
    assert args.shuffle_dataset is False  # TRL's sampler must keep the order
    index = load_start_state_index(args)
    prompts = build_task_prompts(args, index)
    tasks = [parse_task_prompt(prompt)["task_id"] for prompt in prompts]
    counts = {task: tasks.count(task) for task in set(tasks)}
    assert len(counts) >= 9 and max(counts.values()) > 2 * min(counts.values())  # unequal, as shipped
    assert sorted(prompts) == sorted(build_task_prompts(GSPOConfig(output_dir="/tmp/unused"), index))
    first_round = tasks[: len(counts)]
    assert len(set(first_round)) == len(counts)
    for start in range(0, min(counts.values()) * len(counts), len(counts)):  # full rounds while every task lasts
        assert len(set(tasks[start : start + len(counts)])) == len(counts)
    assert balanced_order(prompts, 3) == balanced_order(prompts, 3)
    assert balanced_order(prompts, 3)[: len(counts)] != balanced_order(prompts, 4)[: len(counts)]


def test_trl_sampler_yields_balanced_queries_in_order():
    from trl.trainer.grpo_trainer import RepeatSampler

    args = GSPOConfig(output_dir="/tmp/unused", environment="real", task_order="balanced", real_task_seeds=3)
    prompts = build_task_prompts(args, None, ["miniwob.a", "miniwob.b", "miniwob.c"])
    sampler = RepeatSampler(prompts, mini_repeat_count=4, batch_size=1, repeat_count=1, shuffle=args.shuffle_dataset)
    groups = [prompts[index] for index in list(sampler)[::4]]
    assert groups == prompts
    assert len({parse_task_prompt(prompt)["task_id"] for prompt in groups[:3]}) == 3
