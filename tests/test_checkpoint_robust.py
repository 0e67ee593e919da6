"""Checkpoints complete or ignored (issue 49 item 5): ``trainer_state.json`` is written whole (temporary file,
fsync, rename), and a checkpoint whose state does not parse is skipped with a warning for the one before it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from transformers import TrainerState

from dynaweb_trainer.checkpoint_state import AtomicTrainerState, write_trainer_state
from dynaweb_trainer.model_loading import TRAINER_STATE_FILE, is_complete_checkpoint, last_checkpoint

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _checkpoint(root: Path, step: int, state: bytes | None = None) -> Path:
    """A checkpoint directory with weights and (unless ``state`` is given) a real TrainerState's file."""
    directory = root / f"checkpoint-{step}"
    directory.mkdir()
    (directory / "adapter_model.safetensors").write_bytes(b"weights")
    (directory / "adapter_config.json").write_text("{}")
    if state is None:
        write_trainer_state(TrainerState(global_step=step, log_history=[{"loss": 1.0, "step": step}]),
                            directory / TRAINER_STATE_FILE)  # fmt: skip
    else:
        (directory / TRAINER_STATE_FILE).write_bytes(state)
    return directory


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda whole: whole[: len(whole) // 2], "JSONDecodeError"),  # issue 49's repro: written half-way
        (lambda whole: b"", "JSONDecodeError"),  # created, nothing written yet
        (lambda whole: b"\xff" + whole, "UnicodeDecodeError"),
        (lambda whole: b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
        (lambda whole: b"[1, 2]", "not a JSON object"),
    ],
)
def test_a_checkpoint_whose_state_does_not_parse_is_skipped_with_a_warning(tmp_path, damage, reason):
    good = _checkpoint(tmp_path, 1)
    whole = (good / TRAINER_STATE_FILE).read_bytes()
    torn = _checkpoint(tmp_path, 2, damage(whole))
    assert is_complete_checkpoint(good) and not is_complete_checkpoint(torn)
    with pytest.warns(UserWarning, match=rf"skipping checkpoint {torn}: {TRAINER_STATE_FILE} .*{reason}"):
        assert last_checkpoint(tmp_path) == str(good)  # what --resume picks
    assert last_checkpoint(tmp_path, resumable=False) == str(torn)  # its weights still load as a model
    (good / TRAINER_STATE_FILE).unlink()
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert last_checkpoint(tmp_path) is None  # nothing complete: a resume starts from scratch


class _DiesMidWrite(TrainerState):
    """A state whose save stops half-way through the file, as a kill or a full disk would stop it."""

    def save_to_json(self, json_path: str) -> None:
        text = json.dumps({"global_step": self.global_step, "log_history": self.log_history})
        with open(json_path, "w", encoding="utf-8") as handle:
            handle.write(text[: len(text) // 2])
        raise OSError("No space left on device")


def test_a_write_cut_short_leaves_the_previous_state_whole(tmp_path):
    path = tmp_path / TRAINER_STATE_FILE
    write_trainer_state(TrainerState(global_step=1), path)
    with pytest.raises(OSError, match="No space left"):
        write_trainer_state(_DiesMidWrite(global_step=2, log_history=[{"loss": 0.5}] * 100), path)
    assert json.loads(path.read_text())["global_step"] == 1  # the old file, not half of the new one
    write_trainer_state(TrainerState(global_step=3), path)  # the next save replaces the temporary file's remains
    assert json.loads(path.read_text())["global_step"] == 3 and sorted(p.name for p in tmp_path.iterdir()) == [
        TRAINER_STATE_FILE
    ]
    # The file is transformers' own format: it loads back as a TrainerState.
    assert TrainerState.load_from_json(str(path)).global_step == 3


def test_training_writes_states_atomically_and_resumes_past_a_torn_one(tmp_path):
    """A real GSPO run (identity env): every checkpoint's state is written through the hook; half-writing the
    last one (the issue's repro) makes ``--resume`` fall back to the one before, with a warning, and go on."""
    from test_train_cli import _identity_trainer, _InterruptAfter

    from dynaweb_trainer.cli import resume_checkpoint

    first = _identity_trainer(tmp_path, max_steps=3, callbacks=[_InterruptAfter(2)])
    assert any(isinstance(callback, AtomicTrainerState) for callback in first.callback_handler.callbacks)
    first.train()
    assert "save_to_json" in vars(first.state)  # the trainer's state saves through write_trainer_state
    for step in (1, 2):
        files = sorted(p.name for p in (tmp_path / f"checkpoint-{step}").iterdir())
        assert TRAINER_STATE_FILE in files and not [name for name in files if name.endswith(".tmp")]
        assert json.loads((tmp_path / f"checkpoint-{step}" / TRAINER_STATE_FILE).read_text())["global_step"] == step
    state = tmp_path / "checkpoint-2" / TRAINER_STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])

    second = _identity_trainer(tmp_path, max_steps=2, resume=True)
    with pytest.warns(UserWarning, match=r"skipping checkpoint .*checkpoint-2: trainer_state\.json does not parse"):
        checkpoint = resume_checkpoint(second.args)
    assert checkpoint.endswith("checkpoint-1")
    second.train(resume_from_checkpoint=checkpoint)
    assert second.state.global_step == 2 and second.rollout_func.calls == 1  # step 2 redone, step 1 not
    assert json.loads(state.read_text())["global_step"] == 2  # checkpoint-2 whole again


def test_sft_checkpoints_are_written_atomically_and_a_torn_one_is_skipped(tmp_path):
    from test_sft import make_trajectory, tiny_config

    from dynaweb_trainer.sft import build_sft_trainer, train_policy_sft

    trajectories = [make_trajectory(index) for index in range(2)]
    trainer, _ = build_sft_trainer(tiny_config(tmp_path, max_steps=2, save_steps=1), trajectories)
    trainer.train()
    assert "save_to_json" in vars(trainer.state)
    state = tmp_path / "sft" / "checkpoint-2" / TRAINER_STATE_FILE
    assert json.loads(state.read_text())["global_step"] == 2
    state.write_text(state.read_text()[:100])
    with pytest.warns(UserWarning, match="skipping checkpoint .*checkpoint-2"):
        summary = train_policy_sft(
            tiny_config(tmp_path, max_steps=2, save_steps=1, resume_from_checkpoint="last"), trajectories
        )
    assert summary["resumed_from"].endswith("checkpoint-1") and summary["steps"] == 2
