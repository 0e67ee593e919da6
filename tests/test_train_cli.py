"""dynaweb-train: config layering, end-to-end GSPO runs on dream / real / mix, checkpoints and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import TrainerCallback

from dynaweb_env.data.io import iter_trajectories
from dynaweb_env.models import TRAINING_WORLD_MODEL
from dynaweb_trainer.cli import parse_train_args, train_main
from dynaweb_trainer.config import GSPOConfig, available_presets
from dynaweb_trainer.identity_env import TASK_ID, expert_trajectory, make_click_button_vector_env
from dynaweb_trainer.task_queries import make_task_prompt
from dynaweb_trainer.trainer import DynaWebTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

#: Small, fast settings shared by the end-to-end runs (tiny random policy and world model).
TINY = [
    "--policy", "tiny-random", "--world-model", "tiny-random", "--judge", "tiny-random", "--num-generations", "2",
    "--per-device-train-batch-size", "4", "--max-turn-tokens", "8", "--agent-max-steps", "2",
    "--dream-length", "2", "--world-model-max-new-tokens", "16", "--judge-max-new-tokens", "16",
    "--max-axtree-chars", "600",
    "--learning-rate", "1e-3", "--logging-steps", "1", "--seed", "1",
]  # fmt: skip


def test_presets_config_file_and_flags_layer(tmp_path):
    assert {"cpu-small", "gpu", "paper"} <= set(available_presets())
    default = parse_train_args([])
    assert (default.policy, default.use_peft, default.environment) == ("smollm2-135m", True, "dream")
    assert default.judge is None  # DreamWeb-v0's default: the shipped trained judge of the tasks (models.default_judge)
    paper = parse_train_args(["--preset", "paper"])
    assert (paper.num_generations, paper.learning_rate, paper.temperature, paper.top_p) == (8, 1e-6, 0.7, 0.9)
    assert (paper.agent_max_steps, paper.dream_length, paper.expert_frac, paper.beta) == (10, 5, 0.5, 0.0)
    gpu = parse_train_args(["--preset", "gpu"])  # one GPU, no vLLM: Table 3's group and horizon, LoRA
    assert (gpu.num_generations, gpu.agent_max_steps, gpu.dream_length, gpu.use_vllm) == (8, 10, 5, False)
    assert gpu.use_peft and gpu.gradient_checkpointing and paper.use_vllm
    config = tmp_path / "run.yaml"
    config.write_text("env: mix\nreal_frac: 0.25\nlearning_rate: 3.0e-5\ntasks: [miniwob.click-button]\n")
    args = parse_train_args(["--config", str(config), "--learning-rate", "1e-4", "--expert-frac", "0.3"])
    assert (args.environment, args.real_frac, args.learning_rate, args.expert_frac) == ("mix", 0.25, 1e-4, 0.3)
    assert args.tasks == ["miniwob.click-button"]
    config.write_text("env: {DYNAWEB_TEST_VAR: '7'}\nenvironment: real\n")
    assert parse_train_args(["--config", str(config)]).environment == "real"
    assert os.environ.pop("DYNAWEB_TEST_VAR") == "7"
    config.write_text("no_such_field: 1\n")
    with pytest.raises(ValueError, match="no_such_field"):
        parse_train_args(["--config", str(config)])
    with pytest.raises(ValueError, match="unknown preset"):
        parse_train_args(["--preset", "nope"])
    for bad in ({"environment": "moon"}, {"expert_frac": 1.5}, {"dream_length": 0}, {"max_axtree_chars": -1}):
        with pytest.raises(ValueError):
            GSPOConfig(output_dir=str(tmp_path), **bad)


def test_the_presets_world_model_yields_to_an_output_mode_named_alone(tmp_path):
    """The presets dream with ``TRAINING_WORLD_MODEL`` (patch mode); naming only a mode picks that mode's model."""
    from dynaweb_env.envs.dream_setup import resolve_world_model
    from dynaweb_env.models import DEFAULT_WORLD_MODEL

    assert TRAINING_WORLD_MODEL != DEFAULT_WORLD_MODEL  # a training default changes only with a run that measures it
    for preset in ("cpu-small", "gpu"):
        assert parse_train_args(["--preset", preset]).world_model == TRAINING_WORLD_MODEL
    for argv in (["--world-model-output-mode", "tree"], ["--world_model_output_mode=tree"]):
        args = parse_train_args(argv)
        assert (
            args.world_model is None and resolve_world_model(None, args.world_model_output_mode)[0] == "smollm2-135m-wm"
        )
    config = tmp_path / "run.yaml"
    config.write_text("world_model_output_mode: tree\n")
    assert parse_train_args(["--config", str(config)]).world_model is None
    assert parse_train_args(["--world-model-output-mode", "patch"]).world_model == TRAINING_WORLD_MODEL
    named = parse_train_args(["--world-model", "smollm2-135m-wm", "--world-model-output-mode", "tree"])
    assert named.world_model == "smollm2-135m-wm"


def _lora_b_nonzero(output_dir: Path) -> bool:
    weights = load_file(str(output_dir / "adapter_model.safetensors"))
    lora_b = [tensor for name, tensor in weights.items() if "lora_B" in name]
    return bool(lora_b) and any(tensor.abs().sum() > 0 for tensor in lora_b)


def _run(tmp_path: Path, *extra: str) -> tuple[dict, list[dict]]:
    output_dir = tmp_path / "run"
    status = train_main([*TINY, "--output-dir", str(output_dir), "--disable-tqdm", "true", *extra])
    assert status == 0
    summary = json.loads((output_dir / "summary.json").read_text())
    state = json.loads(Path(summary["last_checkpoint"], "trainer_state.json").read_text())
    return summary, state["log_history"]


@pytest.mark.slow
def test_train_dream_end_to_end(tmp_path):
    summary, history = _run(tmp_path, "--env", "dream", "--expert-frac", "0.5", "--max-steps", "2", "--save-steps", "1")
    assert summary["global_step"] == 2 and summary["last_checkpoint"].endswith("checkpoint-2")
    assert 0 < summary["expert_share"] < 1
    logged = [entry for entry in history if "env/success_rate" in entry]
    assert len(logged) == 2 and all("loss" in entry for entry in logged)
    assert any("env/dream_steps" in entry for entry in logged) and any("env/wm_format_error_rate" in e for e in logged)
    # LoRA B matrices start at zero: non-zero ones prove the policy was updated by GSPO.
    assert _lora_b_nonzero(tmp_path / "run")
    # Every slot of both updates is on disk; a dream carries the judge's reasoning and its start state.
    episodes = list(iter_trajectories(tmp_path / "run" / "episodes.jsonl", on_error="raise"))
    slots = 4 * parse_train_args([]).gradient_accumulation_steps  # per_device_train_batch_size x the preset's
    assert sorted(episode.metadata["global_step"] for episode in episodes) == [0] * slots + [1] * slots
    dreams = [episode for episode in episodes if episode.source == "dream"]
    assert dreams and {episode.source for episode in episodes} == {"dream", "expert"}
    assert all("judge_reasoning" in dream.metadata and len(dream.steps) >= 2 for dream in dreams)
    assert all("axtree" not in dream.metadata["options"]["start_state"] for dream in dreams)


@pytest.mark.slow
def test_train_dream_with_a_prompt_each_turn(tmp_path):
    """``--page_history actions`` in dreams: the world model's pages reach each turn's own prompt, the update runs on
    a row a turn."""
    summary, history = _run(
        tmp_path, "--env", "dream", "--expert-frac", "0.5", "--max-steps", "1", "--page-history", "actions"
    )
    assert summary["global_step"] == 1 and [entry for entry in history if "loss" in entry]
    assert _lora_b_nonzero(tmp_path / "run")
    episodes = list(iter_trajectories(tmp_path / "run" / "episodes.jsonl", on_error="raise"))
    assert {episode.source for episode in episodes} == {"dream", "expert"}  # one record an episode, not a row


@pytest.mark.slow
def test_train_dream_with_group_relative_judging(tmp_path):
    """Reward guards reach the dreams of a GSPO run: each group's dreams are judged together, and recorded."""
    guards = '{"judge_votes": 2, "group_judging": "votes"}'
    summary, _ = _run(tmp_path, "--env", "dream", "--expert-frac", "0", "--max-steps", "1", "--reward-guards", guards)
    assert summary["reward_guards"] == {"judge_votes": 2, "group_judging": "votes"}
    dreams = list(iter_trajectories(tmp_path / "run" / "episodes.jsonl", on_error="raise"))
    # A tiny random policy mostly writes no valid action (such a dream is not judged); every judged one was judged
    # with its group, none was left pending.
    unjudged = ("the dream took no valid action", "")
    judged = [d for d in dreams if d.metadata["judge_reasoning"] not in unjudged]
    assert all(d.metadata["judge_reasoning"].startswith("group-relative (votes)") for d in judged)
    assert dreams and all(0.0 <= d.reward <= 1.0 for d in dreams)


@pytest.mark.browser
@pytest.mark.slow
def test_train_real_end_to_end(tmp_path):
    summary, history = _run(
        tmp_path, "--env", "real", "--tasks", "miniwob.click-button", "--real-task-seeds", "2",
        "--expert-frac", "0.5", "--max-steps", "1", "--num-envs", "2", "--save-steps", "1",
        "--gradient-accumulation-steps", "1",  # 4 episodes of G=2: the 2 task queries fill a round
    )  # fmt: skip
    assert summary["global_step"] == 1
    logged = [entry for entry in history if "env/success_rate" in entry]
    assert logged and "env/real_steps" in logged[0]
    assert _lora_b_nonzero(tmp_path / "run")


@pytest.mark.browser
@pytest.mark.slow
def test_train_mix_end_to_end(tmp_path):
    summary, history = _run(
        tmp_path, "--env", "mix", "--real-frac", "0.5", "--tasks", "miniwob.click-button", "--real-task-seeds", "2",
        "--expert-frac", "0.25", "--max-steps", "2", "--num-envs", "2", "--per-device-train-batch-size", "8",
    )  # fmt: skip
    logged = [entry for entry in history if "env/success_rate" in entry]
    assert any("env/real_steps" in entry for entry in logged) and any("env/dream_steps" in entry for entry in logged)
    assert _lora_b_nonzero(tmp_path / "run")


def _identity_trainer(output_dir: Path, max_steps: int, callbacks=None, experts=None, **overrides) -> DynaWebTrainer:
    values = dict(
        output_dir=str(output_dir), policy="tiny-random", environment="real", num_generations=2,
        per_device_train_batch_size=4, max_steps=max_steps, save_steps=1, learning_rate=1e-3, expert_frac=0.5,
        max_turn_tokens=6, max_completion_length=256, agent_max_steps=1, max_axtree_chars=0, report_to="none",
        gradient_checkpointing=False, disable_tqdm=True, logging_steps=1, seed=0,
    )  # fmt: skip
    values.update(overrides)
    prompts = [make_task_prompt("real", TASK_ID, {"task": TASK_ID, "task_seed": seed}) for seed in range(4)]
    return DynaWebTrainer(
        GSPOConfig(**values),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        vector_envs={"real": lambda: make_click_button_vector_env(4, max_steps=1)},
        expert_trajectories=[expert_trajectory(seed) for seed in range(4)] if experts is None else experts,
        callbacks=callbacks,
    )


def test_a_task_without_experts_is_named_when_experts_are_interleaved(tmp_path):
    with pytest.warns(UserWarning, match=f"no successful expert trajectory of 1 of the run's tasks \\({TASK_ID}\\)"):
        _identity_trainer(tmp_path, max_steps=1, experts=[])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _identity_trainer(tmp_path / "with", max_steps=1)  # the task has experts: no warning
        _identity_trainer(tmp_path / "none", max_steps=1, experts=[], expert_frac=0.0)  # none asked for
    assert not [w for w in caught if "no successful expert trajectory" in str(w.message)]


class _InterruptAfter(TrainerCallback):
    """Stops training after ``step`` steps, as an interruption would (checkpoints are already written)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step >= self.step
        return control


def test_resume_continues_from_last_checkpoint(tmp_path):
    from dynaweb_trainer.cli import resume_checkpoint

    first = _identity_trainer(tmp_path, max_steps=3, callbacks=[_InterruptAfter(2)])
    first.train()
    assert first.state.global_step == 2
    assert first.clock.before == 0.0  # a fresh run's clock starts at train begin, not when the trainer was built
    log = tmp_path / "episodes.jsonl"
    assert [episode.metadata["global_step"] for episode in iter_trajectories(log)] == [0] * 4 + [1] * 4
    # What an interruption after the checkpoint leaves: a record of the lost update 2, and half a line.
    lost = log.read_text().splitlines()[-1].replace('"global_step": 1', '"global_step": 2')
    with log.open("a") as handle:
        handle.write(lost + "\n" + lost[:40])
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    weights_at_2 = {k: v.clone() for k, v in first.model.state_dict().items() if "lora" in k}

    # A kill while checkpoint-3 was being written: the weights are there, trainer_state.json (written last) is not.
    torn = tmp_path / "checkpoint-3"
    torn.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (torn / name).write_bytes((tmp_path / "checkpoint-2" / name).read_bytes())

    second = _identity_trainer(tmp_path, max_steps=3, resume=True)
    checkpoint = resume_checkpoint(second.args)
    assert checkpoint.endswith("checkpoint-2")  # the torn checkpoint-3 is skipped
    second.train(resume_from_checkpoint=checkpoint)
    assert second.state.global_step == 3
    assert second.rollout_func.calls == 1  # steps 1-2 were not redone
    # The optimizer state came from the checkpoint: Adam has taken 3 steps, not 1.
    steps = {int(state["step"]) for state in second.optimizer.state.values()}
    assert steps == {3}
    # ...and the adapter weights too (loaded at step 2, then updated once).
    loaded = {k: v for k, v in second.model.state_dict().items() if "lora" in k}
    assert weights_at_2.keys() == loaded.keys()
    assert any(not torch.equal(weights_at_2[k], loaded[k]) for k in loaded)
    history_steps = [entry["step"] for entry in second.state.log_history if "loss" in entry]
    assert history_steps == [1, 2, 3]
    # Real and expert steps survive the resume: each step's 2 groups of G=2 hold 1 expert and 1 real
    # episode each, all of 1 step, so 3 steps make 6 and 6 (2 and 2 if the counts restarted at 0).
    summary = second.summary()
    assert (summary["real_env_steps"], summary["expert_env_steps"]) == (6, 6)
    assert summary["policy_episodes"] == 6  # the policy's episodes before the resume count too (2 if they restarted)
    # Training time too: the seconds up to checkpoint-2, saved in it, plus this segment's.
    saved = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())
    seconds_at_2 = saved["stateful_callbacks"]["RunClock"]["attributes"]["seconds"]
    assert 0 < seconds_at_2 < summary["train_seconds"]
    # The episode log matches the model's updates: the lost update's records and the torn line are gone.
    episodes = list(iter_trajectories(log, on_error="raise"))
    assert [episode.metadata["global_step"] for episode in episodes] == [0] * 4 + [1] * 4 + [2] * 4
    assert [episode.source for episode in episodes].count("expert") == 6
    real = [episode for episode in episodes if episode.source == "real"]
    assert all(episode.metadata["options"]["task"] == TASK_ID and episode.steps[0].action for episode in real)


def test_policy_lora_adapter_loads_trainable_on_its_embedded_base(tmp_path):
    """An SFT output (a LoRA adapter naming an embedded base) is a valid --policy, and RL trains that adapter."""
    from peft import LoraConfig, get_peft_model

    from dynaweb_env.models import name_adapter_base
    from dynaweb_trainer.model_loading import load_model_and_tokenizer

    base, tokenizer, _ = load_model_and_tokenizer("tiny-random", trainable=True)
    adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    adapter.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    name_adapter_base(tmp_path, "tiny-random")  # as dynaweb-sft does: no local cache path in the config
    model, loaded_tokenizer, details = load_model_and_tokenizer(str(tmp_path), trainable=True)
    assert details["base_model"] == "tiny-random"
    trainable = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert hasattr(model, "peft_config") and trainable and all("lora_" in name for name in trainable)
    assert loaded_tokenizer.vocab_size == tokenizer.vocab_size


@pytest.mark.slow
def test_kill_and_resume_cli(tmp_path):
    """A real interruption: SIGKILL the CLI after its first checkpoint, then --resume to the end."""
    output_dir = tmp_path / "run"
    run = [*TINY, "--env", "dream", "--expert-frac", "0.5", "--max-steps", "3", "--save-steps", "1",
           "--output-dir", str(output_dir), "--disable-tqdm", "true"]  # fmt: skip
    command = [sys.executable, "-m", "dynaweb_trainer.cli", *run]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 900
        while not (output_dir / "checkpoint-1" / "trainer_state.json").exists():
            assert process.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
            time.sleep(1)
        time.sleep(2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (output_dir / "summary.json").exists()
    assert train_main([*run, "--resume"]) == 0
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["global_step"] == 3 and summary["last_checkpoint"].endswith("checkpoint-3")
    state = json.loads((output_dir / "checkpoint-3" / "trainer_state.json").read_text())
    assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == [1, 2, 3]
