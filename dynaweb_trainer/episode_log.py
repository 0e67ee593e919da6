"""Every training episode on disk: ``<output_dir>/episodes.jsonl``.

Each line is a trajectory record (:class:`~dynaweb_env.data.schema.Trajectory`, readable with
:func:`~dynaweb_env.data.io.iter_trajectories`) of one rollout slot: a dream, a real-browser episode
or an expert replay, with the pages the policy saw, its actions and reasoning, and the reward. Its
``metadata`` adds the update it trained (``global_step``), the rollout call, the reset options (the
task seed, or the start state without its tree) and, for dreams, the judge's reasoning. The
training curve says *that* a run went wrong; this file says what the policy did and what the world
model and the judge answered::

    from dynaweb_env.data.io import iter_trajectories
    dreams = [t for t in iter_trajectories("outputs/dynaweb-gspo/episodes.jsonl") if t.source == "dream"]

A resumed run first drops the records of updates after its checkpoint (they never reached the
model, and the resumed run redoes them); a fresh run into the same ``output_dir`` starts the file
anew. So the file always matches the updates the saved model went through.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaweb_env.data.io import write_trajectories
from dynaweb_env.data.jsonl import iter_jsonl_lines

from .rollout import EpisodeResult

FILE_NAME = "episodes.jsonl"


def episode_log_path(output_dir: str | os.PathLike[str], process_index: int = 0, num_processes: int = 1) -> Path:
    """``episodes.jsonl``, or ``episodes.rank<N>.jsonl`` per process when several train together."""
    name = FILE_NAME if num_processes == 1 else f"episodes.rank{process_index}.jsonl"
    return Path(output_dir) / name


def keep_updates_before(path: Path, global_step: int) -> int:
    """Rewrite ``path`` with only the records of updates before ``global_step``; returns how many stayed.

    Records are kept byte for byte. A line that is not a record (a write cut short by a crash, bytes that are
    not UTF-8, JSON nested too deeply) is dropped with a warning naming its line
    (:func:`~dynaweb_env.data.jsonl.iter_jsonl_lines`); so is a record without an integer ``global_step``.
    """
    if not path.is_file():
        return 0
    kept = []
    for line in iter_jsonl_lines(path, on_error="skip"):
        metadata = line.record.get("metadata")
        step = metadata.get("global_step") if isinstance(metadata, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step < global_step:
            kept.append(line.text)
    temporary = path.with_suffix(".jsonl.tmp")
    temporary.write_bytes(b"".join(text + b"\n" for text in kept))
    temporary.replace(path)  # atomic: a crash here leaves the old file or the new one, never half of one
    return len(kept)


class EpisodeLog:
    """Appends each rollout call's episodes to ``path`` (trimmed to the resumed step on first use).

    Args:
        path: The JSONL file (see :func:`episode_log_path`).
    """

    def __init__(self, path: Path):
        self.path = path
        self._started = False

    def append(self, results: Sequence[EpisodeResult], global_step: int, call: int) -> None:
        """Write one record per slot of the rollout call ``call``, made for update ``global_step``."""
        if not self._started:
            keep_updates_before(self.path, global_step)
            self._started = True
        records = [
            result.to_trajectory(
                f"step-{global_step}/call-{call}/slot-{slot}", episode_metadata(result, global_step, call)
            )
            for slot, result in enumerate(results)
        ]
        write_trajectories(self.path, records, append=True)


def episode_metadata(result: EpisodeResult, global_step: int, call: int) -> dict[str, Any]:
    """What a record adds to the episode itself: where in training it came from, and the verdict."""
    options = dict(result.options)
    start_state = options.pop("start_state", None)
    if isinstance(start_state, dict):
        # The start page is the record's first step already: keep which state it was, not its tree again.
        options["start_state"] = {key: value for key, value in start_state.items() if key != "axtree"}
    metadata: dict[str, Any] = {
        "global_step": global_step,
        "call": call,
        "options": options,
        "world_model_errors": result.world_model_errors,
    }
    if result.source == "dream":
        metadata["judge_reasoning"] = result.final_info.get("judge_reasoning", "")
        if "resampled" in result.final_info:  # dreamed again from a new start state (``dream_resamples``)
            metadata["resampled"] = result.final_info["resampled"]
    if result.source == "expert":
        metadata["expert_trajectory_id"] = result.final_info.get("trajectory_id", "")
    return metadata
