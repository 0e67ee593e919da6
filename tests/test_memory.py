"""The memory estimate of a training run, and the refusal of a run that cannot fit, before anything loads."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dynaweb_trainer.cli import parse_train_args
from dynaweb_trainer.memory import (
    GIB,
    SMOLLM2_135M,
    MemoryBudgetError,
    check_training_memory,
    estimate_training_memory,
    longest_episode_tokens,
    model_shape,
)


def test_default_run_is_estimated_to_fit_a_laptop():
    """``make demo``'s training command: one episode at a time, checkpointed, well under 8 GiB at its longest."""
    args = parse_train_args(["--env", "dream", "--expert-frac", "0.5"])
    assert args.per_device_train_batch_size == 1 and args.gradient_checkpointing
    estimate = estimate_training_memory(args)
    assert estimate.micro_batch == 1
    assert 2 * GIB < estimate.total < 8 * GIB, estimate.describe()
    # The judge is left to DreamWeb-v0 (None): still a model of its own, counted; the world model's judging is not.
    assert args.judge is None and estimate.parts["judge"] > 0
    by_world_model = parse_train_args(["--env", "dream", "--judge", "world_model"])
    assert "judge" not in estimate_training_memory(by_world_model).parts


def test_estimate_grows_with_what_a_micro_batch_holds():
    base = parse_train_args(["--memory-check", "false"])
    more = parse_train_args(["--per-device-train-batch-size", "4", "--gradient-accumulation-steps", "1"])
    unchecked = parse_train_args(["--gradient-checkpointing", "false"])
    longer = parse_train_args(["--agent-max-steps", "10", "--max-completion-length", "16000"])
    total = estimate_training_memory(base).total
    assert estimate_training_memory(more).total > total + 2 * GIB
    assert estimate_training_memory(unchecked).total > total + 1 * GIB
    assert longest_episode_tokens(longer) > longest_episode_tokens(base)
    assert estimate_training_memory(longer).total > total


def test_shapes_are_read_from_shipped_models_without_loading_them():
    assert model_shape("smollm2-135m") == SMOLLM2_135M or model_shape("smollm2-135m").num_hidden_layers == 30
    assert model_shape("smollm2-135m-judge-dagger").hidden_size == 576  # an adapter: its base model's shape
    assert model_shape("openai:wm@http://127.0.0.1:1/v1") == SMOLLM2_135M


def test_refusal_names_the_estimate_and_the_flags_that_fix_it(monkeypatch):
    import dynaweb_trainer.memory as memory

    args = parse_train_args(["--gradient-checkpointing", "false", "--per-device-train-batch-size", "4",
                             "--gradient-accumulation-steps", "1"])  # fmt: skip
    monkeypatch.setattr(memory, "available_memory", lambda: 8.0 * GIB)
    with pytest.raises(MemoryBudgetError) as caught:
        check_training_memory(args)
    message = str(caught.value)
    assert "8.0 GiB available" in message and "estimated" in message
    assert "--gradient-checkpointing true" in message
    assert "--per-device-train-batch-size 1 --gradient-accumulation-steps 4" in message
    # Following the advice makes the same run fit the same machine.
    fixed = parse_train_args(["--gradient-checkpointing", "true", "--per-device-train-batch-size", "1",
                              "--gradient-accumulation-steps", "4"])  # fmt: skip
    assert check_training_memory(fixed).total < 8.0 * GIB


def test_dynaweb_train_refuses_the_paper_preset_on_this_machine_before_loading_anything(tmp_path):
    """The paper's recipe (8 x 16k-token episodes at once, all weights) cannot fit a 24 GB machine: exit 2, fast."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "dynaweb_trainer.cli", "--preset", "paper", "--use-vllm", "false",
         "--report-to", "none", "--output-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "estimated" in result.stderr and "GiB available" in result.stderr
    assert "--per-device-train-batch-size 1" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # nothing written, nothing loaded
    assert time.perf_counter() - started < 120
