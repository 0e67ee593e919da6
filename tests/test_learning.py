"""GSPO learns: on "click the button named X" the success rate rises (Stable-Baselines3 identity-env style).

A tiny random Llama cannot write ``click [k]`` at all, so it is first taught the *format* by a
short supervised warm start on every ``click [k]`` answer for every page (the paper, too, starts RL
from an SFT'd agent): afterwards it clicks a uniformly random button (success ~ 1 / buttons). Only
GSPO, rewarded by the env, can then move it to the right button.
"""

from __future__ import annotations

import os

import pytest
import torch
from datasets import Dataset

from dynaweb_env.llm.base import SamplingParams
from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.encoding import EpisodeEncoder
from dynaweb_trainer.identity_env import TASK_ID, ClickButtonEnv, make_click_button_vector_env
from dynaweb_trainer.rollout import run_episodes, summarize_episodes
from dynaweb_trainer.task_queries import make_task_prompt
from dynaweb_trainer.trainer import DynaWebTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
SYSTEM_PROMPT = "Click the button the objective names: answer click [id]."


def _policy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dynaweb_env.models import prepare_model

    torch.manual_seed(0)
    path = prepare_model("tiny-random")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _warm_start(model, encoder: EpisodeEncoder, target: str | None, steps: int, buttons: int) -> None:
    """Teach the answer format: every page paired with every ``click [k]`` (so no button is preferred)."""
    rows = []
    seeds = [0] if target is not None else range(buttons)  # a fixed target gives one page
    for seed in seeds:
        observation, _ = ClickButtonEnv(buttons, target=target).reset(options={"task_seed": seed})
        prompt = encoder.prompt_ids(observation)
        rows += [(prompt, encoder.response_ids(f"click [{k}]")) for k in range(1, buttons + 1)]
    width, answer = max(len(p) for p, _ in rows), len(rows[0][1])
    pad = encoder.tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p + c for p, c in rows])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + len(c)) for p, c in rows])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=answer + 1).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), input_ids[:, -answer:].reshape(-1)
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _success_rate(model, tokenizer, encoder, target, buttons, episodes=32) -> float:
    from dynaweb_env.llm.transformers_backend import TransformersBackend

    env = make_click_button_vector_env(16, num_buttons=buttons, target=target, max_steps=1)
    options = [{"task": TASK_ID, "task_seed": i % buttons} for i in range(episodes)]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1.0)
    backend = TransformersBackend(model, tokenizer=tokenizer)
    return summarize_episodes(run_episodes(env, backend, encoder, options, sampling, max_steps=1, seed=123))[
        "success_rate"
    ]


def _learn(
    tmp_path,
    target: str | None,
    warm_start_steps: int,
    gspo_steps: int,
    buttons: int = 4,
    episodes: int = 32,
    **overrides,
) -> tuple[float, float, list[float]]:
    model, tokenizer = _policy()
    encoder = EpisodeEncoder(tokenizer, SYSTEM_PROMPT)
    _warm_start(model, encoder, target, warm_start_steps, buttons)
    before = _success_rate(model, tokenizer, encoder, target, buttons, episodes)
    values = dict(
        output_dir=str(tmp_path / "run"), policy="tiny-random", use_peft=False, environment="real",
        system_prompt=SYSTEM_PROMPT, num_generations=8, per_device_train_batch_size=16, max_steps=gspo_steps,
        learning_rate=2e-3, lr_scheduler_type="constant", temperature=1.0, top_p=1.0, expert_frac=0.0,
        max_turn_tokens=6, max_completion_length=64, agent_max_steps=1, report_to="none", save_strategy="no",
        gradient_checkpointing=False, disable_tqdm=True, logging_steps=1, seed=0,
    )  # fmt: skip
    args = GSPOConfig(**{**values, **overrides})
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": i}) for i in range(buttons)]
    trainer = DynaWebTrainer(
        args, model=model, processing_class=tokenizer, train_dataset=Dataset.from_dict({"prompt": prompts}),
        vector_envs={"real": lambda: make_click_button_vector_env(16, num_buttons=buttons, target=target,
                                                                  max_steps=1)},
    )  # fmt: skip
    trainer.train()
    curve = [entry["env/success_rate"] for entry in trainer.state.log_history if "env/success_rate" in entry]
    return before, _success_rate(trainer.model, tokenizer, encoder, target, buttons, episodes), curve


def test_gspo_learns_to_click_the_named_button(tmp_path):
    """Fast version: one fixed target (a one-armed identity task), 20 GSPO steps at lr 1e-3.

    (Full-weight Adam on a random 2-layer model is touchy. With transformers 5.23 / accelerate 1.15,
    lr 2e-3 collapsed to malformed answers after the first update (success 0.5 -> 0.0 for good), while
    1e-3 went 0.375 -> 0.81 and 5e-4 only to 0.59 in 20 steps; older stacks learned at 2e-3.)
    """
    before, after, curve = _learn(tmp_path, target="TWO", warm_start_steps=150, gspo_steps=20, learning_rate=1e-3)
    assert before < 0.5, f"the warm start should click at random, success {before}"
    assert after >= 0.75, f"GSPO should have learned the button: success {before} -> {after} (curve {curve})"
    assert sum(curve[-4:]) / 4 > sum(curve[:4]) / 4 + 0.25, curve


@pytest.mark.slow
def test_gspo_learns_with_lora(tmp_path):
    """Slow version: the default training mode (a LoRA adapter on every linear layer), 40 steps.

    LoRA learns more slowly than full weights here (0.375 -> ~0.65 in 40 steps at lr 3e-3; at 1e-2
    the policy collapsed), so the bar is lower.
    """
    before, after, curve = _learn(
        tmp_path, target="TWO", warm_start_steps=150, gspo_steps=40, episodes=128, use_peft=True, learning_rate=3e-3,
        lora_r=8, lora_alpha=16, lora_dropout=0.0,
    )  # fmt: skip
    assert before < 0.5
    assert after >= before + 0.2, f"success {before} -> {after} (curve {curve})"
    assert sum(curve[-10:]) / 10 > sum(curve[:10]) / 10 + 0.2, curve
