"""GSPO: the trainer's loss equals the paper's eq. 8-10 computed by hand, over the policy's own tokens."""

from __future__ import annotations

import os

import pytest
import torch
from datasets import Dataset

from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.identity_env import TASK_ID, expert_trajectory, make_click_button_vector_env
from dynaweb_trainer.task_queries import make_task_prompt
from dynaweb_trainer.trainer import DynaWebTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TEMPERATURE = 0.7
EPS_LOW, EPS_HIGH = 0.2, 0.28


def _trainer(tmp_path, experts=None, **overrides) -> DynaWebTrainer:
    torch.manual_seed(0)
    values = dict(
        output_dir=str(tmp_path / "run"), policy="tiny-random", use_peft=False, environment="real",
        num_generations=2, per_device_train_batch_size=4, max_steps=1, temperature=TEMPERATURE,
        epsilon=EPS_LOW, epsilon_high=EPS_HIGH, expert_frac=0.0, max_turn_tokens=6, max_completion_length=256,
        agent_max_steps=2, max_axtree_chars=0, report_to="none", gradient_checkpointing=False, save_strategy="no",
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    values.update(overrides)
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": i}) for i in range(2)]
    return DynaWebTrainer(
        GSPOConfig(**values),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        vector_envs={"real": lambda: make_click_button_vector_env(4, max_steps=2)},
        expert_trajectories=experts,
    )


def _policy_logps(model, prompt_ids, completion_ids, attention_mask):
    """log π_θ(y_k | ...) of every completion token, by hand: log_softmax(logits / T) at y_k."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / TEMPERATURE
    logps = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return logps[:, -completion_ids.shape[1] :]


def _gspo_by_hand(logps, old_logps, advantages, loss_mask):
    """Eq. 8-10: s_i = exp(mean over policy tokens of log r_k); J = 1/G sum_i min(s_i A_i, clip(s_i) A_i)."""
    losses = []
    for i in range(logps.shape[0]):
        tokens = loss_mask[i].bool()
        s_i = torch.exp((logps[i][tokens] - old_logps[i][tokens]).mean())
        clipped = torch.clamp(s_i, 1 - EPS_LOW, 1 + EPS_HIGH)
        losses.append(-torch.minimum(s_i * advantages[i], clipped * advantages[i]))
    return torch.stack(losses).mean(), [
        float(torch.exp((logps[i][m.bool()] - old_logps[i][m.bool()]).mean())) for i, m in enumerate(loss_mask)
    ]


def test_trainer_loss_matches_hand_computed_gspo(tmp_path):
    trainer = _trainer(tmp_path)
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    generator = torch.Generator().manual_seed(0)
    batch, prompt_len, width = 4, 7, 9
    prompt_ids = torch.randint(10, 1000, (batch, prompt_len), generator=generator)
    completion_ids = torch.randint(10, 1000, (batch, width), generator=generator)
    lengths = [9, 6, 4, 8]  # different lengths: right padding
    completion_mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    env_mask = torch.ones(batch, width, dtype=torch.long)  # observation tokens inside the episodes
    env_mask[0, 3:6] = 0
    env_mask[1, 1:3] = 0
    env_mask[3, 2:5] = 0
    attention_mask = torch.cat([torch.ones(batch, prompt_len, dtype=torch.long), completion_mask], dim=1)
    with torch.no_grad():
        logps = _policy_logps(model, prompt_ids, completion_ids, attention_mask)
    # Old log-probs: per-sequence shifts that put s_i inside, above and below the clip range, plus
    # token noise; env-masked tokens get wild values that must not matter.
    shifts = torch.tensor([0.05, -0.6, 0.5, -0.1])[:, None]
    old_logps = logps - shifts + 0.05 * torch.randn(batch, width, generator=generator)
    old_logps = torch.where(env_mask.bool(), old_logps, torch.full_like(old_logps, -50.0))
    advantages = torch.tensor([1.0, -0.5, 1.5, -1.0])
    inputs = {
        "prompt_ids": prompt_ids, "prompt_mask": torch.ones(batch, prompt_len, dtype=torch.long),
        "completion_ids": completion_ids, "completion_mask": completion_mask, "tool_mask": env_mask,
        "advantages": advantages, "old_per_token_logps": old_logps,
        "num_items_in_batch": (completion_mask * env_mask).sum(),
    }  # fmt: skip
    loss = trainer.compute_loss(model, inputs)
    with torch.no_grad():
        logps_now = _policy_logps(model, prompt_ids, completion_ids, attention_mask)
    expected, ratios = _gspo_by_hand(logps_now, old_logps, advantages, completion_mask * env_mask)
    # The batch exercises both clipped and unclipped sequences.
    clipped = [not (1 - EPS_LOW <= r <= 1 + EPS_HIGH) for r in ratios]
    assert any(clipped) and not all(clipped), ratios
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-6)

    # Env-masked tokens carry no weight: changing their old log-probs leaves the loss unchanged...
    inputs["old_per_token_logps"] = torch.where(env_mask.bool(), old_logps, torch.zeros_like(old_logps))
    torch.testing.assert_close(trainer.compute_loss(model, inputs).detach(), expected, rtol=1e-5, atol=1e-6)
    # ...while unmasking them changes it (the mask is really applied).
    inputs["tool_mask"] = torch.ones_like(env_mask)
    assert not torch.isclose(trainer.compute_loss(model, inputs).detach(), expected, rtol=1e-3)


@pytest.mark.parametrize("use_peft", [False, True])
def test_completion_only_head_matches_trl(tmp_path, use_peft):
    """The CPU override (LM head on completion positions only) gives TRL's log-probs, entropies and grads."""
    from trl import GRPOTrainer

    trainer = _trainer(tmp_path, use_peft=use_peft, lora_dropout=0.0)  # dropout would make two passes differ
    model = trainer.model
    model.train()
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(10, 1000, (3, 20), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -3:] = 0  # right padding of a shorter completion
    attention_mask[2, :2] = 0  # left padding of a shorter prompt
    results = []
    for method in (trainer._get_per_token_logps_and_entropies,
                   lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k)):  # fmt: skip
        model.zero_grad()
        logps, entropies, _ = method(model, input_ids, attention_mask, 8, compute_entropy=True)
        (logps * attention_mask[:, -8:]).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logps.detach(), entropies.detach(), grads))
    (ours, our_entropy, our_grads), (trl, trl_entropy, trl_grads) = results
    keep = attention_mask[:, -8:].bool()
    torch.testing.assert_close(ours[keep], trl[keep], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(our_entropy[keep], trl_entropy[keep], rtol=1e-4, atol=1e-4)
    assert our_grads.keys() == trl_grads.keys() and our_grads
    for name in our_grads:
        torch.testing.assert_close(our_grads[name], trl_grads[name], rtol=1e-3, atol=1e-5)


def test_rollout_env_mask_reaches_the_loss(tmp_path):
    """The env_mask returned by the rollout is the mask TRL applies (as tool_mask) in the loss."""
    trainer = _trainer(tmp_path)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._generate_and_score_completions(batch)
    results = trainer.rollout_func.last_results
    assert len(results) == 4 and all(result.num_steps >= 1 for result in results)
    for row, result in enumerate(results):
        n = len(result.encoded.completion_ids)
        assert inputs["completion_ids"][row, :n].tolist() == result.encoded.completion_ids
        assert inputs["tool_mask"][row, :n].tolist() == result.encoded.env_mask
        assert inputs["completion_mask"][row, :n].sum() == n
    multi_turn = [result for result in results if result.num_steps > 1]
    assert multi_turn and all(0 in result.encoded.env_mask for result in multi_turn)
    # Recompute the loss by hand from what the trainer holds (old log-probs default to the current ones,
    # so every s_i is 1 and the loss is -mean(A_i)).
    loss = trainer.compute_loss(trainer.model, inputs)
    torch.testing.assert_close(loss.detach(), -inputs["advantages"].mean(), rtol=1e-5, atol=1e-6)


def test_a_prompt_each_turn_makes_a_row_each_turn_with_its_episodes_advantage(tmp_path):
    """page_history='actions': TRL gets T rows an episode, each turn under its own prompt, empty rows weigh nothing,
    and a real update runs on them."""
    # Half the episodes are expert replays (reward 1), so advantages differ and the update moves the weights.
    experts = [expert_trajectory(seed) for seed in range(2)]
    trainer = _trainer(
        tmp_path, experts, page_history="actions", per_device_train_batch_size=2, num_generations=2, expert_frac=0.5
    )
    args, slots = trainer.args, 2  # agent_max_steps=2, and the identity task has no longer limit
    assert (args.num_generations, args.gradient_accumulation_steps, args.loss_type) == (4, 2, "grpo")
    assert trainer.rollout_func.turn_slots == slots and trainer.num_generations == 4
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    inputs = trainer._generate_and_score_completions(batch)
    results = trainer.rollout_func.last_results
    assert len(results) == 2 and inputs["completion_ids"].shape[0] == 2 * slots  # one query, two episodes
    eos = trainer.processing_class.eos_token_id
    for episode, result in enumerate(results):
        turns = result.encoded.turns()
        for slot in range(slots):
            row = episode * slots + slot
            n = int(inputs["completion_mask"][row].sum())
            completion, mask = inputs["completion_ids"][row, :n].tolist(), inputs["tool_mask"][row, :n].tolist()
            if slot < len(turns):  # this turn's answer, trained on, after this turn's prompt
                assert completion == turns[slot][1] and mask == [1] * n
                prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
                assert prompt == turns[slot][0]
            else:  # an empty slot: one EOS, masked
                assert completion == [eos] and mask == [0]
        # Every row of an episode has its advantage.
        advantages = inputs["advantages"][episode * slots : (episode + 1) * slots]
        assert torch.all(advantages == advantages[0])
    # The expert replay (one click) leaves an empty slot: the masked-row branch above was exercised.
    assert any(r.source == "expert" and r.encoded.num_turns < slots for r in results)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()  # a real optimizer step on rows a turn
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[name], after[name].detach()) for name in before)


@pytest.mark.parametrize("field", ["importance_sampling_level", "loss_type", "beta", "epsilon", "num_generations"])
def test_config_defaults_are_gspo_with_table3(field):
    config = GSPOConfig(output_dir="/tmp/unused")
    expected = {"importance_sampling_level": "sequence", "loss_type": "grpo", "beta": 0.0, "epsilon": 3e-4,
                "num_generations": 8}  # fmt: skip
    assert getattr(config, field) == expected[field]
    assert (config.temperature, config.top_p, config.learning_rate) == (0.7, 0.9, 1e-6)
    assert (config.world_model_temperature, config.agent_max_steps, config.dream_length) == (0.7, 10, 5)
