"""Checkpoints whole or not at all: every ``trainer_state.json`` is written to a temporary file, fsync'd, renamed.

transformers' Trainer writes ``checkpoint-N/trainer_state.json`` last, after the weights, optimizer and RNG
states, but with a plain ``open(..., "w")``: a run killed during that write leaves a half-written file, which
blocked ``--resume``. :class:`AtomicTrainerState`, a callback every DynaWeb trainer adds, makes the trainer's
state save itself through :func:`write_trainer_state` instead, so the file is the old one or the new one. A
checkpoint whose state does not parse all the same (written before this rule, or damaged since) is skipped by
:func:`~dynaweb_trainer.model_loading.last_checkpoint` with a warning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


def write_trainer_state(state: Any, json_path: str | os.PathLike[str]) -> None:
    """Write a ``transformers.TrainerState`` to ``json_path`` whole or not at all.

    transformers' own ``TrainerState.save_to_json`` writes the file (so the format stays its own), but to a
    temporary file beside it, which is fsync'd and renamed over ``json_path``; the directory is fsync'd too.

    Args:
        state: The trainer's state.
        json_path: Where the file goes (``checkpoint-N/trainer_state.json``).
    """
    json_path = Path(json_path)
    temporary = json_path.with_name(json_path.name + ".tmp")
    type(state).save_to_json(state, str(temporary))  # the class's method, not the instance's hook below
    with temporary.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, json_path)
    directory = os.open(json_path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class AtomicTrainerState(TrainerCallback):
    """Make the Trainer write every ``trainer_state.json`` with :func:`write_trainer_state`.

    At train begin the trainer's ``TrainerState`` (the one it saves into each ``checkpoint-N``, also after a
    resume, and in ``Trainer.save_state``) gets a ``save_to_json`` of its own; transformers' class is untouched.
    """

    def on_train_begin(self, args, state, control, **kwargs):
        state.save_to_json = lambda json_path: write_trainer_state(state, json_path)


__all__ = ["AtomicTrainerState", "write_trainer_state"]
