"""Checkpoint lookup: a checkpoint cut short by a kill is never resumed from, nor loaded."""

from __future__ import annotations

import pytest

from dynaweb_trainer.model_loading import (
    PolicyLoadError,
    checkpoint_step,
    is_complete_checkpoint,
    last_checkpoint,
    resolve_checkpoint_dir,
)


def _checkpoint(root, step, *files):
    directory = root / f"checkpoint-{step}"
    directory.mkdir()
    for name in files:
        (directory / name).write_text("{}")
    return directory


def test_torn_checkpoints_are_skipped(tmp_path):
    done = _checkpoint(tmp_path, 1, "adapter_config.json", "adapter_model.safetensors", "trainer_state.json")
    weights_only = _checkpoint(tmp_path, 3, "adapter_config.json", "adapter_model.safetensors")  # killed mid-save
    _checkpoint(tmp_path, 10, "adapter_config.json")  # killed before the weights: "10" also sorts after "3"
    (tmp_path / "checkpoint-x").mkdir()
    assert last_checkpoint(tmp_path) == str(done)  # what --resume picks
    assert last_checkpoint(tmp_path, resumable=False) == str(weights_only)  # a loadable model is enough to load
    assert is_complete_checkpoint(done) and not is_complete_checkpoint(weights_only)
    assert resolve_checkpoint_dir(tmp_path) == (weights_only, "adapter")
    assert checkpoint_step(done) == 1 and checkpoint_step(None) == 0
    assert last_checkpoint(tmp_path / "missing") is None and last_checkpoint(None) is None


def test_a_directory_without_a_model_is_a_clear_error(tmp_path):
    _checkpoint(tmp_path, 2, "trainer_state.json")
    with pytest.raises(PolicyLoadError, match="holds no model"):
        resolve_checkpoint_dir(tmp_path)
    with pytest.raises(PolicyLoadError, match="not found"):
        resolve_checkpoint_dir(tmp_path / "missing")
