"""Task queries: dataset rows name a dream start state by id, resolved to the state when the episode runs."""

from __future__ import annotations

import json

import pytest

from dynaweb_env.data.start_states import load_start_states
from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.task_queries import (
    START_STATE_ID,
    StartStateIndex,
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
