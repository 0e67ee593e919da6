"""Appending to a JSONL file that an interrupted run may have left cut short: the one repair rule.

A run killed mid-write leaves a last line without its newline, often not valid JSON. Before
appending, :func:`prepare_for_append` removes such a cut-short last line, or gives a whole last
record its missing newline, so the next record starts on a line of its own. A file that is not
JSONL at all (no line parses as a JSON object, e.g. ``notes.txt`` passed by mistake) is refused,
never edited.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

#: Bytes read at a time when looking for the start of the last line.
_CHUNK = 65536


def _last_line_start(handle, size: int) -> int:
    position = size
    while position > 0:
        step = min(_CHUNK, position)
        handle.seek(position - step)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            return position - step + newline + 1
        position -= step
    return 0


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _has_json_object_line(path: Path, end: int) -> bool:
    """Whether any line before byte ``end`` is a JSON object."""
    with path.open("rb") as handle:
        read = 0
        for line in handle:
            read += len(line)
            if read > end:
                return False
            if line.strip() and _is_json_object(line):
                return True
    return False


def prepare_for_append(path: str | os.PathLike[str]) -> None:
    """Make ``path`` safe to append JSON lines to (nothing to do if it is missing or empty).

    Raises:
        ValueError: If the file holds no JSON object line at all: it is not a JSONL file (it is left as is).
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = _last_line_start(handle, size)
        handle.seek(start)
        last = handle.read()
        whole = _is_json_object(last)
        if not whole and not _has_json_object_line(path, start):
            raise ValueError(
                f"{path} is not a JSONL file of records (no line is a JSON object); refusing to append to it"
            )
        if not last:  # the file ends with a newline: the last record is whole
            return
        if whole:
            handle.write(b"\n")  # a whole record that only lacks its newline
            return
        warnings.warn(f"{path}: removing a cut-short last line ({len(last)} bytes) before appending", stacklevel=2)
        handle.truncate(start)


__all__ = ["prepare_for_append"]
