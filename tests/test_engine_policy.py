"""Policy rollouts on the CTranslate2 engine inside the GSPO trainer (``--use-engine``): weights synced
after every optimizer step, sampling log-probs in TRL's importance-sampling correction."""

from __future__ import annotations

import os

import pytest
import torch
from datasets import Dataset

from dynaweb_env.llm import SamplingParams
from dynaweb_trainer.config import GSPOConfig
from dynaweb_trainer.engine_policy import merged_weights
from dynaweb_trainer.identity_env import TASK_ID, make_click_button_vector_env
from dynaweb_trainer.task_queries import make_task_prompt
from dynaweb_trainer.trainer import DynaWebTrainer

pytest.importorskip("ctranslate2", reason="needs the engine extra: pip install 'dynaweb[engine]'")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _trainer(tmp_path, **overrides) -> DynaWebTrainer:
    torch.manual_seed(0)
    values = dict(
        output_dir=str(tmp_path / "run"), policy="tiny-random", use_peft=True, environment="real",
        num_generations=2, per_device_train_batch_size=4, max_steps=2, temperature=0.7, learning_rate=5e-2,
        expert_frac=0.0, max_turn_tokens=6, max_completion_length=256, agent_max_steps=2, max_axtree_chars=0,
        report_to="none", gradient_checkpointing=False, save_strategy="no", disable_tqdm=True, seed=0,
        use_engine=True, engine_quantization="float32", logging_steps=1,
    )  # fmt: skip
    values.update(overrides)
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": i}) for i in range(2)]
    return DynaWebTrainer(
        GSPOConfig(**values),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        vector_envs={"real": lambda: make_click_button_vector_env(4, max_steps=2)},
    )


def test_rollouts_on_the_engine_sync_weights_each_step_and_feed_importance_sampling(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.train()
    sync = trainer.engine_sync
    # One conversion before the first rollout, one after the first optimizer step.
    assert len(sync.sync_seconds) == 2 and all(seconds > 0 for seconds in sync.sync_seconds)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all("engine/sync_seconds" in entry for entry in logs)
    # TRL's importance-sampling correction ran on the engine's log-probs, and they match the trainer's
    # (float32 engine weights): the mean |old - sampling| log-prob gap is tiny.
    assert all("sampling/sampling_logp_difference/mean" in entry for entry in logs)
    assert all(entry["sampling/sampling_logp_difference/mean"] < 1e-2 for entry in logs)
    assert any(key.startswith("sampling/importance_sampling_ratio") for key in logs[0])
    assert trainer.rollout_func.total_stats.episodes > 0

    # The engine follows the updated policy: after the sync TRL would run before the next rollout, its
    # sampling log-probs are those of the trained model, LoRA adapter merged (large update at this lr).
    sync.sync_weights()
    prompt = trainer.processing_class("click the button", add_special_tokens=False)["input_ids"]
    params = SamplingParams(max_new_tokens=5, temperature=0.7, seed=1)
    [generation] = sync.backend.generate_from_ids([prompt], params)
    model = trainer.accelerator.unwrap_model(trainer.model)
    ids = torch.tensor([prompt + generation.completion_ids])
    with torch.no_grad(), merged_weights(model) as plain:
        logits = plain(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(generation.completion_ids)[:, None]).squeeze(-1)
    assert generation.logprobs == pytest.approx(expected.tolist(), abs=2e-3)
    assert any("lora_A" in name for name, _ in model.named_parameters())  # merging left the adapter in place
    sync.close()


def test_use_engine_refuses_vllm(tmp_path):
    from dynaweb_trainer.engine_policy import attach_engine

    trainer = _trainer(tmp_path, use_engine=False)
    trainer.use_vllm = True
    with pytest.raises(ValueError, match="vLLM"):
        attach_engine(trainer)
