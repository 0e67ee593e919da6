"""Checkpoints whole or not at all: every ``trainer_state.json`` is written to a temporary file, fsync'd, renamed.

transformers' Trainer writes ``checkpoint-N/trainer_state.json`` last, after the weights, optimizer and RNG
states, but with a plain ``open(..., "w")``: a run killed during that write leaves a half-written file, which
blocked ``--resume``. :class:`AtomicTrainerState`, a callback every DynaWeb trainer adds, makes the trainer's
state save itself through :func:`write_trainer_state` instead, so the file is the old one or the new one. A
checkpoint whose state does not parse all the same (written before this rule, or damaged since) is skipped by
:func:`~dynaweb_trainer.model_loading.last_checkpoint` with a warning.

Ctrl-C (SIGINT), and SIGTERM (``kill <pid>``: a background job ignores SIGINT), are handled the same way by
every training command (``dynaweb-train``, ``dynaweb-sft``,
``dynaweb-train-wm``): :func:`checkpoint_on_interrupt` saves the last finished update as a checkpoint (the
Trainer's own save, so ``--resume`` goes on from it) and raises :class:`TrainingInterrupted`, and the command
prints :func:`exit_interrupted`'s one line and exits 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dynaweb_env.compat import transformers as compat_transformers

#: Exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED_EXIT = 130


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


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a training run; ``str(error)`` says after which update, what was saved and how to go on.

    A :class:`KeyboardInterrupt`, so a caller that does not handle it is still interrupted.
    """


def _how_to_go_on(output_dir: str | os.PathLike[str]) -> str:
    from .model_loading import last_checkpoint

    return "rerun with --resume to go on" if last_checkpoint(output_dir) else "rerun to start again"


def _close_progress_bars(trainer: Any) -> None:
    """Close the progress bars of ``trainer``'s ``ProgressCallback`` (``training_bar``, ``prediction_bar``)."""
    for callback in getattr(getattr(trainer, "callback_handler", None), "callbacks", ()):
        for name in ("training_bar", "prediction_bar"):
            bar = getattr(callback, name, None)
            if bar is not None:
                bar.close()
                setattr(callback, name, None)


def save_after_interrupt(trainer: Any, output_dir: str | os.PathLike[str]) -> str:
    """After Ctrl-C: save ``trainer``'s last finished update as ``checkpoint-<step>``, unless it is saved already.

    A second Ctrl-C while the checkpoint is written is ignored, so the checkpoint is not cut short; a checkpoint
    an interrupted save left without its ``trainer_state.json`` is written again, whole.

    Args:
        trainer: The ``transformers.Trainer`` that was training (``None`` if it was still being built).
        output_dir: The run's output directory.

    Returns:
        The message: ``"interrupted after update N; saved DIR; rerun with --resume to go on"``, or why nothing
        was saved.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _close_progress_bars(trainer)  # the message is the last line, not a progress bar redrawn after it
        step = trainer.state.global_step if trainer is not None else 0
        directory = Path(output_dir) / f"checkpoint-{step}"
        if trainer is None:
            return f"interrupted before training began; nothing saved; {_how_to_go_on(output_dir)}"
        if step == 0:
            saved = "no update had finished, nothing to save"
        elif (directory / "trainer_state.json").is_file():
            saved = f"{directory} was already saved"
        else:
            try:
                compat_transformers.save_checkpoint(trainer)  # the Trainer's own: model, optimizer, counters
                saved = f"saved {directory}"
            except Exception as error:  # noqa: BLE001 - reported; the earlier checkpoints stay as they were
                saved = f"could not save a checkpoint ({type(error).__name__}: {error})"
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    return f"interrupted after update {step}; {saved}; {_how_to_go_on(output_dir)}"


@contextmanager
def checkpoint_on_interrupt(trainer: Any, output_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Wrap ``trainer.train()``: on Ctrl-C, save the last finished update and raise :class:`TrainingInterrupted`.

    Args:
        trainer: The trainer the block trains.
        output_dir: The run's output directory.

    Raises:
        TrainingInterrupted: On Ctrl-C, after :func:`save_after_interrupt`.
    """
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill <pid>` of a background run: as Ctrl-C
    try:
        yield
    except TrainingInterrupted:
        raise
    except KeyboardInterrupt:
        raise TrainingInterrupted(save_after_interrupt(trainer, output_dir)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM while training: stop as Ctrl-C does. A job started in the background by a script ignores SIGINT
    (the shell's rule for background jobs), so ``kill -TERM`` is how such a run is stopped with a checkpoint."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def exit_interrupted(prog: str, interrupt: KeyboardInterrupt, output_dir: str | os.PathLike[str]) -> int:
    """Print the one line a training command stopped by Ctrl-C ends with, to stderr; return 130.

    Args:
        prog: The command's name (``"dynaweb-sft"``).
        interrupt: :class:`TrainingInterrupted` (what was saved), or a plain ``KeyboardInterrupt`` from before
            the trainer trained (loading the model or the data).
        output_dir: The run's output directory.
    """
    if isinstance(interrupt, TrainingInterrupted):
        message = str(interrupt)
    else:
        message = save_after_interrupt(None, output_dir)
    print(f"\n{prog}: {message}", file=sys.stderr, flush=True)
    return INTERRUPTED_EXIT


class TimeBudgetCallback(TrainerCallback):
    """Stops training, with a checkpoint, after the first optimizer step that ends past ``seconds`` of training."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.started is not None and time.perf_counter() - self.started >= self.seconds:
            control.should_save = True
            control.should_training_stop = True
        return control


__all__ = [
    "INTERRUPTED_EXIT",
    "TimeBudgetCallback",
    "AtomicTrainerState",
    "TrainingInterrupted",
    "checkpoint_on_interrupt",
    "exit_interrupted",
    "save_after_interrupt",
    "write_trainer_state",
]
