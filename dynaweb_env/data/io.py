"""Reading and writing trajectory files (JSONL) and converting them to Hugging Face datasets.

A corrupt line never costs the rest of the file: :func:`read_trajectories` either skips it with a
warning naming the file and line (``on_error="skip"``, the default) or raises
:class:`CorruptRecordError` naming them (``on_error="raise"``). Corrupt means: bytes that are not
UTF-8, text that is not JSON (or nested too deeply to parse), or a record that breaks the schema
(a NaN reward included). Writing appends whole lines and flushes, so an interrupted writer leaves
at most one partial last line, which a later read skips.

MiniWoB++ page URLs are stored portably and resolved for this machine on reading
(:mod:`~dynaweb_env.data.urls`).
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from . import urls
from .schema import SchemaError, Step, Trajectory
from .urls import portable_urls, resolve_urls

PathLike = str | os.PathLike[str]


class CorruptRecordError(ValueError):
    """A line of a trajectory file is not valid JSON or does not follow the schema."""

    def __init__(self, path: PathLike, line_number: int, reason: str):
        self.path, self.line_number, self.reason = str(path), line_number, reason
        super().__init__(f"{path}:{line_number}: {reason}")


def iter_trajectories(path: PathLike, on_error: Literal["skip", "raise"] = "skip") -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file, one per non-blank line.

    Args:
        path: A ``.jsonl`` file, or an xz-compressed one (``.jsonl.xz``, as the package ships large data).
        on_error: ``"skip"`` warns (naming file and line) and goes on; ``"raise"`` raises
            :class:`CorruptRecordError`.

    Raises:
        FileNotFoundError: If ``path`` does not exist (with the path in the message).
    """
    if on_error not in ("skip", "raise"):
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trajectory file not found: {path}")
    base = urls.miniwob_pages_url()  # once per file: it may look up the installed package
    with lzma.open(path, "rb") if path.suffix == ".xz" else path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                trajectory = Trajectory.from_dict(json.loads(line))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, SchemaError) as error:
                reason = "JSON nested too deeply to read" if isinstance(error, RecursionError) else str(error)
                corrupt = CorruptRecordError(path, line_number, reason)
                if on_error == "raise":
                    raise corrupt from None
                warnings.warn(f"skipping corrupt trajectory record: {corrupt}", stacklevel=2)
                continue
            yield _map_text(trajectory, lambda text: resolve_urls(text, base))


def read_trajectories(
    paths: PathLike | Iterable[PathLike], on_error: Literal["skip", "raise"] = "skip"
) -> list[Trajectory]:
    """Read one JSONL file, several, or every ``*.jsonl`` / ``*.jsonl.xz`` file of a directory."""
    return [trajectory for path in _expand(paths) for trajectory in iter_trajectories(path, on_error)]


def write_trajectories(path: PathLike, trajectories: Iterable[Trajectory], append: bool = False) -> int:
    """Write trajectories as JSONL (one flushed line each); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a" if append else "w", encoding="utf-8") as handle:
        for trajectory in trajectories:
            record = _map_text(trajectory, portable_urls).to_dict()
            handle.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
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
