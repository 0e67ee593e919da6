"""The policy-environment loop: batching, groups sharing a start, queueing, parking, expert slots."""

from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.data.schema import Trajectory
from dynaweb_env.llm.base import Generation, SamplingParams
from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.encoding import EpisodeEncoder, encode_expert_trajectory
from dynaweb_trainer.expert_pool import ExpertPool
from dynaweb_trainer.identity_env import TASK_ID, expert_trajectory, make_click_button_vector_env
from dynaweb_trainer.metrics import environment_reward
from dynaweb_trainer.rollout import PARK_ACTION, RolloutStats, run_episodes, summarize_episodes
from dynaweb_trainer.rollout_func import DynaWebRollout
from dynaweb_trainer.task_queries import make_task_prompt


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from dynaweb_env.models import prepare_model

    return AutoTokenizer.from_pretrained(prepare_model("tiny-random"))


class ScriptedPolicy:
    """A backend that answers from a script, records every batch, and returns fake log-probs."""

    model_name = "scripted"

    def __init__(self, tokenizer, answer):
        self.tokenizer, self.answer, self.batches = tokenizer, answer, []

    def generate_from_ids(self, prompt_ids, params):
        self.batches.append([list(ids) for ids in prompt_ids])
        out = []
        for ids in prompt_ids:
            text = self.answer(self.tokenizer.decode(ids))
            completion = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generation(text, list(ids), completion, [-0.25] * len(completion), "stop"))
        return out

    def generate(self, conversations, params):  # pragma: no cover - not used by the rollout
        raise NotImplementedError


def _click_target(prompt: str) -> str:
    """Right click on the 2nd observation of an episode, a wrong (non-terminating) hover before."""
    target = prompt.rsplit("Click the button named '", 1)[1].split("'", 1)[0]
    index = ["ONE", "TWO", "THREE", "FOUR"].index(target) + 1
    return (
        f"REASON: look first.\nACTION: hover [{index}]"
        if prompt.count("OBJECTIVE:") == 1
        else f"ACTION: click [{index}]"
    )


def test_batched_multi_turn_episodes(tokenizer):
    env = make_click_button_vector_env(3, max_steps=4)
    encoder = EpisodeEncoder(tokenizer)
    policy = ScriptedPolicy(tokenizer, _click_target)
    options = [{"task": TASK_ID, "task_seed": seed} for seed in (0, 0, 1, 2, 3)]  # 5 episodes on 3 envs
    stats = RolloutStats()
    results = run_episodes(env, policy, encoder, options, SamplingParams(max_new_tokens=32), max_steps=4, seed=1,
                           stats=stats)  # fmt: skip
    assert [result.options for result in results] == options
    assert all(result.success and result.reward == 1.0 and result.num_steps == 2 for result in results)
    assert {result.end_reason for result in results} == {"terminated"}
    # One batched call per turn for all live episodes: 3 slots for two turns, then the 2 queued ones.
    assert [len(batch) for batch in policy.batches] == [3, 3, 2, 2]
    assert stats.episodes == 5 and stats.env_steps == 10 and stats.generate_calls == 4
    for result in results:
        encoded = result.encoded
        # Token-in token-out: the second prompt is exactly the first prompt + turn 1 + observation turn.
        turn1, _ = encoded.turn_spans
        assert encoded.env_mask[turn1[1] : encoded.turn_spans[1][0]] == [0] * (encoded.turn_spans[1][0] - turn1[1])
        assert sum(encoded.env_mask) == sum(end - start for start, end in encoded.turn_spans)
        assert [encoded.logprobs[i] for i in range(len(encoded.env_mask)) if encoded.env_mask[i]] == [-0.25] * sum(
            encoded.env_mask
        )
        assert result.actions[0].startswith("hover") and result.actions[1].startswith("click")
        assert "PREVIOUS ACTION: hover" in tokenizer.decode(encoded.completion_ids)
    second_turn_prompts = policy.batches[1]
    assert second_turn_prompts[0] == results[0].encoded.input_ids[: len(second_turn_prompts[0])]
    assert summarize_episodes(results)["success_rate"] == 1.0
    trajectory = results[2].to_trajectory("identity/0")
    assert trajectory.actions == ["hover [2]", "click [2]"] and trajectory.success and len(trajectory.steps) == 3


@pytest.mark.parametrize("page_history", ["edits", "actions"])
def test_a_shorter_history_rolls_out_token_in_token_out(tokenizer, page_history):
    hovered = "PREVIOUS ACTION: hover" if page_history == "edits" else "1. hover"

    def answer(prompt: str) -> str:  # hover first, then click, once the prompt says it hovered
        target = prompt.rsplit("Click the button named '", 1)[1].split("'", 1)[0]
        index = ["ONE", "TWO", "THREE", "FOUR"].index(target) + 1
        return f"ACTION: click [{index}]" if hovered in prompt else f"ACTION: hover [{index}]"

    env = make_click_button_vector_env(2, max_steps=4)
    encoder = EpisodeEncoder(tokenizer, page_history=page_history)
    policy = ScriptedPolicy(tokenizer, answer)
    options = [{"task": TASK_ID, "task_seed": seed} for seed in (0, 1)]
    results = run_episodes(env, policy, encoder, options, SamplingParams(max_new_tokens=32), max_steps=4, seed=1)
    assert all(result.success and result.num_steps == 2 for result in results)
    for result, first, second in zip(results, policy.batches[0], policy.batches[1], strict=True):
        assert tokenizer.decode(second).count("OBJECTIVE:") == 1  # edits: the hovered page not whole; actions: one
        if page_history == "edits":  # the second turn's prompt is exactly the encoded episode's prefix
            assert second == result.encoded.input_ids[: len(second)]
        else:  # each turn had its own prompt, the one the episode records for it (what SFT trains on)
            assert [first, second] == [prompt for prompt, _ in result.encoded.turns()]
            assert len(second) < 1.2 * len(first) and result.encoded.actions == result.actions[:1]


def test_groups_share_a_start_and_idle_slots_are_parked(tokenizer):
    env = make_click_button_vector_env(4, max_steps=3)
    calls = []
    original_reset, original_step = env.reset, env.step

    def reset(**kwargs):
        calls.append(("reset", kwargs["options"].get("task_seed"), kwargs["options"].get("reset_mask")))
        return original_reset(**kwargs)

    def step(actions):
        calls.append(("step", list(actions)))
        return original_step(actions)

    env.reset, env.step = reset, step
    encoder = EpisodeEncoder(tokenizer)
    # Episode 0 ends at once (click), episode 1 needs two turns: slot 0 must be parked meanwhile.
    policy = ScriptedPolicy(tokenizer, lambda p: "click [1]" if "'ONE'." in p else _click_target(p))
    options = [{"task": TASK_ID, "task_seed": 0}, {"task": TASK_ID, "task_seed": 1}]
    results = run_episodes(env, policy, encoder, options, SamplingParams(max_new_tokens=16), max_steps=3, seed=0)
    assert [result.num_steps for result in results] == [1, 2] and all(result.success for result in results)
    resets = [call for call in calls if call[0] == "reset"]
    assert resets[0][2] is None  # a fresh vector env is first reset whole
    steps = [call for call in calls if call[0] == "step"]
    assert steps[1][1][0] == PARK_ACTION  # finished slot 0 is parked while episode 1 goes on
    assert any(call[0] == "reset" and call[2] is not None and call[2][0] for call in calls[2:])  # park reset


def test_max_steps_and_token_budget(tokenizer):
    env = make_click_button_vector_env(2, max_steps=10)
    encoder = EpisodeEncoder(tokenizer)
    policy = ScriptedPolicy(tokenizer, lambda p: "ACTION: hover [1]")
    options = [{"task": TASK_ID, "task_seed": 0}]
    (result,) = run_episodes(env, policy, encoder, options, SamplingParams(max_new_tokens=8), max_steps=3)
    assert (result.num_steps, result.end_reason, result.reward) == (3, "max_steps", 0.0)
    (result,) = run_episodes(
        env, policy, encoder, options, SamplingParams(max_new_tokens=8), max_steps=10, max_completion_length=120
    )
    assert result.end_reason == "max_tokens" and len(result.encoded.completion_ids) <= 120
    assert result.encoded.completion_ids[-1] == tokenizer.eos_token_id  # ends on the policy's turn


def _expert(seed: int, reward: float = 1.0) -> Trajectory:
    return expert_trajectory(seed, reward=reward)


def test_expert_slots_carry_expert_tokens_and_reward(tokenizer, tmp_path):
    args = GSPOConfig(output_dir=str(tmp_path), expert_frac=1.0, environment="real", num_generations=2,
                      per_device_train_batch_size=4, max_turn_tokens=16, max_completion_length=512, seed=3)  # fmt: skip
    encoder = EpisodeEncoder(tokenizer)
    experts = [_expert(0), _expert(1, reward=1.0), _expert(2, reward=0.0)]  # a failed one is never used
    pool = ExpertPool(experts, max_turns=10)
    assert len(pool) == 2
    rollout = DynaWebRollout(args, encoder, pool, {"real": lambda: make_click_button_vector_env(4)})
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": seed}) for seed in (1, 1, 2, 2)]
    accelerator = SimpleNamespace(process_index=0, num_processes=1)
    trainer = SimpleNamespace(accelerator=accelerator, state=SimpleNamespace(global_step=0))
    policy = ScriptedPolicy(tokenizer, lambda p: "click [3]")
    import dynaweb_trainer.rollout_func as trainer_module

    original = trainer_module.trainer_policy
    trainer_module.trainer_policy = lambda _trainer: _Context(policy)
    try:
        output = rollout(prompts, trainer)
    finally:
        trainer_module.trainer_policy = original
    # Seed 1 has an expert of the same seed; seed 2's only expert failed, so no expert exists for the
    # task seed and another successful expert of the task is used.
    assert output["source"] == ["expert"] * 4 and output["is_expert"] == [True] * 4
    expected = encode_expert_trajectory(encoder, experts[1])
    for row in (0, 1):
        assert output["completion_ids"][row] == expected.completion_ids
        assert output["prompt_ids"][row] == expected.prompt_ids
        assert output["env_mask"][row] == expected.env_mask
        assert all(math.isnan(value) for value in output["logprobs"][row])
        assert output["reward"][row] == 1.0 and output["success"][row]
    assert tokenizer.decode(output["completion_ids"][0]) == (
        "REASON: The button named TWO is [2].\nACTION: click [2]<|im_end|>"
    )
    assert policy.batches == []  # no episode was run for replaced slots
    logged = list(iter_trajectories(tmp_path / "episodes.jsonl", on_error="raise"))
    assert [episode.metadata["expert_trajectory_id"] for episode in logged[:2]] == [experts[1].id] * 2

    # With expert_frac 0.5 each group of 2 gets exactly one expert; with 0.25, one in half of the groups.
    shares = {}
    trainer_module.trainer_policy = lambda _trainer: _Context(policy)
    try:
        for expert_frac in (0.5, 0.25):
            rollout.args = GSPOConfig(output_dir="/tmp/unused", expert_frac=expert_frac, environment="real",
                                      num_generations=2, per_device_train_batch_size=4, max_turn_tokens=16,
                                      max_completion_length=512, seed=3)  # fmt: skip
            shares[expert_frac] = []
            for step in range(8):
                trainer.state.global_step = step
                output = rollout(prompts * 2, trainer)
                shares[expert_frac].append(np.mean(output["is_expert"]))
                groups = [output["is_expert"][i : i + 2] for i in range(0, 8, 2)]
                if expert_frac == 0.5:
                    assert all(sum(group) == 1 for group in groups)
                for row, source in enumerate(output["source"]):
                    if source == "real":
                        assert output["reward"][row] == float(output["success"][row])
                        assert output["logprobs"][row][0] == -0.25
    finally:
        trainer_module.trainer_policy = original
    assert shares[0.5] == [0.5] * 8
    assert 0.1 < np.mean(shares[0.25]) < 0.4 and len(set(shares[0.25])) > 1

    metrics = {}
    rewards = environment_reward(
        prompts=prompts * 2, completions=[""] * 8, reward=output["reward"], success=output["success"],
        source=output["source"], num_steps=output["num_steps"], world_model_errors=output["world_model_errors"],
        rollout_stats=[output["rollout_stats"]] * 8, log_metric=metrics.__setitem__,
    )  # fmt: skip
    assert rewards == output["reward"]
    assert metrics["env/expert_share"] == pytest.approx(np.mean(output["is_expert"]))
    assert "env/success_rate" in metrics and "rollout/policy_tokens_per_s" in metrics


class _Context:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        return self.value

    def __exit__(self, *exc):
        return False


def test_transformers_policy_tokens_are_the_sampled_ones(tokenizer):
    """With the real backend, completion tokens and log-probs are exactly what the model sampled."""
    from transformers import AutoModelForCausalLM

    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_env.models import prepare_model

    model = AutoModelForCausalLM.from_pretrained(prepare_model("tiny-random"))
    backend = TransformersBackend(model, tokenizer=tokenizer)
    env = make_click_button_vector_env(2, max_steps=2)
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=0)
    options = [{"task": TASK_ID, "task_seed": 0}] * 2
    results = run_episodes(env, backend, encoder, options, SamplingParams(max_new_tokens=5, temperature=1.0),
                           max_steps=2, seed=0)  # fmt: skip
    for result in results:
        turns = result.encoded.policy_turn_ids()
        assert len(turns) == 2 and all(len(turn) == 5 for turn in turns)
        # Replay: the second turn's prompt is the encoded history; its log-probs match a forward pass.
        start, end = result.encoded.turn_spans[1]
        ids = torch.tensor([result.encoded.prompt_ids + result.encoded.completion_ids[:end]])
        with torch.no_grad():
            logits = model(ids).logits[0, -(end - start) - 1 : -1]
        logps = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, -(end - start) :, None]).squeeze(-1)
        torch.testing.assert_close(logps, torch.tensor(result.encoded.logprobs[start:end]), atol=1e-4, rtol=1e-4)
    # Same seed, same episodes.
    again = run_episodes(env, backend, encoder, options, SamplingParams(max_new_tokens=5, temperature=1.0),
                         max_steps=2, seed=0)  # fmt: skip
    assert [r.encoded.completion_ids for r in again] == [r.encoded.completion_ids for r in results]


def test_the_trained_policy_keeps_its_prompts_for_one_rollout_call(tokenizer):
    """The trainer wraps its policy anew for each rollout call, keeping prompts' KV caches: a turn prefills only what
    follows the episode's last prompt, and the episodes are those of a backend that keeps none."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from dynaweb_env.llm.transformers_backend import TransformersBackend
    from dynaweb_env.models import prepare_model
    from dynaweb_trainer.trainer_policy import trainer_policy

    model = AutoModelForCausalLM.from_pretrained(prepare_model("tiny-random"))
    args = SimpleNamespace(ds3_gather_for_generation=True, gradient_checkpointing_kwargs=None)
    trainer = SimpleNamespace(model_wrapped=model, accelerator=Accelerator(cpu=True), args=args, use_vllm=False,
                              processing_class=tokenizer)  # fmt: skip
    env = make_click_button_vector_env(2, max_steps=3)
    encoder = EpisodeEncoder(tokenizer, max_axtree_chars=0)
    options = [{"task": TASK_ID, "task_seed": 0}, {"task": TASK_ID, "task_seed": 1}]
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)

    def play(backend):
        return run_episodes(env, backend, encoder, options, greedy, max_steps=3, seed=0)

    with trainer_policy(trainer) as kept:
        assert kept.prompt_states is not None
        with_kept = play(kept)
    assert kept.prompt_states.hits >= 2  # every episode's later turns extended its last prompt
    without = play(TransformersBackend(model, tokenizer=tokenizer))
    assert all(result.num_steps == 3 for result in with_kept)
    for mine, theirs in zip(with_kept, without, strict=True):
        assert mine.encoded.completion_ids == theirs.encoded.completion_ids
        torch.testing.assert_close(mine.encoded.logprobs, theirs.encoded.logprobs, atol=1e-4, rtol=1e-4)


def test_dream_episodes_with_world_model_and_judge(tokenizer):
    """On DreamWeb-v0 (tiny world model): valid clicks reach the world model, groups share a start."""
    from dynaweb_env.data.start_states import load_start_states
    from dynaweb_env.observation import axtree_element_ids
    from dynaweb_trainer.env_factory import make_vector_env

    args = GSPOConfig(output_dir="/tmp/unused", world_model="tiny-random", judge="world_model",
                      world_model_max_new_tokens=12, judge_max_new_tokens=12, dream_length=2,
                      agent_max_steps=3)  # fmt: skip
    env = make_vector_env("dream", args, num_envs=3)
    states = load_start_states(include_intermediate=False)
    options = [{"start_state": states[0].to_dict()}] * 2 + [{"start_state": states[5].to_dict()}]

    def click_first_element(prompt: str) -> str:
        tree = prompt.rsplit("OBSERVATION:\n", 1)[1]
        return f"REASON: try it.\nACTION: click [{axtree_element_ids(tree)[0]}]"

    policy = ScriptedPolicy(tokenizer, click_first_element)
    results = run_episodes(env, policy, EpisodeEncoder(tokenizer, max_axtree_chars=800), options,
                           SamplingParams(max_new_tokens=16), max_steps=3, seed=0)  # fmt: skip
    env.close()
    assert [result.source for result in results] == ["dream"] * 3
    assert results[0].observations[0] == results[1].observations[0] != results[2].observations[0]
    assert results[0].task_id == states[0].task_id
    for result in results:
        # The dream ends by the world model's terminal page or at dream_length: never the agent limit.
        assert 1 <= result.num_steps <= 2 and result.end_reason in ("terminated", "truncated")
        assert result.reward in (0.0, 1.0) and "judge_reasoning" in result.final_info
    # A 12-token random world model cannot write a well-formed page: its errors are counted.
    assert sum(result.world_model_errors for result in results) >= 1


def test_a_dream_started_mid_way_lists_its_recorded_actions(tokenizer):
    """With a prompt each turn, a dream from an intermediate start state opens with every recorded action before it
    (DreamWeb-v0's ``start_history``), as that recorded episode's turn read in SFT."""
    from dynaweb_env.data.start_states import load_start_states
    from dynaweb_trainer.env_factory import make_vector_env

    state = next(s for s in load_start_states(include_intermediate=True) if len(s.history) >= 2)
    args = GSPOConfig(output_dir="/tmp/unused", world_model="tiny-random", judge="world_model",
                      world_model_max_new_tokens=8, judge_max_new_tokens=8, dream_length=1)  # fmt: skip
    env = make_vector_env("dream", args, num_envs=1)
    policy = ScriptedPolicy(tokenizer, lambda prompt: "REASON: stop.\nACTION: stop [done]")
    encoder = EpisodeEncoder(tokenizer, page_history="actions")
    (result,) = run_episodes(env, policy, encoder, [{"start_state": state.to_dict()}],
                             SamplingParams(max_new_tokens=16), max_steps=1, seed=0)  # fmt: skip
    env.close()
    # The first prompt is the encoder's own turn prompt over the whole recorded history (its one list rule).
    assert result.encoded.turn_prompts[0] == encoder.turn_prompt_ids(result.observations[0], state.history)
    first = tokenizer.decode(result.encoded.turn_prompts[0])
    assert (
        "PREVIOUS ACTIONS:\n1. " in first and f"\n{len(state.history)}. " in first and "PREVIOUS ACTION:" not in first
    )


class _DreamLikeClickEnv(gym.Wrapper):
    """The identity task reset from a dream start state (its ``task_seed`` picks the target), reporting
    ``source="dream"``: a stand-in for DreamWeb-v0 whose rewards are known, to test which groups are re-dreamed."""

    def reset(self, *, seed=None, options=None):
        state = (options or {}).get("start_state", {})
        observation, info = self.env.reset(seed=seed, options={"task_seed": state.get("task_seed")})
        return observation, {**info, "source": "dream"}

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, "source": "dream"}


def test_flat_dream_groups_are_dreamed_again_from_new_start_states(tokenizer, tmp_path):
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from dynaweb_env.data.start_states import StartState
    from dynaweb_trainer.identity_env import ClickButtonEnv
    from dynaweb_trainer.task_queries import START_STATE_ID, StartStateIndex

    # Targets ONE..FOUR by task seed; the policy clicks [1] and [2] in turn, so a group of 2 whose target is
    # ONE or TWO has one success and one failure, and a group whose target is THREE or FOUR earns 0 twice.
    states = StartStateIndex(
        StartState(TASK_ID, "goal", "identity://", "page", trajectory_id=f"t{seed}", task_seed=seed)
        for seed in range(4)
    )
    clicks = iter(range(10**6))
    policy = ScriptedPolicy(tokenizer, lambda prompt: f"ACTION: click [{next(clicks) % 2 + 1}]")

    def env():
        return SyncVectorEnv(
            [lambda: _DreamLikeClickEnv(ClickButtonEnv(num_buttons=4)) for _ in range(4)],
            autoreset_mode=AutoresetMode.DISABLED,
        )

    prompts = [make_task_prompt("dream", TASK_ID, {START_STATE_ID: key}) for key in ("t0@0", "t2@0") for _ in (0, 1)]
    accelerator = SimpleNamespace(process_index=0, num_processes=1)
    trainer = SimpleNamespace(accelerator=accelerator, state=SimpleNamespace(global_step=0))
    import dynaweb_trainer.rollout_func as trainer_module

    original = trainer_module.trainer_policy
    trainer_module.trainer_policy = lambda _trainer: _Context(policy)
    outputs = {}
    try:
        for resamples in (0, 20):
            args = GSPOConfig(output_dir=str(tmp_path / str(resamples)), expert_frac=0.0, num_generations=2,
                              per_device_train_batch_size=4, max_turn_tokens=16, max_completion_length=512,
                              dream_resamples=resamples, seed=5)  # fmt: skip
            rollout = DynaWebRollout(args, EpisodeEncoder(tokenizer), None, {"dream": env}, start_states=states)
            outputs[resamples] = rollout(prompts, trainer)
            rollout.close()
    finally:
        trainer_module.trainer_policy = original
    off, on = outputs[0], outputs[20]
    # Off: the target-THREE group (t2) is flat and kept. On: it is replaced by a draw with a spread.
    assert sorted(off["reward"][:2]) == [0.0, 1.0] and off["reward"][2:] == [0.0, 0.0]
    assert off["rollout_stats"]["dream_resamples"] == 0
    assert sorted(on["reward"][:2]) == [0.0, 1.0] and sorted(on["reward"][2:]) == [0.0, 1.0]
    assert on["rollout_stats"]["dream_groups_resampled"] == 1 and on["rollout_stats"]["dream_resamples"] >= 1
    # The untouched group keeps its tokens' prompt; the redrawn one carries its new start page in its prompt ids.
    assert on["prompt_ids"][2] == on["prompt_ids"][3]
    assert on["source"] == ["dream"] * 4
    logged = list(iter_trajectories(tmp_path / "20" / "episodes.jsonl", on_error="raise"))
    attempts = [episode.metadata.get("resampled") for episode in logged]
    assert attempts[:2] == [None, None] and attempts[2] == attempts[3] >= 1
    assert [episode.metadata["options"]["start_state"]["task_seed"] in (0, 1) for episode in logged] == [True] * 4
    metrics = {}
    environment_reward(prompts=prompts, completions=[""] * 4, reward=on["reward"], source=on["source"],
                       rollout_stats=[on["rollout_stats"]] * 4, log_metric=metrics.__setitem__)  # fmt: skip
    assert metrics["env/dream_groups_resampled"] == 1


def test_dream_resamples_must_be_a_count():
    with pytest.raises(ValueError, match="dream_resamples"):
        GSPOConfig(output_dir="/tmp/unused", dream_resamples=-1)
