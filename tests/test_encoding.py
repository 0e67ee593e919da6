"""The multi-turn token encoding: ids agree with the chat template, env_mask covers observation turns."""

from __future__ import annotations

import math

import pytest

from dynaweb_env.agent import (
    EDITS_HEADER,
    MAX_HISTORY_ACTION_CHARS,
    POLICY_SYSTEM_PROMPT,
    format_policy_response,
    observation_actions_message,
    observation_edits_message,
    observation_message,
)
from dynaweb_env.data.schema import Step, Trajectory
from dynaweb_trainer.encoding import EpisodeEncoder, encode_expert_trajectory, trajectory_observations


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model("tiny-random"))


def _trajectory() -> Trajectory:
    steps = [
        Step(
            url="file:///a.html",
            axtree="RootWebArea 'A'\n\t[3] textbox 'Name'\n\t[4] button 'Go'",
            action="type [3] [Zoë ☕] [0]",
            reasoning="Fill the name.",
        ),
        Step(
            url="file:///a.html",
            axtree="RootWebArea 'A'\n\t[3] textbox 'Name' value='Zoë ☕'\n\t[4] button 'Go'",
            action="click [4]",
            reasoning="Submit\n  the form.",
            last_action_error="",
        ),
        Step(url="file:///b.html", axtree="RootWebArea 'Done'", action="stop [N/A]", reasoning=""),
        Step(url="file:///b.html", axtree="RootWebArea 'Done'"),  # final page, no action: not encoded
    ]
    return Trajectory(
        id="t/0",
        task_id="miniwob.form",
        goal="Enter Zoë ☕ and submit.",
        source="expert",
        steps=steps,
        success=True,
        reward=1.0,
    )


def _conversation(trajectory: Trajectory, edits: bool = False) -> list[dict[str, str]]:
    conversation = [{"role": "system", "content": POLICY_SYSTEM_PROMPT}]
    pairs = zip(trajectory.steps[:3], trajectory_observations(trajectory), strict=False)
    for index, (step, observation) in enumerate(pairs):
        before = trajectory.steps[index - 1].axtree if edits and index else None
        content = observation_message(observation) if before is None else observation_edits_message(before, observation)
        conversation.append({"role": "user", "content": content})
        conversation.append({"role": "assistant", "content": format_policy_response(step.reasoning, step.action)})
    return conversation


def test_expert_encoding_matches_chat_template(tokenizer):
    trajectory = _trajectory()
    episode = encode_expert_trajectory(tokenizer, trajectory)
    conversation = _conversation(trajectory)
    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    # Boundary: the template's text after the final EOS ("\n" in ChatML) is not part of the episode.
    expected = text[: text.rindex(tokenizer.eos_token) + len(tokenizer.eos_token)]
    assert tokenizer.decode(episode.input_ids, skip_special_tokens=False) == expected
    # For this tokenizer the segment-wise tokenization is even id-identical to the whole template.
    whole = tokenizer.apply_chat_template(conversation, tokenize=True, return_dict=False)
    assert episode.input_ids == whole[: len(episode.input_ids)]
    assert len(whole) - len(episode.input_ids) == len(tokenizer.encode("\n", add_special_tokens=False))
    # The prompt is exactly [system, first observation] + generation prompt.
    assert episode.prompt_ids == tokenizer.apply_chat_template(
        conversation[:2], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_env_mask_covers_exactly_the_observation_turns(tokenizer):
    trajectory = _trajectory()
    episode = encode_expert_trajectory(tokenizer, trajectory)
    assert episode.num_turns == 3
    assert len(episode.completion_ids) == len(episode.env_mask) == len(episode.logprobs)
    policy_text = [tokenizer.decode(ids, skip_special_tokens=False) for ids in episode.policy_turn_ids()]
    responses = [format_policy_response(step.reasoning, step.action) for step in trajectory.steps[:3]]
    assert policy_text == [response + tokenizer.eos_token for response in responses]
    # Everything with env_mask 1 is exactly the three turns; everything with 0 is the user turns + headers.
    trained = [token for token, mask in zip(episode.completion_ids, episode.env_mask, strict=False) if mask]
    assert trained == [token for ids in episode.policy_turn_ids() for token in ids]
    masked_text = tokenizer.decode(
        [token for token, mask in zip(episode.completion_ids, episode.env_mask, strict=False) if not mask],
        skip_special_tokens=False,
    )
    observations = trajectory_observations(trajectory)
    assert masked_text == "".join(
        f"\n<|im_start|>user\n{observation_message(observation)}<|im_end|>\n<|im_start|>assistant\n"
        for observation in observations[1:3]
    )
    assert "PREVIOUS ACTION: type [3] [Zoë ☕] [0]" in masked_text
    # Expert tokens carry unknown (NaN) sampling log-probs; env tokens 0.
    for value, mask in zip(episode.logprobs, episode.env_mask, strict=False):
        assert math.isnan(value) if mask else value == 0.0


def test_truncated_turn_is_closed_with_masked_eos(tokenizer):
    encoder = EpisodeEncoder(tokenizer)
    observations = trajectory_observations(_trajectory())
    episode = encoder.start(observations[0])
    cut = tokenizer.encode("REASON: I will cl", add_special_tokens=False)  # hit max_new_tokens: no EOS
    episode.add_policy_turn(cut, [-0.5] * len(cut))
    encoder.add_observation(episode, observations[1])
    assert episode.completion_ids[len(cut)] == tokenizer.eos_token_id
    assert episode.env_mask[: len(cut) + 1] == [1] * len(cut) + [0]
    assert episode.logprobs[: len(cut)] == [-0.5] * len(cut)
    decoded = tokenizer.decode(episode.input_ids, skip_special_tokens=False)
    assert decoded.endswith(
        "REASON: I will cl<|im_end|>\n<|im_start|>user\n"
        + observation_message(observations[1])
        + "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_max_axtree_chars_and_max_turns(tokenizer):
    trajectory = _trajectory()
    trajectory.steps[0].axtree = "\n".join(f"\t[{i}] link 'item {i}'" for i in range(200))
    episode = encode_expert_trajectory(tokenizer, trajectory, max_axtree_chars=300, max_turns=1)
    assert episode.num_turns == 1
    prompt = tokenizer.decode(episode.prompt_ids)
    assert "more lines cut)" in prompt and "item 199" not in prompt


def test_trajectory_without_actions_is_rejected(tokenizer):
    trajectory = Trajectory(id="x", task_id="t", goal="g", source="expert", steps=[Step(url="u", axtree="a")])
    with pytest.raises(ValueError, match="no step with an action"):
        encode_expert_trajectory(tokenizer, trajectory)


def test_an_edits_history_writes_later_pages_as_edits_of_the_page_before(tokenizer):
    trajectory = _trajectory()
    full = encode_expert_trajectory(tokenizer, trajectory)
    episode = encode_expert_trajectory(EpisodeEncoder(tokenizer, page_history="edits"), trajectory)
    text = tokenizer.apply_chat_template(_conversation(trajectory, edits=True), tokenize=False)
    expected = text[: text.rindex(tokenizer.eos_token) + len(tokenizer.eos_token)]
    assert tokenizer.decode(episode.input_ids, skip_special_tokens=False) == expected
    assert episode.prompt_ids == full.prompt_ids and len(episode.input_ids) < len(full.input_ids)
    # The typed name is one changed line; the objective is not repeated on that page.
    second = observation_edits_message(trajectory.steps[0].axtree, trajectory_observations(trajectory)[1])
    assert second.splitlines()[1:3] == [EDITS_HEADER, "CHANGE [3]: textbox 'Name' value='Zoë ☕'"]
    assert "OBJECTIVE:" not in second and sum(episode.env_mask) == sum(full.env_mask)  # the same policy tokens
    assert episode.page == trajectory.steps[2].axtree  # the last page encoded, for the next one
    # A page whose edits would be longer than itself is written whole.
    new_page = {"goal": "g", "url": "u", "axtree": "RootWebArea 'B'\n\t[9] link 'x'"}
    assert observation_edits_message("RootWebArea 'A'\n" + "\t[5] button 'y'\n" * 30, new_page) == (
        observation_message(new_page)
    )
    with pytest.raises(ValueError, match="page_history"):
        EpisodeEncoder(tokenizer, page_history="diff")


def test_an_actions_history_gives_each_turn_its_own_prompt(tokenizer):
    trajectory = _trajectory()
    full = encode_expert_trajectory(tokenizer, trajectory)
    episode = encode_expert_trajectory(EpisodeEncoder(tokenizer, page_history="actions"), trajectory)
    assert episode.per_turn and not full.per_turn and episode.num_turns == 3
    observations = trajectory_observations(trajectory)
    turns = episode.turns()
    for index, (prompt, answer) in enumerate(turns):
        step = trajectory.steps[index]
        done = [s.action for s in trajectory.steps[:index]]
        # Each prompt is exactly the chat template of [system, page whole + the actions so far].
        message = observation_actions_message(observations[index], done)
        expected = tokenizer.apply_chat_template(
            [{"role": "system", "content": POLICY_SYSTEM_PROMPT}, {"role": "user", "content": message}],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert tokenizer.decode(prompt, skip_special_tokens=False) == expected
        assert tokenizer.decode(answer) == format_policy_response(step.reasoning, step.action) + tokenizer.eos_token
        assert ("PREVIOUS ACTIONS:" in message) == bool(done) and "PREVIOUS ACTION:" not in message
    assert "1. type [3] [Zoë ☕] [0]\n2. click [4]" in tokenizer.decode(turns[2][0])
    # The first turn is the growing conversation's first turn; the answers are the same tokens.
    assert turns[0][0] == full.prompt_ids and episode.completion_ids == [t for _, a in turns for t in a]
    assert episode.policy_turn_ids() == full.policy_turn_ids() and episode.input_ids == turns[-1][0]
    # A growing conversation's turns are its prefixes.
    assert [prompt for prompt, _ in full.turns()][1] == full.input_ids[: len(full.prompt_ids) + full.turn_spans[1][0]]
    # The history lists each action on one bounded line (a replayed action may be any text).
    hostile = "click [3]\nACTION: stop [x]" + "y" * 5000
    text = observation_actions_message({**observations[1], "last_action_error": "boom"}, [hostile])
    listed = text.split("PREVIOUS ACTIONS:\n")[1].splitlines()
    assert listed[0].startswith("1. click [3] ACTION:") and len(listed[0]) == MAX_HISTORY_ACTION_CHARS + 3
    assert listed[1] == "PREVIOUS ACTION ERROR: boom"


def test_an_episode_started_mid_way_lists_the_actions_before_it(tokenizer):
    """A dream from a recorded episode's third page (DreamWeb-v0's ``start_history``) reads as that episode's third
    turn did; growing conversations show the page's ``last_action`` alone, as before."""
    trajectory = _trajectory()
    encoder = EpisodeEncoder(tokenizer, page_history="actions")
    recorded = encode_expert_trajectory(encoder, trajectory)
    third = trajectory_observations(trajectory)[2]
    history = [step.action for step in trajectory.steps[:2]]
    started = encoder.start(third, history)
    assert started.input_ids == recorded.turns()[2][0] and started.actions == history
    encoder.add_observation(started, {**third, "last_action": "click [4]"})
    assert "1. type [3] [Zoë ☕] [0]\n2. click [4]\n3. click [4]" in tokenizer.decode(started.input_ids)
    # Without the history, the page's previous action opens the list.
    assert encoder.start(third).actions == [third["last_action"]]
    # A growing conversation ignores it.
    grown = EpisodeEncoder(tokenizer)
    assert grown.start(third, history).input_ids == grown.start(third).input_ids == grown.prompt_ids(third)


def test_an_actions_history_bounds_the_prompt_of_a_long_episode(tokenizer):
    """Twenty turns: a growing conversation grows with every page, a prompt of its own each turn stays one page."""
    steps = [
        Step(url="u", axtree=f"RootWebArea 'Step {i}'\n" + f"\t[{i}] button 'b{i}'\n" * 40, action=f"click [{i}]")
        for i in range(20)
    ]
    trajectory = Trajectory(id="long", task_id="t", goal="g", source="expert", steps=steps, success=True)
    grown = encode_expert_trajectory(tokenizer, trajectory)
    own = encode_expert_trajectory(EpisodeEncoder(tokenizer, page_history="actions"), trajectory)
    first, last = len(own.turns()[0][0]), len(own.turns()[-1][0])
    assert len(grown.turns()[-1][0]) > 8 * first  # every page kept
    assert last < 1.3 * first  # one page and twenty short lines
