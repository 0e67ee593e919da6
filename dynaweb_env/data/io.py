"""Reading and writing trajectory files (JSONL) and converting them to Hugging Face datasets.

A corrupt line never costs the rest of the file: :func:`read_trajectories` reads through
:mod:`~dynaweb_env.data.jsonl`, the project's one JSONL reader, and either skips a bad record with a
warning naming the file and line (``on_error="skip"``, the default) or raises
:class:`CorruptRecordError` naming them (``on_error="raise"``). Bad means what it means there (bytes that
are not UTF-8, text that is not JSON or nested too deeply, NaN or Infinity, a line that is not an object,
a cut xz stream) or a record that breaks the trajectory schema. Writing goes line by line, flushed;
appending goes through :func:`~dynaweb_env.data.jsonl.append_jsonl`, which first repairs a last line an
interrupted writer cut short.

MiniWoB++ page URLs are stored portably and resolved for this machine on reading
(:mod:`~dynaweb_env.data.urls`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from . import urls
from .jsonl import CorruptRecordError, append_jsonl, dumps_record, iter_jsonl
from .schema import Step, Trajectory
from .urls import portable_urls, resolve_urls

PathLike = str | os.PathLike[str]


def iter_trajectories(path: PathLike, on_error: Literal["skip", "raise"] = "skip") -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file, one per non-blank line.

    Args:
        path: A ``.jsonl`` file, or an xz-compressed one (``.jsonl.xz``, as the package ships large data).
        on_error: ``"skip"`` warns (naming file and line) and goes on; ``"raise"`` raises
            :class:`CorruptRecordError`.

    Raises:
        FileNotFoundError: If ``path`` does not exist (with the path in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trajectory file not found: {path}")
    base = urls.miniwob_pages_url()  # once per file: it may look up the installed package
    for trajectory in iter_jsonl(path, on_error, convert=Trajectory.from_dict):
        yield _map_text(trajectory, lambda text: resolve_urls(text, base))


def read_trajectories(
    paths: PathLike | Iterable[PathLike], on_error: Literal["skip", "raise"] = "skip"
) -> list[Trajectory]:
    """Read one JSONL file, several, or every ``*.jsonl`` / ``*.jsonl.xz`` file of a directory."""
    return [trajectory for path in _expand(paths) for trajectory in iter_trajectories(path, on_error)]


def write_trajectories(path: PathLike, trajectories: Iterable[Trajectory], append: bool = False) -> int:
    """Write trajectories as JSONL, one flushed line each; returns how many were written.

    Args:
        path: The file (its directory is created).
        trajectories: The records.
        append: Append (through :func:`~dynaweb_env.data.jsonl.append_jsonl`, which first repairs a last line
            an interrupted writer cut short, and refuses a file that is not JSONL) instead of starting anew.

    Raises:
        ValueError: If a record holds NaN or Infinity (the records before it are written), or ``append`` and
            ``path`` is not a JSONL file.
    """
    path = Path(path)
    records = (_map_text(trajectory, portable_urls).to_dict() for trajectory in trajectories)
    if append:
        return append_jsonl(path, records)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("wb") as handle:
        for record in records:
            handle.write(dumps_record(record))
            handle.flush()
            count += 1
    return count


def to_hf_dataset(trajectories: Iterable[Trajectory]) -> Any:
    """A ``datasets.Dataset`` with one row per trajectory (requires the ``datasets`` package)."""
    from datasets import Dataset

    rows = [_map_text(trajectory, portable_urls).to_dict() for trajectory in trajectories]
    for row in rows:
        # Arrow needs one type per column: free-form metadata travels as a JSON string.
        row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False)
    return Dataset.from_list(rows)


def from_hf_dataset(dataset: Iterable[dict[str, Any]]) -> list[Trajectory]:
    """Inverse of :func:`to_hf_dataset`."""
    trajectories = []
    base = urls.miniwob_pages_url()
    for row in dataset:
        row = dict(row)
        if isinstance(row.get("metadata"), str):
            row["metadata"] = json.loads(row["metadata"])
        trajectories.append(_map_text(Trajectory.from_dict(row), lambda text: resolve_urls(text, base)))
    return trajectories


def _map_text(trajectory: Trajectory, rewrite: Callable[[str], str]) -> Trajectory:
    """A copy of ``trajectory`` whose steps' text fields (URL, tree, action, reasoning, changes, error)
    went through ``rewrite``; the trajectory itself when nothing changed."""
    names = [field.name for field in dataclasses.fields(Step)]
    steps = [
        dataclasses.replace(step, **{name: rewrite(getattr(step, name)) for name in names}) for step in trajectory.steps
    ]
    if steps == trajectory.steps:
        return trajectory
    return dataclasses.replace(trajectory, steps=steps)


def _expand(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    expanded: list[Path] = []
    for path in map(Path, paths):
        expanded.extend(sorted([*path.glob("*.jsonl"), *path.glob("*.jsonl.xz")]) if path.is_dir() else [path])
    return expanded


__all__ = [
    "CorruptRecordError",
    "iter_trajectories",
    "read_trajectories",
    "write_trajectories",
    "to_hf_dataset",
    "from_hf_dataset",
]
