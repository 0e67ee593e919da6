"""Rows a turn (``page_history="actions"``): the layout TRL gets, and the refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dynaweb_trainer.encoding import EpisodeEncoder, encode_expert_trajectory
from dynaweb_trainer.identity_env import expert_trajectory
from dynaweb_trainer.rollout import expert_result
from dynaweb_trainer.rollout_func import DynaWebRollout
from dynaweb_trainer.turn_rows import per_turn_args, turn_rows, turn_slots


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model("tiny-random"))


def _result(encoder, seed=0):
    trajectory = expert_trajectory(seed)
    return expert_result(encode_expert_trajectory(encoder, trajectory), trajectory, {"task_seed": seed})


def test_turn_slots_follow_the_longest_step_limit():
    assert turn_slots(["miniwob.click-button"], 5) == 5
    assert turn_slots(["miniwob.click-button", "miniwob.number-checkboxes"], 5) == 20  # raised for a long task
    args = SimpleNamespace(num_generations=4, gradient_accumulation_steps=2, steps_per_generation=2,
                           generation_batch_size=8, loss_type="grpo")  # fmt: skip
    expanded = per_turn_args(args, 3)
    counts = (expanded.num_generations, expanded.gradient_accumulation_steps, expanded.generation_batch_size)
    assert counts == (12, 6, 24)
    assert expanded.turn_slots == 3 and args.num_generations == 4 and not hasattr(args, "turn_slots")  # a copy
    with pytest.raises(ValueError, match="slots"):
        per_turn_args(args, 0)


def test_rows_pad_each_episode_to_its_slots_and_refuse_what_does_not_fit(tokenizer):
    encoder = EpisodeEncoder(tokenizer, page_history="actions")
    result = _result(encoder)  # one click: one turn
    rows = turn_rows([result, _result(encoder, 1)], 3, tokenizer.eos_token_id)
    assert len(rows["prompt_ids"]) == 6 and rows["env_mask"][0] == [1] * len(rows["completion_ids"][0])
    assert rows["prompt_ids"][0] == result.encoded.turn_prompts[0]
    assert rows["completion_ids"][1:3] == [[tokenizer.eos_token_id]] * 2 and rows["env_mask"][1:3] == [[0], [0]]
    with pytest.raises(ValueError, match="more than"):
        turn_rows([result], 0, tokenizer.eos_token_id)
    with pytest.raises(ValueError, match="page_history='actions'"):
        turn_rows([_result(EpisodeEncoder(tokenizer))], 3, tokenizer.eos_token_id)


def test_trls_rows_go_back_to_one_prompt_an_episode(tokenizer):
    rollout = DynaWebRollout(SimpleNamespace(turn_slots=2), EpisodeEncoder(tokenizer, page_history="actions"))
    assert rollout.episode_prompts(["a", "a", "a", "a", "b", "b"]) == ["a", "a", "b"]
    with pytest.raises(ValueError, match="blocks of 2"):
        rollout.episode_prompts(["a", "b", "b", "b"])
    with pytest.raises(ValueError, match="blocks of 2"):
        rollout.episode_prompts(["a", "a", "a"])
